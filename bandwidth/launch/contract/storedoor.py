"""The job's TCPStore on a private loopback port that only the gate in front of it can reach.

torch's store server has no authentication, so it listens on 127.0.0.1 at a port of its own and
the job reaches it through ``storegate.Gate``. Loopback, though, is open to every user of the
host. So the private port carries a socket filter (classic BPF, ``SO_ATTACH_FILTER``, which needs
no privilege) that drops every packet but those from the local ports this process has just bound
for its own connections to the store: another program's connection never completes, and nothing
it sends reaches the store.

A port is admitted only while it needs to be: from just before this process connects from it
until the store's side of that connection exists (the connection then keeps the filter it was
made with), or until it ends. While admitted, the port is bound by this process, so no other
socket can take it.

torch's own client of a store it hosts (``is_master=True``) connects from a port this process
cannot choose, so the filter goes on right after the store is up, and the connections the store
has by then are checked: each must be this process's own, else the store is discarded and
another one opened (``OPEN_TRIES`` times). Where the filter cannot be set (not Linux), the port
is left open to this host's users, and the log says so.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import socket
import threading
from datetime import timedelta

from bandwidth.errors import ConfigError

log = logging.getLogger(__name__)

SO_ATTACH_FILTER = getattr(socket, "SO_ATTACH_FILTER", 26)
OPEN_TRIES = 3
# Admitted ports are pruned (those whose connection the store has accepted) past this many; two
# instructions each, within classic BPF's 4096.
PRUNE_PAST = 32
MAX_ADMITTED = 2000
_LOAD_SOURCE_PORT = 0x28        # BPF_LD | BPF_H | BPF_ABS: 16 bits at offset 0 of the TCP header
_JUMP_IF_EQUAL = 0x15           # BPF_JMP | BPF_JEQ | BPF_K
_RETURN = 0x06                  # BPF_RET | BPF_K
_KEEP, _DROP = 0xFFFFFFFF, 0
_ESTABLISHED, _SYN_RECV = "01", "03"


class _Filter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte),
                ("k", ctypes.c_uint)]


class _Program(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_Filter))]


def _program(ports) -> list[tuple[int, int, int, int]]:
    """Keep a packet whose TCP source port is one of ``ports``; drop every other."""
    code = [(_LOAD_SOURCE_PORT, 0, 0, 0)]
    for port in sorted(ports):
        code += [(_JUMP_IF_EQUAL, 0, 1, port), (_RETURN, 0, 0, _KEEP)]
    return code + [(_RETURN, 0, 0, _DROP)]


def _attach(sock: socket.socket, ports) -> None:
    code = _program(ports)
    array = (_Filter * len(code))(*[_Filter(*insn) for insn in code])
    program = _Program(len(code), ctypes.cast(array, ctypes.POINTER(_Filter)))
    sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, bytes(program))


_LOOPBACK = {"0100007F", "0000000000000000FFFF00000100007F"}    # 127.0.0.1, also v4-mapped


def _loopback_port(address: str) -> int | None:
    """The port of a /proc/net/tcp{,6} address that is 127.0.0.1 (None: another address)."""
    host, port = address.split(":")
    return int(port, 16) if host in _LOOPBACK else None


def _connections_to(port: int) -> list[tuple[int, str, str]]:
    """(remote port, state, client inode) of the store's side of every connection to
    127.0.0.1:``port``; the client's inode is the socket of this host at the other end ("0"
    where none is seen; torch's client is an IPv6 socket, so both tables are read)."""
    server, client = [], {}
    for path in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(FileNotFoundError), open(path) as table:
            for line in table.read().splitlines()[1:]:
                fields = line.split()
                local, remote = _loopback_port(fields[1]), _loopback_port(fields[2])
                if local == port and fields[3] != "0A" and remote is not None:
                    server.append((remote, fields[3]))
                elif remote == port and local is not None:
                    client[local] = fields[9]
    return [(remote, state, client.get(remote, "0")) for remote, state in server]


def _own_socket_inodes() -> set[str]:
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/self/fd/{fd}")
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    return inodes


class StoreDoor:
    """A TCPStore (``store``, this process's own client of it) listening on 127.0.0.1:``port``,
    reachable only through ``connect`` (and by the client torch made with it)."""

    def __init__(self, timeout_s: float):
        for _ in range(OPEN_TRIES):
            self._open(timeout_s)
            strangers = self._strangers()
            if not strangers:
                return
            log.warning("the job's store at 127.0.0.1:%d took a connection from another "
                        "program (from port %s) before its filter was on; opening another",
                        self.port, ", ".join(map(str, strangers)))
            self.close()
        raise ConfigError(f"cannot host the job's store: another program on this host connected "
                          f"to its private port before the filter was on, {OPEN_TRIES} times")

    def _open(self, timeout_s: float) -> None:
        from torch.distributed import TCPStore

        private = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            private.bind(("127.0.0.1", 0))
            private.listen(1024)
            # Given a host and port, torch's store server binds every interface whatever the host
            # (seen with torch 2.13: *:PORT), so the socket is bound here and handed over.
            self.store = TCPStore("127.0.0.1", private.getsockname()[1], is_master=True,
                                  wait_for_workers=False, timeout=timedelta(seconds=timeout_s),
                                  master_listen_fd=private.fileno(), use_libuv=True)
        except BaseException:
            private.close()
            raise
        self.port = private.getsockname()[1]
        # Our own handle on the listening socket (torch owns the original descriptor).
        self._listener = socket.socket(fileno=os.dup(private.detach()))
        self._admitted: set[int] = set()
        self._lock = threading.Lock()
        try:
            _attach(self._listener, ())
            self.filtered = True
        except OSError as err:
            self.filtered = False
            log.info("the job's store at 127.0.0.1:%d is open to this host's users: no socket "
                     "filter here (%s)", self.port, err)

    def _strangers(self) -> list[int]:
        """The remote ports of connections the store has from other processes (None, normally:
        only torch's own client of it, made before the filter was on)."""
        if not self.filtered:
            return []
        ours = _own_socket_inodes()
        return [remote for remote, state, inode in _connections_to(self.port)
                if state == _ESTABLISHED and inode not in ours]

    def connect(self, timeout_s: float) -> tuple[socket.socket, int]:
        """A connection to the store from a port admitted for it; ``forget(port)`` when it ends."""
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
            if self.filtered:
                self._admit(port)
            sock.settimeout(timeout_s)
            sock.connect(("127.0.0.1", self.port))
        except BaseException:
            with contextlib.suppress(UnboundLocalError):
                self.forget(port)
            sock.close()
            raise
        return sock, port

    def _admit(self, port: int) -> None:
        with self._lock:
            if len(self._admitted) >= PRUNE_PAST:
                accepted = {remote for remote, state, _ in _connections_to(self.port)
                            if state != _SYN_RECV}
                self._admitted -= accepted
            if len(self._admitted) >= MAX_ADMITTED:
                raise ConnectionError(f"{len(self._admitted)} connections to the job's store "
                                      "are still being made")
            self._admitted.add(port)
            _attach(self._listener, self._admitted)

    def forget(self, port: int) -> None:
        """``port``'s connection ended (before its socket closes, so that the port is never
        admitted while another program could bind it)."""
        if not self.filtered:
            return
        with self._lock:
            if port in self._admitted:
                self._admitted.discard(port)
                with contextlib.suppress(OSError):
                    _attach(self._listener, self._admitted)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._listener.close()
        del self.store

