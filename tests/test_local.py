"""The local mode on CPU devices: no staging buffers, exact results whatever the chunks (keys
split across chunk boundaries, keys smaller than a chunk), and its ceiling counts only the traffic
every implementation needs."""

import math

import pytest
import torch

from bandwidth.arrays.data import expected_sum
from bandwidth.backends.registry import store_class
from bandwidth.ceiling import bounds
from bandwidth.config.options import Config
from bandwidth.hardware.devices import DeviceSet
from bandwidth.measurement import protocol
from bandwidth.measurement.session import Session
from bandwidth.plan.plan import make_plan
from bandwidth.processes.group import LocalGroup
from bandwidth.run import run
from bandwidth.stores.local import default_chunk_bytes

# 250,007 elements: chunks of 0.1 MB (25,000 float32) split it into 11 pieces; the small keys
# share chunks, one of them straddles a boundary.
SHAPES = [("w1", (250_007,)), ("b1", (3,)), ("w2", (120, 210)), ("b2", (5,))]
NUMEL = sum(math.prod(s) for _, s in SHAPES)


def session(n, optimizer="none", chunk_mb=None, dtype="float32"):
    return Session("local", SHAPES, DeviceSet("cpu", tuple(range(n))), list(range(n)),
                   LocalGroup(), dtype=dtype, optimizer=optimizer, seed=7, chunk_mb=chunk_mb)


def errors(s, iterations=3):
    samples, _ = protocol.measure(s, iterations=iterations, warmup=1, disp_batches=1, check=True,
                                  nbytes=NUMEL * 4, bus_factor=1.0)
    return [x.error for x in samples]


@pytest.mark.parametrize("n", [1, 2, 4])
@pytest.mark.parametrize("chunk_mb", [None, 0.1, 0.0004])
def test_exact_with_split_keys_and_chunk_boundaries(n, chunk_mb):
    s = session(n, chunk_mb=chunk_mb)
    assert errors(s) == [0.0, 0.0, 0.0]
    want = expected_sum(0, NUMEL, n, 7, "cpu").to(torch.float32)
    for replica in s.replicas:
        assert torch.equal(replica.outputs, want)
    chunks = s.store.chunks
    assert chunks[0][0] == 0 and chunks[-1][1] == NUMEL
    assert all(a[1] == b[0] for a, b in zip(chunks, chunks[1:]))          # no gap, no overlap
    sizes = {e - s for s, e in chunks}
    assert max(sizes) - min(sizes) <= 1                                   # equal pieces
    if chunk_mb is None:
        assert len(chunks) == 1              # CPU devices: one call per operation by default
    elif chunk_mb == 0.1:
        assert len(chunks) == math.ceil(NUMEL / 25_000)


def test_cpu_devices_stage_nothing():
    s = session(3)
    store = s.store
    assert not hasattr(store, "host_in") and store.host_weights is None and store.scratch is None
    assert "no staging copies" in " ".join(store.notes())
    # The sum lands in the first replica's outputs, and the gradients are left as they were.
    before = [r.grads.clone() for r in s.replicas]
    s.step()
    assert all(torch.equal(r.grads, b) for r, b in zip(s.replicas, before))
    assert torch.equal(s.replicas[0].outputs, before[0] + before[1] + before[2])


@pytest.mark.parametrize("chunk_mb", [None, 0.1])
@pytest.mark.parametrize("dtype, bound", [("float32", 1e-6), ("bfloat16", 2e-2)])
def test_sgd_on_cpu_devices_matches_the_closed_form(chunk_mb, dtype, bound):
    s = session(3, optimizer="sgd", chunk_mb=chunk_mb, dtype=dtype)
    assert all(0 <= e < bound for e in errors(s, iterations=4))
    want = expected_sum(0, NUMEL, 3, 7, "cpu") * (-0.05)         # 5 steps from zero
    for replica in s.replicas:
        assert torch.allclose(replica.outputs.double(), want, rtol=bound * 4, atol=1e-6)


def test_gpu_chunks_are_sixteenth_parts_between_2_and_32_mb():
    assert default_chunk_bytes(16 * 10**6, on_gpu=True) == 2 * 10**6
    assert default_chunk_bytes(258 * 10**6, on_gpu=True) == 258 * 10**6 // 16
    assert default_chunk_bytes(4 * 10**9, on_gpu=True) == 32 * 10**6
    assert default_chunk_bytes(258 * 10**6, on_gpu=False) == 258 * 10**6


def test_the_cpu_ceiling_is_the_least_traffic_at_the_fastest_rate(monkeypatch):
    # Every probe form timed at 1 s per call: copies move 2nS, adds 3nS, reads 2nS bytes, so the
    # fastest rate is the adds' 3nS/s and the bound moves 2nS at it: t = 2/3 s.
    monkeypatch.setattr(bounds, "_burst_seconds", lambda fn, **_: 1.0)
    nbytes, n = 4 * 10**6, 2
    gbps = bounds.cpu_local_gbps(nbytes, n)
    assert gbps == pytest.approx(nbytes * 2 * (n - 1) / n / (2 / 3) / 1e9)


def test_run_on_cpu_devices_names_the_local_ceiling():
    plan = make_plan(Config(kv_store="local", cpus=2, network="mlp", image_shape=(1, 28, 28),
                            num_classes=10, num_batches=2), store_class)
    result = run(plan.config, plan=plan)
    assert result.ceiling.name.startswith("host memory: least traffic at the fastest host memory "
                                          "rate, ")
    assert result.ceiling.of == "busbw" and result.ceiling.probe_nbytes == plan.nbytes


def test_the_memory_check_counts_no_staging_buffers_on_cpu_devices(monkeypatch):
    import bandwidth.plan.plan as plan_module
    from bandwidth.errors import OutOfMemoryError

    resnet = dict(kv_store="local", cpus=2, network="resnet", num_layers=50)
    plan = make_plan(Config(**resnet), store_class)
    nbytes = plan.nbytes
    assert nbytes == 102_015_648            # resnet-50, 102.02 MB
    # Per replica: gradients, outputs, the float32 expected sum, the check's scratch; nothing else.
    per_replica = 2 * nbytes + 4 * plan.numel + plan_module.CHECK_SCRATCH_BYTES
    assert plan_module.host_bytes(plan) == 2 * per_replica
    sgd = make_plan(Config(**resnet, optimizer="sgd"), store_class)
    assert plan_module.host_bytes(sgd) == 2 * per_replica + 2 * nbytes    # weights and scratch
    monkeypatch.setattr(plan_module, "free_bytes", lambda devices: [2 * per_replica])
    plan_module.check_memory(plan)                                       # fits exactly
    with pytest.raises(OutOfMemoryError, match=f"needs {4 * per_replica / 1e9:.2f} GB"):
        plan_module.check_memory(plan, plan)          # two backends at once: their needs add up
    monkeypatch.setattr(plan_module, "free_bytes", lambda devices: [2 * per_replica - 1])
    with pytest.raises(OutOfMemoryError, match="on 2 CPU devices needs"):
        plan_module.check_memory(plan)
