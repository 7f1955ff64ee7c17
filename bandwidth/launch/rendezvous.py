"""The rendezvous the launcher hosts: a TCPStore on the launching host, and a watch on who joined.

The store is ``torch.distributed.TCPStore(is_master=True, wait_for_workers=False)`` serving a
socket the launcher binds itself (``master_listen_fd``) at ``--port`` (default: a free port the
kernel picks, so two launches never race for one), on the address the job uses (``bind_address``):
loopback when every process runs on this host, the ``--master-addr`` when one is given, and every
address only for a job that spans hosts without one. It lives exactly as long as the launch.
Programs reach it at ``MASTER_ADDR:MASTER_PORT`` and keep their keys under the job's secret;
with a secret (always, from launch.py) the store itself listens on a private port of 127.0.0.1
(bound here: torch would bind every interface) and ``MASTER_PORT`` is a ``storegate.Gate`` that
serves only clients proving they know the secret; see ``bandwidth.launch.contract.environment`` and
docs/launcher.md's security section.
"""

from __future__ import annotations

import errno
import ipaddress
import logging
import random
import socket
from collections.abc import Sequence
from datetime import timedelta

from bandwidth.errors import ConfigError
from bandwidth.launch.contract.environment import JOINED_COUNT_KEY, JOINED_KEY_PREFIX
from bandwidth.launch.planning.hostfile import Host
from bandwidth.launch.supervision.supervisor import Failure

log = logging.getLogger(__name__)


def is_loopback(name: str) -> bool:
    """Whether ``name`` (a host name or address) means this host through loopback."""
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return name == "localhost"


def bind_address(hosts: Sequence[Host], master_addr: str | None) -> str:
    """Where the store listens: the address the job is told to use. ``--master-addr`` when given;
    else loopback when every host is this one through loopback; else every address ("" here),
    the one case where the job spans hosts that might reach this one by different routes."""
    if master_addr:
        return master_addr
    return "127.0.0.1" if all(is_loopback(host.name) for host in hosts) else ""


class HostedStore:
    """The job's store as its host holds it: ``store`` (a client of it, for the host's own
    use), ``port`` (where the job reaches it: the gate's) and ``close()``."""

    def __init__(self, store, port: int, gate=None, door=None):
        self.store, self.port, self._gate, self._door = store, port, gate, door

    def out_of_files(self) -> str | None:
        """Why the gate could not take a connection: this process's open-file limit."""
        return None if self._gate is None else self._gate.out_of_files

    def close(self) -> None:
        if self._gate is not None:
            self._gate.close()
        if self._door is not None:
            self._door.close()


def open_store(port: int, timeout_s: float, address: str = "127.0.0.1",
               secret: str = "") -> HostedStore:
    """Host the job's TCPStore on ``address``:``port`` (0: any free port; address "": every
    address); ConfigError if it is taken or not this host's. With ``secret`` the store itself
    listens on a private loopback port and ``address``:``port`` is a storegate.Gate that serves
    only clients that prove they know the secret (``storegate.connect``)."""
    from torch.distributed import TCPStore

    from bandwidth.launch.contract.storedoor import StoreDoor
    from bandwidth.launch.contract.storegate import Gate

    try:
        family, _, _, _, where = socket.getaddrinfo(address or None, port, type=socket.SOCK_STREAM,
                                                    flags=socket.AI_PASSIVE)[0]
    except (OSError, UnicodeError) as err:
        raise ConfigError(f"--master-addr {address[:60]}: cannot resolve it here ({err}); give "
                          "an address of this host") from None
    listener = socket.socket(family, socket.SOCK_STREAM)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(where)
        listener.listen(1024)
    except OSError as err:
        listener.close()
        if err.errno == errno.EADDRINUSE:
            raise ConfigError(f"--port {port}: the port is already in use on this host; choose "
                              "another --port, or leave it out to take a free one") from None
        if err.errno == errno.EADDRNOTAVAIL:
            raise ConfigError(f"--master-addr {address}: not an address of this host; the "
                              "launcher hosts the rendezvous there, so give one of this "
                              "host's addresses") from None
        raise ConfigError(f"--port {port}: cannot host the rendezvous: {err.strerror}") from None
    bound_port = listener.getsockname()[1]
    try:
        if secret:             # the store on a private loopback port, the gate in front
            door = StoreDoor(timeout_s)
            return HostedStore(door.store, bound_port, Gate(listener, door, secret), door)
        store = TCPStore(address or "127.0.0.1", bound_port, is_master=True,
                         wait_for_workers=False, timeout=timedelta(seconds=timeout_s),
                         master_listen_fd=listener.fileno(), use_libuv=True)
    except Exception as err:       # noqa: BLE001 - torch's errors have no common base here
        listener.close()
        raise ConfigError(f"--port {port}: cannot host the rendezvous: {err}") from None
    listener.detach()              # the store owns the listening socket now
    return HostedStore(store, bound_port)


