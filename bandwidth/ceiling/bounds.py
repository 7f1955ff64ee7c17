"""The ceiling each kvstore mode is judged against, measured quickly in the same run.

``bound(plan, reference)`` returns a Bound (what limits the mode, and its rate in the same unit as
MXNet's GB/sec per gpu) or None where no ceiling applies (one device: nothing crosses a link; the
nccl and dist_nccl modes without their reference). ``BoundCache`` measures it once per (mode kind,
device set) in a sweep; ``judged`` marks a ceiling that the run beat by more than
``OVER_CEILING_MARGIN``, which then prints ``n/a`` with the reason instead of a percentage above
100. The full per-host report is ``python -m bandwidth.ceiling``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from bandwidth.formulas import allreduce_factor, one_gpu_device_bound_gbps
from bandwidth.textformat import format_bytes

# GPU links: the rate of the link itself, whatever the network's size: large enough for the full
# rate (and for scheduling noise on a busy host not to count), small enough to take a fraction of
# a second. A link only gets faster with size, so this bounds every smaller exchange.
PROBE_BYTES = 256 * 10**6
# CPU devices: host memory is faster for buffers that fit in the CPU's caches, so a large probe
# bounds nothing for a small network. Probe at the network's own size (the largest of a sweep's
# group), at least this much so that the timing is not all call overhead.
CPU_MIN_PROBE_BYTES = 4 << 20
# A run above its ceiling by more than this fraction shows no percentage: the probe is not a bound.
OVER_CEILING_MARGIN = 0.10


@dataclass(frozen=True)
class Bound:
    name: str
    gbps: float
    probe_nbytes: int | None = None   # the probe's buffer; None: a reference of the same run
    not_a_bound: str | None = None    # why no % is shown (the run beat it; see ``judged``)
    # Which figure of a run it bounds: "busbw" (MXNet's GB/sec per gpu), or "algbw" where one
    # device makes busbw 0 by definition but the step still crosses a link (local on one GPU).
    of: str = "busbw"

    def pct(self, gbps: float) -> float | None:
        """``gbps`` (the figure named by ``of``) as a percentage of the ceiling; None where it is
        not a bound."""
        if self.not_a_bound or not self.gbps:
            return None
        return 100.0 * gbps / self.gbps

    def figure(self, summary) -> float:
        """The figure of ``summary`` (a protocol.Summary) this ceiling bounds."""
        return summary.algbw_median if self.of == "algbw" else summary.busbw_median


def probe_nbytes(plan, nbytes: int | None = None) -> int:
    """The probe's size for ``plan`` (``nbytes``: the largest network of its sweep group)."""
    if plan.devices.is_cuda:
        return PROBE_BYTES
    return max(nbytes or plan.nbytes, CPU_MIN_PROBE_BYTES)


CPU_REFERENCE = ("CPU devices: Gloo stands in for NCCL, and its all-reduce of many arrays can "
                 "beat one of the same bytes, which is a reference here, not a bound")


def bound(plan, reference, nbytes: int | None = None) -> Bound | None:
    """The bound of ``plan``'s mode on ``plan``'s devices (``reference``: the flat all-reduce
    summary of the same run, or None; ``nbytes``: size the probe for this many bytes instead of
    the plan's, see probe_nbytes)."""
    devices, n = plan.devices, plan.devices.n
    kind = plan.store_cls.traits.bound_kind
    if kind == "host path" and devices.is_cuda and n == 1:
        # One GPU: nothing to sum, but every byte goes down and back up its PCIe link.
        from bandwidth.ceiling.host import duplex_host_gbps
        return Bound("duplex host path: device->host and host->device at once, algbw",
                     duplex_host_gbps(devices.ids[0], PROBE_BYTES), PROBE_BYTES, of="algbw")
    if kind == "flat all-reduce":
        # Measured wherever the all-reduce spans two devices or more; under launch.py
        # (dist_nccl) that may be one device on each of several workers.
        if reference is None:
            return None
        found = Bound("flat all-reduce of the same bytes, same run", reference.busbw_median)
        if not devices.is_cuda:
            # Gloo's all-reduce of many arrays beat one of the same bytes by 2-2.6 x (bfloat16)
            # and by 10-20 % (float32) on CPU devices: there it compares, it does not bound.
            return replace(found, not_a_bound=CPU_REFERENCE)
        return found
    if n < 2:
        return None
    probe = probe_nbytes(plan, nbytes)
    size = format_bytes(probe)
    if kind == "peer link":
        if devices.is_cuda and len(set(devices.ids)) == 1:
            return one_gpu_bound(devices.ids[0], n, probe)
        if devices.is_cuda:
            from bandwidth.ceiling.p2p import p2p_copy_gbps

            # Pairs of replicas, by position: with a GPU listed twice (0,0,1) the pair (0, 0) is
            # a copy inside GPU 0's memory.
            pairs = sorted({(a, b) for i, a in enumerate(devices.ids)
                            for j, b in enumerate(devices.ids) if i != j})
            rates = [p2p_copy_gbps(a, b, probe, repeats=3, burst=5) for a, b in pairs]
            return Bound("p2p unidirectional copy (slowest pair)", min(rates), probe)
        # One process copies for every CPU device: 2(n-1) S bytes go through one memory system.
        return Bound(f"host memory copy rate / devices, {size} probe",
                     fastest_threads(lambda: host_copy_gbps(probe), n) / n, probe)
    if kind == "host path":
        if devices.is_cuda:
            from bandwidth.ceiling.host import host_path
            path = host_path(list(devices.ids), probe)
            return Bound("host path: PCIe and CPU summation overlapped",
                         path.busbw_gbps(path.bound_seconds), probe)
        # At the network's own size: the probe's buffers take as much of the caches as the run's.
        probe = nbytes or plan.nbytes
        return Bound(f"host memory: least traffic at the fastest host memory rate, "
                     f"{format_bytes(probe)} probe",
                     fastest_threads(lambda: cpu_local_gbps(probe, n), n), probe)
    return None


