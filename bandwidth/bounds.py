"""The ceiling each kvstore mode is judged against, measured quickly in the same run.

``bound(plan, reference)`` returns a Bound (what limits the mode, and its rate in the same unit as
MXNet's GB/sec per gpu) or None where no ceiling applies (one device: nothing crosses a link; the
nccl and dist_nccl modes without their reference). The full per-host report is
``python -m bandwidth.ceiling``.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import torch

from bandwidth.formulas import allreduce_factor

# The rate of the link itself, whatever the network's size: large enough for the full rate (and
# for scheduling noise on a busy host not to count), small enough to take a fraction of a second.
PROBE_BYTES = 256 * 10**6
CPU_PROBE_BYTES = 64 * 10**6


@dataclass(frozen=True)
class Bound:
    name: str
    gbps: float


def bound(plan, reference) -> Bound | None:
    """The bound of ``plan``'s mode on ``plan``'s devices (``reference``: the flat all-reduce
    summary of the same run, or None)."""
    devices, n = plan.devices, plan.devices.n
    kind = plan.store_cls.bound_kind
    if kind == "flat all-reduce":
        # Measured wherever the all-reduce spans two devices or more; under launch.py
        # (dist_nccl) that may be one device on each of several workers.
        if reference is None:
            return None
        return Bound("flat all-reduce of the same bytes, same run", reference.busbw_median)
    if n < 2:
        return None
    probe = PROBE_BYTES if devices.is_cuda else CPU_PROBE_BYTES
    if kind == "peer link":
        if devices.is_cuda:
            from bandwidth.ceiling import p2p_copy_gbps
            rates = [p2p_copy_gbps(a, b, probe, repeats=3, burst=5)
                     for a in devices.ids for b in devices.ids if a != b]
            return Bound("p2p unidirectional copy (slowest pair)", min(rates))
        # One process copies for every CPU device: 2(n-1) S bytes go through one memory system.
        return Bound("host memory copy rate / devices", host_copy_gbps(probe) / n)
    if kind == "host path":
        if devices.is_cuda:
            from bandwidth.ceiling import host_path
            path = host_path(list(devices.ids), probe)
            return Bound("host path: PCIe and CPU summation overlapped",
                         path.busbw_gbps(path.bound_seconds))
        return Bound("host memory: copies and summation", cpu_local_gbps(probe, n))
    return None


def _median_seconds(fn, repeats: int = 5) -> float:
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def host_copy_gbps(nbytes: int) -> float:
    """Host memory copy rate (bytes copied per second), as torch copies."""
    a = torch.ones(nbytes // 4)
    b = torch.empty_like(a)
    return nbytes / _median_seconds(lambda: b.copy_(a)) / 1e9


def cpu_local_gbps(nbytes: int, n: int) -> float:
    """The local mode on CPU devices, done in one process: n copies in, the sum, n copies out,
    one after another; in MXNet's GB/sec per gpu."""
    sources = [torch.full((nbytes // 4,), float(i + 1)) for i in range(n)]
    staged = [torch.empty_like(sources[0]) for _ in range(n)]
    total = torch.empty_like(sources[0])

    def local_step():
        for src, dst in zip(sources, staged):
            dst.copy_(src)
        torch.add(staged[0], staged[1], out=total)
        for more in staged[2:]:
            total.add_(more)
        for dst in sources:
            dst.copy_(total)

    return nbytes * allreduce_factor(n) / _median_seconds(local_step) / 1e9
