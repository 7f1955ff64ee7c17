"""Backends compared in one run see the same host: their iterations interleave (the first one
rotating), one flat reference and one ceiling serve them all, and the ceiling's probe on CPU
devices is taken again after the iterations, the faster kept. CPU-device steps run with the thread
count that untimed trial steps found fastest (bandwidth.hardware.cputhreads), or --cpu-threads."""

import pytest
import torch

from bandwidth.backends.registry import store_class
from bandwidth.ceiling import bounds
from bandwidth.ceiling.bounds import Bound, BoundCache, judged
from bandwidth.config.options import Config
from bandwidth.hardware import cputhreads
from bandwidth.hardware.devices import DeviceSet
from bandwidth.measurement import protocol
from bandwidth.measurement.session import Session
from bandwidth.plan.plan import make_plan
from bandwidth.processes.group import LocalGroup
from bandwidth.run import can_run_together, run_together

LENET = dict(network="lenet", image_shape=(1, 28, 28), num_classes=10)


class Recorded:
    """A session that records the order of its calls in a log shared with the others."""

    def __init__(self, name, log):
        self.name, self.log, self.group, self.steps = name, log, LocalGroup(), 0

    def prepare(self):
        pass

    def synchronize(self):
        pass

    def step(self):
        self.steps += 1
        self.log.append(self.name)

    def error(self):
        return 0.0


def test_iterations_interleave_with_the_first_rotating():
    log = []
    a, b, c = Recorded("a", log), Recorded("b", log), Recorded("c", log)
    out = protocol.measure_interleaved([a, b, c], iterations=4, warmup=1, disp_batches=2,
                                       check=True, nbytes=10**6, bus_factors=[1.0, 1.0, 0.5])
    assert log == list("abc" "bca" "cab" "abc" "bca")           # warm-up, then 4 iterations
    for samples, reports in out:
        assert [s.iteration for s in samples] == [1, 2, 3, 4]
        assert [r.iteration for r in reports] == [2, 4]
        assert all(s.error == 0.0 and s.seconds >= 0 for s in samples)
    # Each session's reports use its own bus factor.
    (_, ra), _, (_, rc) = out
    assert rc[0].gbps == pytest.approx(ra[0].gbps * 0.5 * ra[0].seconds / rc[0].seconds)


def test_one_session_is_the_protocol_as_before():
    log = []
    samples, reports = protocol.measure(Recorded("a", log), iterations=3, warmup=2,
                                        disp_batches=3, check=False, nbytes=1, bus_factor=1.0)
    assert log == ["a"] * 5 and [s.error for s in samples] == [-1.0] * 3 and len(reports) == 1


def plan(backend="toolkit", **config):
    return make_plan(Config(**{**dict(kv_store="local", cpus=2, num_batches=3, backend=backend),
                               **LENET, **config}), store_class)


def test_only_one_measurement_under_distinct_backends_runs_together():
    assert not can_run_together([plan()])
    assert not can_run_together([plan(), plan()])                       # the same backend twice
    assert not can_run_together([plan(), plan(kv_store="device")])      # two measurements
    assert not can_run_together([plan(), plan(cpus=4)])
    assert not can_run_together([plan(kv_store="nccl"), plan(kv_store="nccl")])


def test_run_together_gives_each_session_its_exact_rows_and_one_shared_ceiling(monkeypatch):
    # Two toolkit sessions stand in for two backends: run_together does not look at the name.
    probes, events = iter([2.0, 5.0]), []     # before the iterations, then after them (faster)
    measure_interleaved = protocol.measure_interleaved

    def probe(nbytes, n):
        events.append("probe")
        return next(probes)

    def iterations(*args, **kwargs):
        events.append("iterations")
        return measure_interleaved(*args, **kwargs)

    monkeypatch.setattr(bounds, "cpu_local_gbps", probe)
    monkeypatch.setattr(cputhreads, "cores", lambda: 1)      # one probe per bound
    monkeypatch.setattr(protocol, "measure_interleaved", iterations)
    cache = BoundCache()
    first, second = run_together([plan(), plan()], cache)
    assert events == ["probe", "iterations", "probe"]
    for result in (first, second):
        assert [s.iteration for s in result.samples] == [1, 2, 3]
        assert result.summary.error_max == 0.0
        assert result.ceiling.gbps == 5.0
        assert any("iterations interleaved with" in note for note in result.notes)
    assert cache.bound(plan(), None).gbps == 5.0                        # kept for the sweep
    assert first.reference is not None and first.reference is second.reference


def test_probe_again_keeps_the_faster_probe(monkeypatch):
    probes = iter([4.0, 3.0, 6.0])
    monkeypatch.setattr(bounds, "cpu_local_gbps", lambda nbytes, n: next(probes))
    monkeypatch.setattr(cputhreads, "cores", lambda: 1)      # one probe per bound
    cache, p = BoundCache([plan()]), plan()
    assert cache.bound(p, None).gbps == 4.0
    assert cache.probe_again(p, None).gbps == 4.0                       # 3.0 was slower
    assert cache.probe_again(p, None).gbps == 6.0


def test_a_probe_larger_than_the_caches_beaten_reads_busy_host(monkeypatch):
    monkeypatch.setattr(bounds, "last_level_cache_bytes", lambda: 32 << 20)
    big = judged(Bound("host memory", 4.0, 102 * 10**6), 7.0, on_cpu=True)
    assert big.pct(7.0) is None
    assert big.not_a_bound == ("busy host: this run beat the 102.00 MB host memory probe by more "
                               "than 10 %, so the probe was slowed and is not a bound")
    small = judged(Bound("host memory", 4.0, 4 << 20), 7.0, on_cpu=True)
    assert small.not_a_bound.startswith("fits in cache: the 4 MiB host memory probe")