def one_gpu_bound(gpu: int, n: int, probe: int) -> Bound:
    """The device mode with ``n`` replicas on one GPU (``--gpus 0,0``): every copy and every sum
    of a step goes through that GPU's memory. Per step (S bytes, docs/formulas.md) the pulls and
    pushes copy 2(n-1)S bytes, each read and written (4(n-1)S of memory traffic), and the sums
    write (n-1)S bytes from two operands each (3(n-1)S): 7(n-1)S in all. At the fastest rate M
    the GPU's memory was measured to move (a copy, an add, or both at once on two streams, in
    bytes of traffic per second) a step takes at least 7(n-1)S / M, so busbw = S 2(n-1)/n / t is
    at most 2M / (7n)."""
    rates = one_gpu_rates(gpu, probe)
    fastest = max(rates.values())
    gbps = one_gpu_device_bound_gbps(n, fastest)
    return Bound(f"one GPU's memory: {fastest:.0f} GB/s of traffic at best (copy "
                 f"{rates['copy']:.0f}, add {rates['add']:.0f}, both at once "
                 f"{rates['both']:.0f}), 7(n-1)S per step, 2M/(7n) with n={n}", gbps, probe)


def one_gpu_rates(gpu: int, probe: int) -> dict[str, float]:
    """GPU ``gpu``'s memory rates in GB/s of traffic: ``copy`` (read + write, 2 x its bytes, as
    p2pBandwidthLatencyTest counts its diagonal), ``add`` (3 x the buffer) and ``both`` (a copy
    and an add at once on two streams, all their traffic). The copy and the add are each the
    fastest of issuing them from the host and replaying them from a CUDA graph (the copy also as
    the elementwise kernel that the device mode's one-GPU graph copies with): a bound must hold
    for every way the modes launch them, and the mode overlaps copies and sums of different
    owners (``both``)."""
    from bandwidth.ceiling.host import device_add_gbps
    from bandwidth.ceiling.p2p import p2p_copy_gbps
    from bandwidth.hardware.rawcopy import kernel_copy
    a = torch.ones(probe // 4, device=f"cuda:{gpu}")
    b, c = torch.ones_like(a), torch.empty_like(a)
    nbytes = a.numel() * 4

    # The copy: cudaMemcpyPeerAsync from the host, and from a graph both torch's copy_ (a memcpy
    # node) and the elementwise kernel copy that the device mode's one-GPU graph uses.
    copy = max(2 * p2p_copy_gbps(gpu, gpu, probe, repeats=3, burst=5),
               2 * nbytes / _graph_seconds([lambda: c.copy_(a)], gpu) / 1e9,
               2 * nbytes / _graph_seconds([lambda: kernel_copy(c, a)], gpu) / 1e9)
    add = max(device_add_gbps(gpu, probe),
              3 * nbytes / _graph_seconds([lambda: torch.add(a, b, out=c)], gpu) / 1e9)
    # Both at once, on separate buffers (shared operands could be read from L2 by both).
    d, e = torch.ones_like(a), torch.empty_like(a)
    both = 5 * nbytes / _graph_seconds([lambda: kernel_copy(c, a), lambda: torch.add(b, d, out=e)],
                                       gpu) / 1e9
    return {"copy": copy, "add": add, "both": both}


def _graph_seconds(ops, gpu: int, burst: int = 10, repeats: int = 5) -> float:
    """Seconds per burst element of ``ops`` replayed from a CUDA graph: each op ``burst`` times in
    a row on a stream of its own, the streams running at once (median of repeats)."""
    from bandwidth.ceiling.timing import median_seconds
    for op in ops:
        op()
    graph = torch.cuda.CUDAGraph()
    capture = torch.cuda.Stream(device=gpu)
    sides = [torch.cuda.Stream(device=gpu) for _ in ops]
    with torch.cuda.graph(graph, stream=capture):
        for side, op in zip(sides, ops):
            side.wait_stream(capture)
            with torch.cuda.stream(side):
                for _ in range(burst):
                    op()
            capture.wait_stream(side)
    seconds = median_seconds(graph.replay, lambda: torch.cuda.synchronize(gpu), repeats)
    return seconds / burst


def judged(ceiling: Bound | None, busbw_gbps: float, on_cpu: bool) -> Bound | None:
    """``ceiling``, marked ``not_a_bound`` (with the reason) when the run's figure (busbw, or
    algbw for a ceiling ``of`` algbw: see Bound.figure) exceeds it by more than
    OVER_CEILING_MARGIN: a ceiling must be an upper bound, so a share above 100 % is shown only
    within that margin (timing noise of two measurements), never above 110 %."""
    if ceiling is None or not ceiling.gbps or ceiling.not_a_bound or \
            busbw_gbps <= ceiling.gbps * (1 + OVER_CEILING_MARGIN):
        return ceiling
    margin = f"{100 * OVER_CEILING_MARGIN:g} %"
    if ceiling.probe_nbytes is None:
        why = f"timing noise: this run beat its reference of the same run by more than {margin}"
    elif on_cpu and ceiling.probe_nbytes <= last_level_cache_bytes():
        why = (f"fits in cache: the {format_bytes(ceiling.probe_nbytes)} host memory probe is "
               "not a bound at this size")
    elif on_cpu:
        # Larger than the caches: the probe itself was slowed (other processes on the cores).
        why = (f"busy host: this run beat the {format_bytes(ceiling.probe_nbytes)} host memory "
               f"probe by more than {margin}, so the probe was slowed and is not a bound")
    else:
        why = (f"this run beat the {format_bytes(ceiling.probe_nbytes)} probe by more than "
               f"{margin}: it is not a bound at this size")
    return replace(ceiling, not_a_bound=why)


def last_level_cache_bytes() -> int:
    """The CPU's largest cache (sysfs; 32 MiB where it cannot be read)."""
    sizes = []
    for path in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        try:
            text = path.read_text().strip().upper()
            sizes.append(int(text.rstrip("KMG")) << {"K": 10, "M": 20, "G": 30}.get(text[-1], 0))
        except (OSError, ValueError, IndexError):
            continue
    return max(sizes, default=32 << 20)


class BoundCache:
    """The ceilings of a sweep, each measured once per (kind of bound, device set): probed at the
    largest network of that group (on GPUs the fixed link probe), and reused by every row and
    repeat of the group. The nccl mode's bound is the flat reference of each row itself, so it is
    not cached."""

    def __init__(self, plans=()):
        self._nbytes: dict[tuple, int] = {}
        for plan in plans:
            key = self._key(plan)
            self._nbytes[key] = max(self._nbytes.get(key, 0), plan.nbytes)
        self._found: dict[tuple, Bound | None] = {}

    @staticmethod
    def _key(plan) -> tuple:
        return (plan.store_cls.traits.bound_kind, plan.devices)

    def bound(self, plan, reference) -> Bound | None:
        if plan.store_cls.traits.bound_kind == "flat all-reduce":
            return bound(plan, reference)
        key = self._key(plan)
        if key not in self._found:
            self._found[key] = bound(plan, reference, self._nbytes.get(key, plan.nbytes))
        return self._found[key]

    def probe_again(self, plan, reference) -> Bound | None:
        """``plan``'s probed ceiling measured once more, and the faster of the two probes kept for
        the rest of the sweep: on a host shared with other processes a probe can only be slowed
        down, and a ceiling must hold for the fastest the host has shown."""
        before = self.bound(plan, reference)
        if before is None or before.probe_nbytes is None:
            return before                  # a reference of the same run: nothing to probe
        key = self._key(plan)
        again = bound(plan, reference, self._nbytes.get(key, plan.nbytes))
        if again is not None and again.gbps > before.gbps:
            self._found[key] = again
        return self._found[key]


def _best_seconds(fn, repeats: int = 5) -> float:
    """The fastest of ``repeats`` timed calls after one untimed: other processes on the host only
    ever slow a probe down, and a ceiling must be an upper bound."""
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def fastest_threads(probe, n: int) -> float:
    """The fastest rate ``probe`` reports under each torch thread count a run on ``n`` CPU
    devices may choose (bandwidth.hardware.cputhreads): the steps may run with more threads than torch has
    now (a process that imported mxnet has 1), and a bound must hold for the fastest of them."""
    from bandwidth.hardware import cputhreads
    before = torch.get_num_threads()
    try:
        rates = []
        for threads in cputhreads.candidates(n, cputhreads.cores()):
            torch.set_num_threads(threads)
            rates.append(probe())
        return max(rates)
    finally:
        torch.set_num_threads(before)


# The host memory copy probe settles first: on a 16-core VM the first copies of a process ran at a
# quarter to 3/4 of the rate that the same process reached after 0.2 s of copies (its thread pool
# and idle cores waking; benchmarks/probes/host_copy_probe.py at 7d3c61a, BENCHMARKS.md), so the
# best of 5
# copies right after the first moved by 2x between runs. Copy for this long untimed, then time
# at least COPY_TIMED_CALLS copies and COPY_TIMED_S seconds (COPY_MAX_CALLS at most); the best.
COPY_WARMUP_S, COPY_TIMED_CALLS, COPY_TIMED_S, COPY_MAX_CALLS = 0.2, 10, 0.1, 200


def host_copy_gbps(nbytes: int) -> float:
    """Host memory copy rate (bytes copied per second), as torch copies: the best copy after the
    host has settled (see COPY_WARMUP_S)."""
    a = torch.ones(nbytes // 4)
    b = torch.empty_like(a)
    return nbytes / _settled_best_seconds(lambda: b.copy_(a)) / 1e9


def _settled_best_seconds(fn, warmup_s: float = COPY_WARMUP_S, calls: int = COPY_TIMED_CALLS,
                          timed_s: float = COPY_TIMED_S, max_calls: int = COPY_MAX_CALLS) -> float:
    """The fastest call of ``fn`` after ``warmup_s`` seconds of untimed calls (one at least), over
    at least ``calls`` timed calls and ``timed_s`` seconds (``max_calls`` at most)."""
    start = time.perf_counter()
    fn()
    while time.perf_counter() - start < warmup_s:
        fn()
    best, count, start = float("inf"), 0, time.perf_counter()
    while count < calls or (time.perf_counter() - start < timed_s and count < max_calls):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
        count += 1
    return best


def cpu_local_gbps(nbytes: int, n: int) -> float:
    """The local mode's bound on ``n`` CPU devices, in MXNet's GB/sec per gpu. Whatever the
    implementation (MXNet's included), a step must read every replica's gradients and write every
    replica's outputs: 2 n S bytes of host memory traffic. The bound is that traffic at the fastest
    rate host memory moved bytes in the probe, on buffers of the run's footprint (n sources and n
    destinations of S bytes): the best of n copies (read and write counted), n adds (two reads and
    a write) and a read-only sum of every buffer. Any real step also sums and may re-read, so it
    can only be slower."""
    numel = max(1, nbytes // 4)
    sources = [torch.full((numel,), float(i + 1)) for i in range(n)]
    targets = [torch.zeros(numel) for _ in range(n)]
    moved = 4 * numel

    def copies():
        for src, dst in zip(sources, targets):
            dst.copy_(src)

    def adds():
        for i, dst in enumerate(targets):
            torch.add(sources[i], sources[(i + 1) % n], out=dst)

    def reads():
        for buf in sources + targets:
            buf.sum()

    rate = max(2 * n * moved / _burst_seconds(copies), 3 * n * moved / _burst_seconds(adds),
               2 * n * moved / _burst_seconds(reads))
    return nbytes * allreduce_factor(n) / (2 * n * nbytes / rate) / 1e9


def _burst_seconds(fn, repeats: int = 5, min_seconds: float = 2e-3) -> float:
    """Seconds per call: the fastest of ``repeats`` bursts of back-to-back calls, each burst long
    enough (``min_seconds``) that the clock and call overheads do not count."""
    start = time.perf_counter()
    fn()
    once = max(time.perf_counter() - start, 1e-7)
    burst = max(1, min(1000, int(min_seconds / once)))
    return _best_seconds(lambda: [fn() for _ in range(burst)], repeats) / burst
