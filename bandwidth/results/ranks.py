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
class NeighbourRate:
    """A ``dist_nccl`` worker's probe with one neighbour (bandwidth.measurement.probe), per
    exchange of ``nbytes`` each way: the seconds until this worker's bytes were in at the
    neighbour (``send_seconds``, timed there) and until the neighbour's were in here
    (``recv_seconds``, timed here). A worker of several devices: its devices' bytes together,
    until the last of them was in."""

    role: str
    index: int
    host: str
    nbytes: int
    send_seconds: tuple[float, ...]
    recv_seconds: tuple[float, ...]

    @property
    def send_gbps(self) -> float | None:
        return _gbps(self.nbytes, self.send_seconds)

    @property
    def recv_gbps(self) -> float | None:
        return _gbps(self.nbytes, self.recv_seconds)

    def to_dict(self) -> dict:
        return {"role": self.role, "index": self.index, "host": self.host, "nbytes": self.nbytes,
                "send_gbps": self.send_gbps, "recv_gbps": self.recv_gbps,
                "send_seconds": list(self.send_seconds),
                "recv_seconds": list(self.recv_seconds)}


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
    # Parameter-server workers: a PeerRate per server; dist_nccl's with the probe: a
    # NeighbourRate per neighbour.
    peers: tuple = ()
    # A sync parameter server: per measured step, the seconds it was blocked on each worker's
    # pushes, in worker order (bandwidth.stores.psserver.Served).
    waited_on: tuple = ()

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
                "peers": [p.to_dict() for p in self.peers],
                "waited_on": [list(step) for step in self.waited_on]}


def _gbps(nbytes: float, seconds: tuple[float, ...]) -> float | None:
    median = statistics.median(seconds) if seconds else 0.0
    return nbytes / median / 1e9 if median > 0 else None


def rank_records(workers, worker_hosts: list[str], server_hosts: list[str] | None = None,
                 server_steps: list[list[float]] | None = None,
                 server_waits: list[list[list[float]]] | None = None,
                 neighbours: list[tuple[NeighbourRate, ...]] | None = None) -> list[RankRecord]:
    """The job's records: ``workers`` (WorkerTraffic, gathered, in worker order) on
    ``worker_hosts``; the servers on ``server_hosts`` with their own step times
    (``server_steps``, one list per server; empty where none) and waits on each worker
    (``server_waits``, likewise); ``dist_nccl``'s probe, each worker's ``neighbours``
    (``probe_neighbours``)."""
    server_hosts = server_hosts or []
    out = []
    for w, traffic in enumerate(workers):
        peers = neighbours[w] if neighbours and w < len(neighbours) else tuple(
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
        waits = (tuple(tuple(step) for step in server_waits[s])
                 if s < len(server_waits or []) else ())
        out.append(RankRecord(len(workers) + s, SERVER, s, host, steps, (), carried, carried,
                              waited_on=waits))
    return out


def probe_neighbours(probe: dict, hosts: list[str]) -> list[tuple[NeighbourRate, ...]]:
    """Each worker's NeighbourRate with each neighbour, from the probe's gathered table
    (bandwidth.measurement.probe.probe_task's ``"ranks"``): the directed path a -> b is what
    worker b's devices timed receiving from worker a, exchange by exchange, the slowest device's
    time where a worker has several (their bytes cross the host's link together)."""
    ranks = probe.get("ranks") or []
    if not ranks:
        return []
    per_worker = 1 + max(int(r["local"]) for r in ranks)
    paths: dict[tuple[int, int], tuple[float, ...]] = {}
    for r in ranks:
        for source, seconds in r["recv_seconds"].items():
            key = (int(source), int(r["worker"]))
            old = paths.get(key)
            paths[key] = (tuple(seconds) if old is None
                          else tuple(max(a, b) for a, b in zip(old, seconds)))
    nbytes = int(probe["nbytes"]) * per_worker
    out = []
    for w in range(len(ranks) // per_worker):
        peers = sorted({a for a, b in paths if b == w} | {b for a, b in paths if a == w})
        out.append(tuple(NeighbourRate(WORKER, p, hosts[p] if p < len(hosts) else "", nbytes,
                                       paths.get((w, p), ()), paths.get((p, w), ()))
                         for p in peers))
    return out


def probe_summary(probe: dict | None) -> dict | None:
    """The document's ``"probe"``: how the probe ran (its per-rank table is in the records)."""
    if not probe:
        return None
    ranks = probe.get("ranks") or []
    per_worker = 1 + max((int(r["local"]) for r in ranks), default=0)
    return {"seconds": probe["seconds"], "nbytes": probe["nbytes"], "repeats": probe["repeats"],
            "shifts": list(probe["shifts"]), "backend": probe["backend"],
            "workers": len(ranks) // per_worker, "ranks_per_worker": per_worker}
