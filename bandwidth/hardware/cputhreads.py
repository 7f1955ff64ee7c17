"""How many torch threads the steps of CPU-device replicas use (``--cpu-threads``, default auto).

On CPU devices every step is a few large, memory-bound torch operations (sums and copies over the
flat buffers), each a parallel region that ends only when all of its threads have run. On a host
whose cores are shared with other processes, a region of T threads waits for T cores at once, so
more threads can be much slower: on the 2-core development VM under a load average of 3-10,
resnet-50 on 2 CPU devices ran at 1.8 GB/sec per gpu with one thread against 1.3 with torch's two
in ``local``, and 1.4 against 0.3 in ``device`` (BENCHMARKS.md, 2026-11-23). On an idle many-core
host the other way round: one thread reaches a fraction of the memory's rate.

So by default untimed trial steps decide, alternating the candidates (one thread, one per
device, one per core this process may run on: at most three) so that each sees the same load, for
at least TRIAL_STEPS steps each and TRIAL_SECONDS in all. They are compared by their mean step
time, not the median: a parallel region's cost is in its tail (the steps that waited for a core),
and the mean counts it. More threads are kept only where they are faster than fewer by at least
MORE_THREADS_MARGIN: on a shared host their cost grows with the load of the moment, one
thread's does not (lenet on 2 CPU devices under a load average of 6: 9.2 GB/sec per gpu with one
thread, 0.05 with two, in the same alternated probe). ``--cpu-threads N`` fixes N instead. The choice is printed as a note. (The cores, not
torch.get_num_threads(): a process that imported mxnet reads 1 there.)
"""

from __future__ import annotations

import contextlib
import os
import statistics
import time
from typing import Callable, Iterator

import torch

# Untimed trial rounds (one step of each candidate), after one that warms every candidate up: at
# least TRIAL_STEPS, and more until TRIAL_SECONDS have passed (small networks take microseconds a
# step, where a few steps say nothing), at most MAX_TRIAL_STEPS.
TRIAL_STEPS = 3
TRIAL_SECONDS = 0.3
MAX_TRIAL_STEPS = 100
# How much faster (in mean step time) more threads must be than fewer to be chosen.
MORE_THREADS_MARGIN = 0.10


def cores() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def candidates(devices: int, cores: int) -> list[int]:
    """The thread counts tried for ``devices`` replicas on ``cores`` cores."""
    return sorted({1, max(1, min(devices, cores)), max(1, cores)})


def choose(step: Callable[[], None], devices: int, trial_steps: int = TRIAL_STEPS,
           trial_seconds: float = TRIAL_SECONDS) -> tuple[int, str]:
    """Time ``step`` (one synchronous step of the mode) under each candidate thread count and
    leave torch on the fastest; returns it and the note that says so."""
    tried = candidates(devices, cores())
    if len(tried) == 1:
        torch.set_num_threads(1)
        return 1, "CPU threads: 1 (one core)"
    times: dict[int, list[float]] = {t: [] for t in tried}
    started = time.perf_counter()
    round_ = 0
    while round_ <= trial_steps or (time.perf_counter() - started < trial_seconds
                                    and round_ <= MAX_TRIAL_STEPS):
        # Rotate the order every round: no candidate always runs right after another's step.
        order = tried[round_ % len(tried):] + tried[:round_ % len(tried)]
        for threads in order:
            torch.set_num_threads(threads)
            start = time.perf_counter()
            step()
            if round_:
                times[threads].append(time.perf_counter() - start)
        round_ += 1
    means = {t: statistics.fmean(v) for t, v in times.items()}
    best = tried[0]
    for threads in tried[1:]:              # ascending: more threads must beat the margin
        if means[threads] < (1 - MORE_THREADS_MARGIN) * means[best]:
            best = threads
    torch.set_num_threads(best)
    shown = ", ".join(f"{t}: {1e3 * means[t]:.2f} ms" for t in tried)
    return best, (f"CPU threads auto: {round_ - 1} trial steps each, mean {shown}: {best} "
                  "(--cpu-threads N to fix it)")


@contextlib.contextmanager
def threads(count: int | None) -> Iterator[None]:
    """torch on ``count`` threads inside the block, as before after it (None: unchanged)."""
    if count is None:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def data_threads(is_cuda: bool, cpu_threads: int | None, talks_to_others: bool) -> int | None:
    """The threads of the untimed passes over the test data on CPU devices (the fill, a
    parameter-server worker's refill, the error check) in a process whose steps talk to other
    processes, where no trial chose its threads: one (None: torch's as they are). Such a process
    may share its cores with the job's others (several ranks on one host, a lab's hosts on one
    machine), and every 1M-element chunk is a parallel region that waits for all its threads:
    resnet-152's check and refill (60 M elements) took 0.6-1.2 s with one thread in each of two
    processes on the 2-core VM, and 6-21 s with torch's two (2026-11-29). ``--cpu-threads N``
    keeps N."""
    if is_cuda or cpu_threads is not None or not talks_to_others:
        return None
    return 1