def test_thread_candidates_are_one_per_device_and_per_core():
    assert cputhreads.candidates(2, 2) == [1, 2]
    assert cputhreads.candidates(4, 2) == [1, 2]
    assert cputhreads.candidates(2, 64) == [1, 2, 64]
    assert cputhreads.candidates(8, 1) == [1]


class Clock:
    """perf_counter for bandwidth.hardware.cputhreads: steps advance it by their modelled duration."""

    def __init__(self):
        self.now = 0.0

    def perf_counter(self):
        return self.now


def test_the_trial_keeps_the_fastest_thread_count(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(cputhreads, "time", clock)
    monkeypatch.setattr(cputhreads, "cores", lambda: 4)
    before = torch.get_num_threads()
    seen = []

    def step():                     # 2 threads is the fastest here, 1 and 4 slower
        threads = torch.get_num_threads()
        seen.append(threads)
        clock.now += {1: 0.004, 2: 0.001, 4: 0.003}[threads]

    try:
        best, note = cputhreads.choose(step, devices=2, trial_steps=3, trial_seconds=0.0)
        assert best == 2 and torch.get_num_threads() == 2
        assert sorted(set(seen)) == [1, 2, 4] and len(seen) == 3 * 4     # a warm-up round + 3
        assert seen[:3] == [1, 2, 4] and seen[3:6] == [2, 4, 1]           # the order rotates
        assert note.startswith("CPU threads auto: 3 trial steps each, mean 1: ")
        assert note.endswith(": 2 (--cpu-threads N to fix it)")
    finally:
        torch.set_num_threads(before)


def test_more_threads_must_be_faster_by_the_margin(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(cputhreads, "time", clock)
    monkeypatch.setattr(cputhreads, "cores", lambda: 2)
    before = torch.get_num_threads()

    def step():                     # 2 threads 5 % faster: within the margin, so 1 is kept
        clock.now += {1: 0.0040, 2: 0.0038}[torch.get_num_threads()]

    def tail():                     # 2 threads: faster most steps, one long wait for a core
        threads = torch.get_num_threads()
        tail.calls[threads] += 1
        clock.now += 0.002 if threads == 1 else 0.020 if tail.calls[2] == 3 else 0.001

    tail.calls = {1: 0, 2: 0}
    try:
        best, note = cputhreads.choose(step, devices=2, trial_steps=3, trial_seconds=0.0)
        assert best == 1 and note == ("CPU threads auto: 3 trial steps each, mean 1: 4.00 ms, "
                                      "2: 3.80 ms: 1 (--cpu-threads N to fix it)")
        # The medians would take 2 threads (1 ms against 2 ms); the mean counts the wait.
        best, note = cputhreads.choose(tail, devices=2, trial_steps=3, trial_seconds=0.0)
        assert best == 1 and "mean 1: 2.00 ms, 2: 7.33 ms: 1 " in note
        assert torch.get_num_threads() == 1
        clock.now = 0.0
        best, _ = cputhreads.choose(lambda: setattr(clock, "now", clock.now + {
            1: 0.004, 2: 0.003}[torch.get_num_threads()]), devices=2, trial_steps=3,
            trial_seconds=0.0)
        assert best == 2 and torch.get_num_threads() == 2          # 25 % faster: taken
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("optimizer", ["none", "sgd"])
@pytest.mark.parametrize("kv_store", ["local", "device"])
def test_sessions_choose_threads_and_restore_them_at_close(kv_store, optimizer):
    before = torch.get_num_threads()
    shapes = [("w", (30_000,)), ("b", (7,))]
    s = Session(kv_store, shapes, DeviceSet("cpu", (0, 1, 2)), [0, 1, 2], LocalGroup(),
                dtype="float32", optimizer=optimizer, seed=3, chunk_mb=None)
    assert s.threads_note.startswith("CPU threads auto: ")
    # The trial's steps left the weights as they were: the error check counts from step 1.
    samples, _ = protocol.measure(s, iterations=2, warmup=0, disp_batches=1, check=True,
                                  nbytes=4 * 30_007, bus_factor=1.0)
    assert all(0 <= x.error < 1e-6 for x in samples)
    s.close()
    assert torch.get_num_threads() == before
    fixed = Session(kv_store, shapes, DeviceSet("cpu", (0, 1)), [0, 1], LocalGroup(),
                    dtype="float32", optimizer=optimizer, seed=3, chunk_mb=None, cpu_threads=1)
    assert fixed.threads_note == "CPU threads: 1 (--cpu-threads)" and torch.get_num_threads() == 1
    fixed.close()
    assert torch.get_num_threads() == before


def test_cpu_ceilings_take_the_fastest_thread_count(monkeypatch):
    # The steps may run with every core's thread while torch has 1 now (mxnet sets it): the probe
    # runs under every count the steps may choose and keeps the fastest.
    monkeypatch.setattr(cputhreads, "cores", lambda: 2)
    monkeypatch.setattr(bounds, "cpu_local_gbps",
                        lambda nbytes, n: {1: 4.0, 2: 6.0}[torch.get_num_threads()])
    monkeypatch.setattr(bounds, "host_copy_gbps",
                        lambda nbytes: {1: 20.0, 2: 12.0}[torch.get_num_threads()])
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        assert bounds.bound(plan(), None).gbps == 6.0
        assert bounds.bound(plan(kv_store="device"), None).gbps == 20.0 / 2
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
