"""Every rank of a distributed run, one record each (``RankRecord``): where it ran, its role, its
time in every measured step, what it sent and received per step, and, where a mode talks to its
peers directly (the parameter servers), its time and rate with each of them (``PeerRate``).

The workers' records are built on the first worker from what every worker gathered to it
(``results.result.WorkerTraffic``); a server's from its own steps, gathered over the whole job
(bandwidth.execution.roles). The result document holds them under ``"ranks"``, in rank order
(the workers, then the servers); bandwidth.results.stragglers judges them.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

WORKER, SERVER = "worker", "server"


@dataclass(frozen=True)
class PeerRate:
    """A worker's exchange with one server, per measured step: seconds from posting its messages
    until its last push to that server had left (``push_seconds``) and until the server's last
    answer was in (``pull_seconds``), for ``nbytes`` each way."""

    role: str
    index: int
    host: str
    nbytes: int
    push_seconds: tuple[float, ...]
    pull_seconds: tuple[float, ...]

    @property
    def push_gbps(self) -> float | None:
        return _gbps(self.nbytes, self.push_seconds)

    @property
    def pull_gbps(self) -> float | None:
        return _gbps(self.nbytes, self.pull_seconds)

    def to_dict(self) -> dict:
        return {"role": self.role, "index": self.index, "host": self.host, "nbytes": self.nbytes,
                "push_gbps": self.push_gbps, "pull_gbps": self.pull_gbps,
                "push_seconds": list(self.push_seconds), "pull_seconds": list(self.pull_seconds)}


@dataclass(frozen=True)
class RankRecord:
    rank: int                          # in the job's world: the workers, then the servers
    role: str                          # "worker" or "server"
    index: int                         # its worker or server number
    host: str                          # as launched (the hosts file's name or address)
    step_seconds: tuple[float, ...]    # its own time of every measured step (servers: serving it)
    wait_seconds: tuple[float, ...]    # workers: its wait in the barrier before each step
    nbytes_sent: float                 # per step
    nbytes_received: float
    peers: tuple[PeerRate, ...] = ()   # parameter-server workers: one per server

    @property
    def label(self) -> str:
        return f"{self.role} {self.index}"

    @property
    def step_median(self) -> float | None:
        return statistics.median(self.step_seconds) if self.step_seconds else None

    def to_dict(self) -> dict:
        return {"rank": self.rank, "role": self.role, "index": self.index, "host": self.host,
                "step_seconds": list(self.step_seconds),
                "step_seconds_median": self.step_median,
                "wait_seconds": list(self.wait_seconds),
                "nbytes_sent": self.nbytes_sent, "nbytes_received": self.nbytes_received,
                "peers": [p.to_dict() for p in self.peers]}


def _gbps(nbytes: float, seconds: tuple[float, ...]) -> float | None:
    median = statistics.median(seconds) if seconds else 0.0
    return nbytes / median / 1e9 if median > 0 else None


def rank_records(workers, worker_hosts: list[str], server_hosts: list[str] | None = None,
                 server_steps: list[list[float]] | None = None) -> list[RankRecord]:
    """The job's records: ``workers`` (WorkerTraffic, gathered, in worker order) on
    ``worker_hosts``; the servers on ``server_hosts`` with their own step times
    (``server_steps``, one list per server; empty where none)."""
    server_hosts = server_hosts or []
    out = []
    for w, traffic in enumerate(workers):
        peers = tuple(
            PeerRate(SERVER, s, server_hosts[s] if s < len(server_hosts) else "",
                     int(nbytes), tuple(step[s][0] for step in traffic.peer_seconds),
                     tuple(step[s][1] for step in traffic.peer_seconds))
            for s, nbytes in enumerate(traffic.server_nbytes)) if traffic.peer_seconds else ()
        out.append(RankRecord(w, WORKER, traffic.worker,
                              worker_hosts[w] if w < len(worker_hosts) else "",
                              tuple(traffic.own_seconds), tuple(traffic.wait_seconds),
                              traffic.network_nbytes, traffic.network_nbytes, peers))
    shares = workers[0].server_nbytes if workers else ()
    for s, host in enumerate(server_hosts):
        carried = float(len(workers) * (shares[s] if s < len(shares) else 0))
        steps = tuple((server_steps or [])[s]) if s < len(server_steps or []) else ()
        out.append(RankRecord(len(workers) + s, SERVER, s, host, steps, (), carried, carried))
    return out
