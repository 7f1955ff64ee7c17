"""The in-memory result of one measured configuration (``Result``), which the report renders and
the result document is written from, and one worker's traffic in a distributed run."""

from __future__ import annotations

from dataclasses import dataclass, field

from bandwidth.ceiling.bounds import Bound
from bandwidth.links.hostmatrix import HostCeiling
from bandwidth.results.costs import StepCosts
from bandwidth.measurement.protocol import Report, Sample, Summary
from bandwidth.plan.plan import Plan


@dataclass(frozen=True)
class WorkerTraffic:
    """One worker's line in a distributed run's summary, gathered to the first worker. Rates use
    the worker's own median step time (the summary takes the slowest worker of each step)."""

    worker: int
    seconds_median: float
    busbw_median: float                  # MXNet's GB/sec per gpu from that time
    network_nbytes: float                # sent per step, and as many received (the mode's Costs)
    server_nbytes: tuple[int, ...] = ()  # of which to and from each server (empty: no servers)
    own_seconds: tuple[float, ...] = ()  # its own time of every iteration (its lines' figures)
    errors: tuple[float, ...] = ()       # and its error on each
    # For its per-rank record (bandwidth.results.ranks), not the document's "workers": its wait
    # in the barrier before each iteration, and per iteration per server (push, pull) seconds.
    wait_seconds: tuple[float, ...] = ()
    peer_seconds: tuple[tuple[tuple[float, float], ...], ...] = ()

    @property
    def network_gbps(self) -> float:
        return self.network_nbytes / self.seconds_median / 1e9

    def server_gbps(self) -> list[float]:
        return [nbytes / self.seconds_median / 1e9 for nbytes in self.server_nbytes]


@dataclass
class Result:
    plan: Plan
    environment: dict
    samples: list[Sample]
    reports: list[Report]
    summary: Summary
    reference: Summary | None
    ceiling: Bound | None = None
    notes: list[str] = field(default_factory=list)
    workers: list[WorkerTraffic] = field(default_factory=list)   # distributed modes only
    worker_hosts: list[str] = field(default_factory=list)   # distributed: each worker's host
    server_hosts: list[str] = field(default_factory=list)   # and each server's, as launched
    host_ceiling: HostCeiling | None = None            # --network-ceiling's figures
    launch: str | None = None          # how the steps were issued (None: as plan.launch says)
    graph_steps: int = 1               # graph launch: replays per timed iteration (--graph-steps)
    link_bound: object = None                           # --link-rate: a linkbound.LinkBound
    link_counters: dict | None = None    # distributed: per host and step (hardware.linkcounters)
    server_takes: str | None = None      # PS modes: the order the servers took pushes in, as run
    cpu_threads: int | None = None     # CPU devices: the torch threads the steps ran with
    costs: StepCosts | None = None     # --compute: what the step cost (bandwidth.results.costs)
    memory: dict | None = None         # distributed: every process's peak RSS (hardware.memory)
    ranks: list = field(default_factory=list)   # distributed: a results.ranks.RankRecord each
    probe: dict | None = None          # dist_nccl: how its neighbour probe ran (ranks.py)

    @property
    def pct_of_ceiling(self) -> float | None:
        """None where there is no ceiling, or it is not a bound (Bound.not_a_bound)."""
        return None if self.ceiling is None else self.ceiling.pct(
            self.ceiling.figure(self.summary))