def free_port() -> int:
    """A port that is free now, for the ps-lite scheduler, which binds it itself once it has
    imported MXNet, seconds later and with no retry. Taken below the kernel's ephemeral range
    where one is free there: a port from that range can meanwhile become the source port of any
    outgoing connection (the job's own ranks connecting to the store), and ps-lite then fails
    with "bind failed" (seen on CI). Another program can still take it in between; ps-lite
    reports that."""
    low = _ephemeral_low()
    below = range(max(1024, low - 16384), low)
    candidates = random.Random().sample(below, 64) if len(below) >= 64 else []
    for port in [*candidates, 0]:
        with socket.socket() as sock:
            try:
                sock.bind(("", port))
            except OSError:
                continue
            return sock.getsockname()[1]
    raise ConfigError("no free port for the ps-lite scheduler")


def _ephemeral_low(path: str = "/proc/sys/net/ipv4/ip_local_port_range") -> int:
    """The first port of the kernel's ephemeral range (32768 where it cannot be read)."""
    try:
        with open(path, encoding="ascii") as lines:
            return int(lines.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def address_towards(hosts: Sequence[Host]) -> str:
    """This host's address as the first host sees it: the source address the kernel picks to
    route there (no packet is sent). Falls back to this host's name if the host does not
    resolve here (an ~/.ssh/config alias); ``--master-addr`` overrides both."""
    host = hosts[0]
    try:
        family, _, _, _, address = socket.getaddrinfo(host.name, host.port or 22,
                                                      type=socket.SOCK_DGRAM)[0]
        with socket.socket(family, socket.SOCK_DGRAM) as sock:
            sock.connect(address)
            return sock.getsockname()[0]
    except OSError as err:
        name = socket.getfqdn()
        log.warning("cannot route to %s (%s); using MASTER_ADDR=%s (set --master-addr to choose)",
                    host, err, name)
        return name


class JoinWatch:
    """Fails the launch when some ranks joined with ``environment.join_store`` and others have not
    within ``timeout_s`` of the start. Programs that never use ``join_store`` are not watched.

    ``patient`` (the launcher's default timeout, not one the user gave): past ``timeout_s`` the
    watch waits on while ranks still join, failing once none has joined for ``STALL_S`` (or at
    ``PATIENCE`` x ``timeout_s``): start-up on a crowded machine is slow but steady (100 ranks
    over ssh into 25 lab hosts on 2 cores joined for more than 159 s, the default for 100
    processes), and a rank that is really missing still fails the launch soon after the others
    are in.

    ``stages`` (bandwidth.progress.Stages): a wait longer than its silence says how many ranks
    are in (``# joining: 3 of 4 processes in the rendezvous ... 12 s``; on a terminal, the count
    and seconds in place until all are in), or that none is yet (the processes' start: 25 ssh
    logins and torch imports on the 2-core VM's lab took 21 s)."""

    STALL_S = 20.0
    PATIENCE = 3.0

    def __init__(self, store, labels: Sequence[str], timeout_s: float, where: str,
                 advice: str = "raise launch.py --timeout", patient: bool = False,
                 stages=None):
        self.store, self.labels, self.timeout_s, self.where = store, list(labels), timeout_s, where
        self.advice, self.patient = advice, patient
        self.done = not labels
        self.last_count, self.last_join_s = 0, 0.0
        self.stages = stages
        if stages is not None:
            stages.enter(f"starting {len(self.labels)} processes (none in the rendezvous yet)")

    def __call__(self, elapsed_s: float) -> Failure | None:
        if self.done:
            return None
        joined = self.store.add(JOINED_COUNT_KEY, 0)
        if joined >= len(self.labels):
            self.done = True
            if self.stages is not None:
                self.stages.close()
            return None
        if joined > self.last_count:
            if self.last_count == 0 and self.stages is not None:     # a stage of its own
                self.stages.enter(lambda: f"joining: {self.last_count} of {len(self.labels)} "
                                          "processes in the rendezvous")
            self.last_count, self.last_join_s = joined, elapsed_s
        if self.stages is not None:   # a program that never joins hears "starting" once
            self.stages.tick()
        if joined == 0 or elapsed_s < self.timeout_s:
            return None
        if (self.patient and elapsed_s - self.last_join_s < self.STALL_S
                and elapsed_s < self.PATIENCE * self.timeout_s):
            return None
        missing = [rank for rank in range(len(self.labels))
                   if not self.store.check([f"{JOINED_KEY_PREFIX}{rank}"])]
        names = ", ".join(f"{rank} ({self.labels[rank]})" for rank in missing)
        waited = (f"within {elapsed_s:.0f} s, none in the last {elapsed_s - self.last_join_s:.0f}"
                  if self.patient else f"within {self.timeout_s:g} s")
        return Failure("rendezvous", f"rank{'s' if len(missing) > 1 else ''} {names} never "
                       f"joined the TCPStore at {self.where} {waited} "
                       f"({joined} of {len(self.labels)} did): {self.advice}", 1)
