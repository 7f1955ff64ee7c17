"""Where each process of a job runs: the placement rule, written once for every launcher.

Processes are numbered in rank order: workers ``0..n-1``, then servers ``n..n+s-1`` (then, for
``--launcher mpi`` only, the scheduler). ``--placement`` chooses the policy
(``bandwidth.launch.planning.placement``: round-robin, servers-apart, count:N). Round-robin, the
default: they are dealt one at a time to the hosts in file order, cycling, and a host whose
``slots=N`` are taken is skipped. Example, hosts ``a slots=1``, ``b``, ``c`` with ``-n 3 -s 2``:
worker 0 -> a, worker 1 -> b, worker 2 -> c, server 0 -> b (a is full), server 1 -> c. With as many
hosts as workers and servers each, every host gets one worker and one server (MXNet's ssh launcher
put servers on the first hosts and workers after them, so hosts were loaded unevenly when there were
more hosts than either).

``LOCAL_RANK`` counts the world ranks on the same host in rank order; ``LOCAL_WORLD_SIZE`` is
their number. The scheduler is not a world rank and is not counted.
"""

from __future__ import annotations

import logging
import os
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from bandwidth.launch.planning.config import LaunchConfig
from bandwidth.launch.contract.environment import Job, Role
from bandwidth.launch.planning.hostfile import Host
from bandwidth.launch.planning.placement import deal, place

log = logging.getLogger(__name__)


def local_ranks(placed: Sequence[Host]) -> list[tuple[int, int]]:
    """``(local_rank, local_world_size)`` of each placed process, in the same order."""
    totals = Counter(placed)
    seen: Counter = Counter()
    out = []
    for host in placed:
        out.append((seen[host], totals[host]))
        seen[host] += 1
    return out


def slot_counts(placed: Sequence[Host]) -> list[tuple[Host, int]]:
    """Each distinct host with its number of processes, in first-use order (for ``mpirun -H``)."""
    return list(Counter(placed).items())


@dataclass(frozen=True)
class Plan:
    """Everything a launcher backend needs. ``roles``: the world ranks in rank order, then the
    scheduler if any; ``hosts``: where each placed process runs (the world ranks, and under mpi
    also the scheduler; otherwise the scheduler runs on the launching host)."""

    config: LaunchConfig
    job: Job
    roles: tuple[Role, ...]
    hosts: tuple[Host, ...]
    environ: Mapping[str, str]     # the launcher's environment, read once by the CLI

    @property
    def world(self) -> tuple[tuple[Role, Host], ...]:
        n = self.job.world_size
        return tuple(zip(self.roles[:n], self.hosts[:n], strict=True))

    @property
    def scheduler(self) -> Role | None:
        return self.roles[self.job.world_size] if len(self.roles) > self.job.world_size else None


def make_plan(config: LaunchConfig, job: Job, hosts: Sequence[Host], *, place_scheduler: bool,
              environ: Mapping[str, str]) -> Plan:
    """Place the job on ``hosts``. The scheduler (``config.scheduler``) is dealt like the others
    when ``place_scheduler`` (mpi), else it runs on the launching host (``MASTER_ADDR``)."""
    count = job.world_size + (1 if config.scheduler and place_scheduler else 0)
    if config.placement == "round-robin":
        placed = deal(hosts, count)
    else:                                  # placement's policies; mpi's scheduler: host 1
        placed = place(hosts, job.num_workers, job.num_servers, config.placement)
        placed += list(hosts[:count - len(placed)])
    world = placed[:job.world_size]
    roles = [job.role(i, host.name, local)
             for i, (host, local) in enumerate(zip(world, local_ranks(world), strict=True))]
    if config.scheduler:
        roles.append(job.role(job.world_size, placed[-1].name if place_scheduler
                              else job.master_addr))
    return Plan(config, job, tuple(roles), tuple(placed),
                one_thread_where_crowded(environ, config.env, world))


def one_thread_where_crowded(environ: Mapping[str, str], env_flags, world,
                             cores: int | None = None) -> Mapping[str, str]:
    """``environ`` with OMP_NUM_THREADS set where a host runs several of the job's processes and
    neither the launcher's environment nor ``--env`` sets it: the cores over the most processes
    on one host, at least 1 (torchrun sets 1). Each process's torch otherwise starts a thread per
    core, and where processes outnumber cores their OpenMP threads spin between operations on
    cores the others need (50 workers and 5 servers on the lab's 2 cores: 37-40 s between steps
    of 3.5-4.5 s, against 14 s with one thread each; BENCHMARKS.md, 2026-11-27). ``cores``: a
    host's (default: this machine's, the estimate for every host)."""
    if "OMP_NUM_THREADS" in environ or any(name == "OMP_NUM_THREADS" for name, _ in env_flags):
        return environ
    crowd = max(Counter(world).values(), default=0)
    if crowd < 2:
        return environ
    threads = max(1, (cores or os.cpu_count() or 1) // crowd)
    log.info("OMP_NUM_THREADS=%d for every process: %d share a host (set OMP_NUM_THREADS, or "
             "--env OMP_NUM_THREADS=N, to choose)", threads, crowd)
    return {**environ, "OMP_NUM_THREADS": str(threads)}
