"""The rendezvous the launcher hosts: a TCPStore on the launching host, and a watch on who joined.

The store is ``torch.distributed.TCPStore(is_master=True, wait_for_workers=False)`` listening on
every address of the launching host at ``--port`` (default: a free port the kernel picks, so two
launches never race for one). It lives exactly as long as the launch. Programs reach it at
``MASTER_ADDR:MASTER_PORT``; see ``bandwidth.launch.contract``.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Sequence
from datetime import timedelta

from bandwidth.errors import ConfigError
from bandwidth.launch.contract import JOINED_COUNT_KEY, JOINED_KEY_PREFIX
from bandwidth.launch.hostfile import Host
from bandwidth.launch.supervisor import Failure

log = logging.getLogger(__name__)


def open_store(port: int, timeout_s: float):
    """Host the job's TCPStore on ``port`` (0: any free port); ConfigError if it is taken."""
    from torch.distributed import DistNetworkError, TCPStore

    try:
        return TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False,
                        timeout=timedelta(seconds=timeout_s))
    except DistNetworkError as err:
        if "EADDRINUSE" in str(err):
            raise ConfigError(f"--port {port}: the port is already in use on this host; choose "
                              "another --port, or leave it out to take a free one") from None
        raise ConfigError(f"--port {port}: cannot host the rendezvous: {err}") from None


def free_port() -> int:
    """A port that is free now (the ps-lite scheduler must bind it itself, so it is released
    again; another program could take it in between, which ps-lite would report)."""
    with socket.socket() as sock:
        sock.bind(("", 0))
        return sock.getsockname()[1]


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
    """Fails the launch when some ranks joined with ``contract.join_store`` and others have not
    within ``timeout_s`` of the start. Programs that never use ``join_store`` are not watched."""

    def __init__(self, store, labels: Sequence[str], timeout_s: float, where: str):
        self.store, self.labels, self.timeout_s, self.where = store, list(labels), timeout_s, where
        self.done = not labels

    def __call__(self, elapsed_s: float) -> Failure | None:
        if self.done:
            return None
        joined = self.store.add(JOINED_COUNT_KEY, 0)
        if joined >= len(self.labels):
            self.done = True
            return None
        if joined == 0 or elapsed_s < self.timeout_s:
            return None
        missing = [rank for rank in range(len(self.labels))
                   if not self.store.check([f"{JOINED_KEY_PREFIX}{rank}"])]
        names = ", ".join(f"{rank} ({self.labels[rank]})" for rank in missing)
        return Failure("rendezvous", f"rank{'s' if len(missing) > 1 else ''} {names} never "
                       f"joined the TCPStore at {self.where} within {self.timeout_s:g} s "
                       f"({joined} of {len(self.labels)} did)", 1)
