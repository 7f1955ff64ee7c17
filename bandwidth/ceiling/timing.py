"""The ceiling measurement's timing, written once.

Two ways, both with warm-up discarded and the median of repeats taken:

- ``median_seconds``: ``perf_counter`` around a burst of back-to-back calls between two device
  synchronisations, per call (what nccl-tests does with its host timer). Enough for operations of a
  millisecond or more, whose enqueue cost is small next to their run time.
- ``GatedTimer``: CUDA events around a burst queued on a stream held back by a spin kernel, so that
  the host's enqueue cost is not timed (p2pBandwidthLatencyTest's ``delay`` kernel; torch has one,
  ``torch.cuda._sleep``). Needed for tiny operations (latency, small collectives).
"""

from __future__ import annotations

import functools
import statistics
import time
from collections.abc import Callable

import torch

MAX_GATE_SECONDS = 0.1


def median_seconds(fn: Callable[[], None], sync: Callable[[], None], repeats: int,
                   warmup: int = 2, burst: int = 1) -> float:
    """Median over ``repeats`` of the time of ``burst`` back-to-back calls, per call."""
    times = []
    for i in range(warmup + repeats):
        sync()
        start = time.perf_counter()
        for _ in range(burst):
            fn()
        sync()
        if i >= warmup:
            times.append((time.perf_counter() - start) / burst)
    return statistics.median(times)


@functools.cache
def cycles_per_second(device: int) -> float:
    """Clock rate of ``torch.cuda._sleep``'s spin loop on ``device``, measured once."""
    stream = torch.cuda.Stream(device=device)
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    cycles = 20_000_000
    with torch.cuda.device(device), torch.cuda.stream(stream):
        torch.cuda._sleep(1000)
        start.record(stream)
        torch.cuda._sleep(cycles)
        stop.record(stream)
    stop.synchronize()
    return cycles / (start.elapsed_time(stop) / 1e3)


class GatedTimer:
    """GPU seconds of a burst of work queued behind a spin kernel on ``stream``.

        timer = GatedTimer(torch.cuda.Stream(device=0))
        seconds = timer.median(lambda: [copy() for _ in range(100)], repeats=5) / 100

    ``enqueue`` must put its work on ``stream`` (or on streams that wait for it) and leave
    ``stream`` waiting for all of it, so that the stop event marks the end of the burst. The gate
    lasts ``gate_seconds`` to start with and doubles (up to MAX_GATE_SECONDS) whenever the host
    needed longer than the gate to enqueue the burst; with ``retry`` such a sample is taken
    again at once. Ranks of a collective must not retry on their own (their calls would no
    longer match): they pass ``retry=False``, agree on ``gate_seconds`` between samples and
    discard a first sample.
    ``host_paced`` says whether the last sample's enqueue outlasted even the longest gate (then
    the host's pace is part of the time, as it would be in p2pBandwidthLatencyTest, whose gate
    times out after 10^7 cycles).
    """

    def __init__(self, stream, gate_seconds: float = 2e-3):
        self.stream = stream
        self.device = stream.device.index
        self.gate_seconds = gate_seconds
        self.host_paced = False
        self._start = torch.cuda.Event(enable_timing=True)
        self._stop = torch.cuda.Event(enable_timing=True)

    def sample(self, enqueue: Callable[[], None], sync: Callable[[], None] | None = None,
               retry: bool = True) -> float:
        while True:
            (sync or (lambda: torch.cuda.synchronize(self.device)))()
            cycles = int(self.gate_seconds * cycles_per_second(self.device))
            with torch.cuda.device(self.device), torch.cuda.stream(self.stream):
                torch.cuda._sleep(cycles)
            self._start.record(self.stream)
            begin = time.perf_counter()
            enqueue()
            host_seconds = time.perf_counter() - begin
            self._stop.record(self.stream)
            self._stop.synchronize()
            self.host_paced = host_seconds > 0.8 * self.gate_seconds
            seconds = self._start.elapsed_time(self._stop) / 1e3
            if not self.host_paced or self.gate_seconds >= MAX_GATE_SECONDS:
                return seconds
            self.gate_seconds = min(2 * max(self.gate_seconds, host_seconds), MAX_GATE_SECONDS)
            if not retry:
                return seconds

    def median(self, enqueue: Callable[[], None], repeats: int, warmup: int = 1,
               sync: Callable[[], None] | None = None) -> float:
        times = [self.sample(enqueue, sync) for _ in range(warmup + repeats)]
        return statistics.median(times[warmup:])
