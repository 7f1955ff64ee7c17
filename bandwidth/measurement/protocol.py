"""The one measurement protocol every mode runs, and its statistics.

Per iteration: the mode's untimed ``prepare`` (gradients written into place, as a backward pass
would), a cross-rank barrier and a device synchronisation, then the timed ``step`` ended by another
device synchronisation; ``perf_counter`` brackets it. The time ``step`` takes to return (the host
issuing the step's work: its launches, or one graph replay) is kept beside it as the host time. A
multi-process run takes, per iteration, the
slowest rank's time (and keeps each rank's own, for the per-worker table of the distributed
modes). A session that replays a CUDA graph several times per iteration, each replay on buffers
of its own (``graph_steps``, bandwidth.measurement.session), counts the iteration as that many
steps: its time and host time are divided by the count. Warm-up iterations run the same way and
are discarded. The error check runs
after every iteration, untimed, as MXNet's did. Several sessions of one measurement (the backends
of ``--backend toolkit,mxnet``) run it together, iteration by iteration (``measure_interleaved``).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Callable

from bandwidth.formulas import algbw_gbps, busbw_gbps
from bandwidth.hardware import linkcounters


@dataclass(frozen=True)
class Sample:
    iteration: int       # 1-based, warm-up excluded
    seconds: float
    error: float         # MXNet's relative L1 error; -1 when not checked
    own_seconds: float | None = None   # this rank's own time (``seconds``: the slowest rank's)
    host_seconds: float | None = None  # this rank's time to issue the step (``step`` returning)
    wait_seconds: float | None = None  # its time in the barrier before the step (waiting for
    #                                    the other ranks: the last to arrive waits least)


@dataclass(frozen=True)
class Report:
    """One MXNet-style line: the mean of a window of --disp-batches iterations."""

    iteration: int
    seconds: float
    gbps: float          # MXNet's GB/sec per gpu (all-reduce busbw)
    error: float

    def line(self) -> str:
        return (f"iter {self.iteration}, {self.seconds:.6f} sec, {self.gbps:.6f} GB/sec per gpu, "
                f"error {self.error:.6f}")


@dataclass(frozen=True)
class Summary:
    iterations: int
    nbytes: int
    bus_factor: float
    seconds_median: float
    busbw_median: float
    busbw_min: float
    busbw_max: float
    algbw_median: float
    error_max: float
    host_seconds_median: float | None = None   # median time to issue a step (None: not kept)

    @classmethod
    def of(cls, samples: list[Sample], nbytes: int, bus_factor: float) -> "Summary":
        seconds = [s.seconds for s in samples]
        busbw = [busbw_gbps(nbytes, t, bus_factor) for t in seconds]
        median_s = statistics.median(seconds)
        host = [s.host_seconds for s in samples if s.host_seconds is not None]
        return cls(iterations=len(samples), nbytes=nbytes, bus_factor=bus_factor,
                   seconds_median=median_s, busbw_median=busbw_gbps(nbytes, median_s, bus_factor),
                   busbw_min=min(busbw), busbw_max=max(busbw),
                   algbw_median=algbw_gbps(nbytes, median_s),
                   error_max=max(s.error for s in samples),
                   host_seconds_median=statistics.median(host) if host else None)


def measure(session, *, iterations: int, warmup: int, disp_batches: int, check: bool,
            nbytes: int, bus_factor: float,
            on_report: Callable[[Report], None] | None = None) -> tuple[list[Sample], list[Report]]:
    """Run the protocol on ``session`` (prepare/step/synchronize/error and a ``group``)."""
    return measure_interleaved([session], iterations=iterations, warmup=warmup,
                               disp_batches=disp_batches, check=check, nbytes=nbytes,
                               bus_factors=[bus_factor], on_reports=[on_report])[0]


def measure_interleaved(sessions: list, *, iterations: int, warmup: int, disp_batches: int,
                        check: bool, nbytes: int, bus_factors: list[float],
                        on_reports: list[Callable[[Report], None] | None] | None = None
                        ) -> list[tuple[list[Sample], list[Report]]]:
    """The protocol on several sessions of the same measurement (one per backend) at once: each
    iteration runs every session's iteration in turn, the first one rotating, so that every
    backend's iteration k sees the host as the others' did (the same load from other processes,
    the same warmth) instead of one backend measuring after the other. One (samples, reports)
    per session; each session's own error check runs after its own step, untimed."""
    on_reports = on_reports or [None] * len(sessions)
    samples: list[list[Sample]] = [[] for _ in sessions]
    reports: list[list[Report]] = [[] for _ in sessions]
    windows: list[list[Sample]] = [[] for _ in sessions]
    for b in range(warmup + iterations):
        first = b % len(sessions)
        for k in list(range(first, len(sessions))) + list(range(first)):
            sample = _iteration(sessions[k], b - warmup + 1, check)
            if b < warmup:
                continue
            samples[k].append(sample)
            windows[k].append(sample)
            if len(windows[k]) == disp_batches:
                mean = sum(s.seconds for s in windows[k]) / len(windows[k])
                report = Report(sample.iteration, mean, busbw_gbps(nbytes, mean, bus_factors[k]),
                                sample.error)
                reports[k].append(report)
                if on_reports[k] is not None:
                    on_reports[k](report)
                windows[k] = []
    return list(zip(samples, reports))


def _iteration(session, iteration: int, check: bool) -> Sample:
    """One iteration of the protocol (module docstring): untimed prepare, barrier and
    synchronisation, the timed step, the untimed error check."""
    steps = getattr(session, "graph_steps", 1)
    session.prepare()
    arrived = time.perf_counter()
    session.group.barrier()
    waited = time.perf_counter() - arrived
    session.synchronize()
    cpu = linkcounters.step_began()
    start = time.perf_counter()
    session.step()
    issued = time.perf_counter()
    session.synchronize()
    own_seconds = (time.perf_counter() - start) / steps
    linkcounters.step_ended(cpu)
    seconds = session.group.max(own_seconds)
    error = session.error() if check else -1.0
    return Sample(iteration, seconds, error, own_seconds, (issued - start) / steps, waited)
