"""A gate in front of a job's TCPStore: nobody without the job's secret gets a request served.

torch's TCPStore serves whoever connects: list its keys, read, write, delete them, or wait on one.
So the store a launcher (or measure.py, for its per-device ranks) hosts listens on loopback at a
private port, and the job's address and port (MASTER_ADDR:MASTER_PORT) are a ``Gate``'s:

1. the client opens with ``MAGIC``; the gate answers 16 random bytes (the challenge);
2. the client answers HMAC-SHA256(secret, ``MAGIC`` + challenge), all within ``HANDSHAKE_S``;
3. on a right answer the gate connects to the private store and forwards bytes both ways
   unchanged (torch's own store protocol: no data format of ours); on a wrong, late or missing
   one it closes the connection before a single byte reaches the store.

A client that opens with anything but ``MAGIC`` (torch's own TCPStore client: a program that
opens the store itself with ``init_method="env://"``) is served only when it is a process this
launcher started on this host (its socket found in /proc among the launcher's descendants'); its
first bytes are passed on unchanged.

A program of the job connects with ``connect(host, port, secret)``: a ``ClientRelay`` in the
program listens on a loopback port of its own, answers the challenge for every connection that
comes from this very process (checked in /proc: another user of the host cannot borrow it) and
hands torch's TCPStore client that port. The secret itself never crosses the network.

What this protects and what it does not is in docs/launcher.md (Security).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import hmac
import logging
import os
import resource
import secrets
import socket
import threading
import time
from collections.abc import Callable
from datetime import timedelta

from bandwidth.launch.contract.storedoor import StoreDoor

log = logging.getLogger(__name__)

MAGIC = b"bandwidth-store-gate-1\n"
CHALLENGE_BYTES = 16
HANDSHAKE_S = 5.0          # a stranger holds a connection at most this long, and nothing else


def answer(secret: str, challenge: bytes) -> bytes:
    return hmac.new(secret.encode(), MAGIC + challenge, hashlib.sha256).digest()


def _read_exactly(sock: socket.socket, count: int) -> bytes:
    data = b""
    while len(data) < count:
        chunk = sock.recv(count - len(data))
        if not chunk:
            raise ConnectionError("closed during the handshake")
        data += chunk
    return data


def _pipe(src: socket.socket, dst: socket.socket, on_end: Callable[[], None]) -> None:
    """Forward ``src``'s bytes to ``dst`` until either side closes; then ``on_end()`` and close
    both."""
    try:
        while True:
            chunk = src.recv(1 << 16)
            if not chunk:
                break
            dst.sendall(chunk)
    except OSError:
        pass
    finally:
        on_end()
        for sock in (src, dst):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                sock.close()


def _splice(a: socket.socket, b: socket.socket, on_end: Callable[[], None] = lambda: None) -> None:
    a.settimeout(None)
    b.settimeout(None)
    for src, dst in ((a, b), (b, a)):
        threading.Thread(target=_pipe, args=(src, dst, on_end), daemon=True,
                         name="store-gate-pipe").start()


class _Listener:
    """A listening socket served by one accepting thread until ``close``."""

    def __init__(self, sock: socket.socket):
        self._sock = sock
        self.port = sock.getsockname()[1]
        self._closed = False
        threading.Thread(target=self._accept_loop, daemon=True, name="store-gate").start()

    #: why this process could not take a connection: it ran out of open files (``ulimit -n``),
    #: which fails the job in one line that says so (bandwidth.launch.driver), not a worker
    out_of_files: str | None = None

    def _accept_loop(self) -> None:
        while not self._closed:
            try:
                conn, _ = self._sock.accept()
            except OSError as err:
                if err.errno not in (errno.EMFILE, errno.ENFILE) or self._closed:
                    return
                soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
                self.out_of_files = (
                    f"the launcher ran out of open files (its limit, ulimit -n, is {soft}) "
                    f"taking a connection to the job's store at port {self.port}: "
                    f"{err.strerror}; raise the limit, or look for a program holding "
                    "connections to that port")
                time.sleep(0.1)            # the connection waits in the backlog meanwhile
                continue
            threading.Thread(target=self._serve, args=(conn,), daemon=True,
                             name="store-gate-handshake").start()

    def _serve(self, conn: socket.socket) -> None:
        raise NotImplementedError

    def close(self) -> None:
        self._closed = True
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            self._sock.close()


class Gate(_Listener):
    """The job's public endpoint (``listener``, already bound and listening) in front of the
    store behind ``door`` (a storedoor.StoreDoor: nothing but the gate reaches it)."""

    def __init__(self, listener: socket.socket, door: StoreDoor, secret: str):
        self._door = door
        self._secret = secret
        self._hinted = False        # the hint below is said once per launch
        super().__init__(listener)

    def _serve(self, conn: socket.socket) -> None:
        try:
            conn.settimeout(HANDSHAKE_S)
            first = conn.recv(len(MAGIC))
            if first[:1] == MAGIC[:1]:
                opening = first + _read_exactly(conn, len(MAGIC) - len(first))
                challenge = secrets.token_bytes(CHALLENGE_BYTES)
                if opening != MAGIC:
                    raise ConnectionError("not the gate's handshake")
                conn.sendall(challenge)
                if not hmac.compare_digest(_read_exactly(conn, 32),
                                           answer(self._secret, challenge)):
                    raise ConnectionError("a wrong answer to the challenge")
                first = b""
            elif not first or not from_descendant(conn):
                if first and not self._hinted:      # torch's own client, from elsewhere
                    self._hinted = True
                    log.warning("refused a rendezvous client at %s that does not answer the "
                                "gate's handshake: a program that opens the store itself "
                                "(init_method env://) on another host; join with "
                                "bandwidth.launch.contract.environment.join_store, or launch with "
                                "--open-store (no gate, as torchrun)", _peer(conn))
                raise ConnectionError("neither the handshake nor a process of this launch")
            store, port = self._door.connect(HANDSHAKE_S)
        except OSError as err:
            log.info("store gate: refused %s: %s", _peer(conn), err)
            with contextlib.suppress(OSError):
                conn.close()
            return
        try:
            store.sendall(first)
        except OSError:
            self._door.forget(port)
            for sock in (conn, store):
                sock.close()
            return
        _splice(conn, store, lambda: self._door.forget(port))


class ClientRelay(_Listener):
    """A loopback port in this process that leads, through the handshake, to the gate at
    ``host``:``port``; only connections from this process are taken."""

    def __init__(self, host: str, port: int, secret: str, timeout_s: float):
        self._target = (host, port)
        self._secret = secret
        self._timeout_s = timeout_s
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        sock.listen(64)
        super().__init__(sock)

    def _serve(self, conn: socket.socket) -> None:
        if not from_this_process(conn):
            log.warning("store relay: refused a connection from another process (%s)",
                        _peer(conn))
            conn.close()
            return
        try:
            upstream = open_line(*self._target, self._secret, min(self._timeout_s, 30))
        except OSError as err:
            log.warning("store relay: cannot reach the job's store at %s:%d: %s",
                        *self._target, err)
            conn.close()
            return
        _splice(conn, upstream)


def open_line(host: str, port: int, secret: str, timeout_s: float) -> socket.socket:
    """A connection to the gate at ``host``:``port`` that has answered its challenge (with no
    ``secret``: a plain connection, to a store without a gate); what is sent on it next reaches
    the store. Raises OSError."""
    sock = socket.create_connection((host, port), timeout=timeout_s)
    if not secret:
        return sock
    try:
        sock.settimeout(HANDSHAKE_S)
        sock.sendall(MAGIC)
        sock.sendall(answer(secret, _read_exactly(sock, CHALLENGE_BYTES)))
    except OSError:
        sock.close()
        raise
    return sock


def _peer(conn: socket.socket) -> str:
    try:
        host, port = conn.getpeername()[:2]
        return f"{host}:{port}"
    except OSError:
        return "?"


def _proc_address(raw: bytes, port: int) -> str:
    """An address as /proc/net/tcp{,6} writes it: 32-bit words in host (little-endian) order."""
    return "".join(raw[i:i + 4][::-1].hex().upper() for i in range(0, len(raw), 4)) + \
        f":{port:04X}"


def _proc_addresses(host: str, port: int) -> set[str]:
    """Every way /proc/net/tcp{,6} may write ``host``:``port`` (an IPv4 address may be an IPv6
    socket's v4-mapped one, as torch's client's is)."""
    if host.startswith("::ffff:") and "." in host:
        host = host[7:]
    if ":" in host:
        return {_proc_address(socket.inet_pton(socket.AF_INET6, host), port)}
    v4 = socket.inet_aton(host)
    return {_proc_address(v4, port), _proc_address(bytes(10) + b"\xff\xff" + v4, port)}


def _socket_inode(conn: socket.socket) -> str | None:
    """The inode of the socket at the other end of ``conn`` (a connection from this host), from
    /proc/net/tcp and tcp6: the entry whose two ends are ``conn``'s, reversed. Matching the peer's
    end alone found, where many connections come and go, an older connection's entry from the
    same port (TIME_WAIT, inode 0) and refused a process its own relay. None where it is not a
    socket of this host."""
    local = _proc_addresses(*conn.getpeername()[:2])
    remote = _proc_addresses(*conn.getsockname()[:2])
    for path in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(FileNotFoundError):
            with open(path) as table:
                for line in table.read().splitlines()[1:]:
                    fields = line.split()
                    if fields[1] in local and fields[2] in remote and fields[9] != "0":
                        return fields[9]
    return None


def _holds(pid: str, inode: str) -> bool:
    target = f"socket:[{inode}]"
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/{pid}/fd/{fd}") == target:
                return True
    return False


def from_this_process(conn: socket.socket) -> bool:
    """Whether the other end of the loopback connection ``conn`` is a socket of this process.
    Where /proc cannot tell (not Linux), True."""
    try:
        inode = _socket_inode(conn)
    except (OSError, ValueError):
        return True
    return inode is not None and _holds("self", inode)


def from_descendant(conn: socket.socket) -> bool:
    """Whether the other end of ``conn`` is a socket of a process below this one on this host."""
    try:
        inode = _socket_inode(conn)
    except (OSError, ValueError):
        return False
    if inode is None:
        return False
    children: dict[str, list[str]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError, IndexError):
                with open(f"/proc/{entry}/stat") as stat:
                    parent = stat.read().rsplit(")", 1)[1].split()[1]
                children.setdefault(parent, []).append(entry)
    frontier, seen = [str(os.getpid())], set()
    while frontier:
        pid = frontier.pop()
        for child in children.get(pid, ()):
            if child not in seen:
                seen.add(child)
                if _holds(child, inode):
                    return True
                frontier.append(child)
    return False


def connect(host: str, port: int, secret: str, timeout_s: float, gated: bool = True):
    """A TCPStore client of the job's store at ``host``:``port`` through its gate (not
    ``gated``, or no secret: the store itself, as under torchrun). The relay lives as long as
    the process."""
    from torch.distributed import TCPStore

    timeout = timedelta(seconds=timeout_s)
    if not secret or not gated:
        return TCPStore(host, port, is_master=False, timeout=timeout)
    relay = ClientRelay(host, port, secret, timeout_s)
    return TCPStore("127.0.0.1", relay.port, is_master=False, timeout=timeout)
