"""The kvstore modes on CPU devices: exact results, detected faults, MXNet's key placement."""

import logging
import math

import pytest
import torch

from bandwidth.arrays.data import expected_sum, fill_gradient
from bandwidth.arrays.layout import Layout
from bandwidth.config.options import Config
from bandwidth.hardware import devices as dev
from bandwidth.hardware.devices import DeviceSet, peer_warning
from bandwidth.measurement import protocol
from bandwidth.measurement.session import Session
from bandwidth.processes.group import LocalGroup
from bandwidth.run import run
from bandwidth.stores.device import DeviceStore
from bandwidth.stores.owners import assign_owners

SHAPES = [("fc1_weight", (64, 100)), ("fc1_bias", (64,)), ("fc2_weight", (300, 64)),
          ("fc2_bias", (300,)), ("odd", (7, 3))]
NUMEL = sum(math.prod(s) for _, s in SHAPES)


def session(kv, n, dtype="float32", optimizer="none", chunk_mb=0.01):
    return Session(kv, SHAPES, DeviceSet("cpu", tuple(range(n))), list(range(n)), LocalGroup(),
                   dtype=dtype, optimizer=optimizer, seed=3, chunk_mb=chunk_mb)


def errors(s, iterations=3):
    samples, _ = protocol.measure(s, iterations=iterations, warmup=1, disp_batches=1, check=True,
                                  nbytes=NUMEL * 4, bus_factor=1.0)
    return [x.error for x in samples]


@pytest.mark.parametrize("kv", ["local", "device"])
@pytest.mark.parametrize("n", [1, 2, 3, 5])
def test_float32_without_optimizer_is_exact(kv, n):
    s = session(kv, n)
    assert errors(s) == [0.0, 0.0, 0.0]
    # Every replica holds the closed-form sum, key by key.
    ref = expected_sum(0, NUMEL, n, 3, "cpu").to(torch.float32)
    for replica in s.replicas:
        assert torch.equal(replica.outputs, ref)


@pytest.mark.parametrize("kv", ["local", "device"])
@pytest.mark.parametrize("dtype, bound", [("float32", 1e-6), ("float16", 2e-3), ("bfloat16", 2e-2)])
def test_sgd_matches_the_closed_form_update(kv, dtype, bound):
    s = session(kv, 3, dtype=dtype, optimizer="sgd")
    errs = errors(s, iterations=4)
    assert all(0 <= e < bound for e in errs), errs
    # After 5 steps (warm-up included) from zero: w = -5 * 0.01 * sum.
    ref = expected_sum(0, NUMEL, 3, 3, "cpu") * (-0.05)
    got = s.replicas[2].outputs.double()
    assert torch.allclose(got, ref, rtol=bound * 4, atol=1e-6)


def test_a_wrong_result_shows_as_error():
    s = session("device", 2)
    errors(s, iterations=1)
    s.replicas[1].outputs[:10] += 1.0       # corrupt what GPU 1 "pulled"
    assert s.error() > 0.0


def test_skipped_broadcast_is_caught():
    class NoPush(DeviceStore):
        def step(self):
            for r in self.replicas:
                r.outputs.copy_(r.grads)    # every device keeps its own gradient
    s = session("device", 2)
    s.store = NoPush(s.replicas, s.layout, None, LocalGroup(), 1000)
    assert min(errors(s, iterations=2)) > 0.1


def test_gradients_differ_per_replica_and_are_not_zero():
    a, b = torch.empty(1000), torch.empty(1000)
    fill_gradient(a, 0, 0)
    fill_gradient(b, 1, 0)
    assert not torch.equal(a, b)
    assert (a != 0).float().mean() > 0.9
    assert a.abs().max() <= 0.5


def test_owner_assignment_follows_mxnet_greedy_rule():
    # Largest first onto the least-loaded device: 100 -> 0, 60 -> 1, 50 -> 1, 10 -> 0 (tie-free).
    assert assign_owners([10, 100, 50, 60], 2) == [0, 0, 1, 1]
    layout = DeviceStore.make_layout([(str(i), (k,)) for i, k in enumerate([10, 100, 50, 60])], 2,
                                     owners="greedy")
    assert [seg.key for seg in layout.segments] == [0, 1, 2, 3]
    owners = assign_owners([5, 5, 5, 5, 5, 5], 3)
    assert sorted(owners) == [0, 0, 1, 1, 2, 2]


def test_layout_views_share_the_flat_buffer():
    layout = Layout.build(SHAPES, [4, 3, 2, 1, 0])
    flat = torch.arange(layout.numel, dtype=torch.float32)
    v = layout.view(flat, 4)
    assert v.shape == (7, 3) and v[0, 0] == 0
    assert layout.view(flat, 0).shape == (64, 100)
    v.fill_(-1)
    assert flat[:21].eq(-1).all()


def test_nccl_mode_runs_gloo_processes_on_cpu_devices():
    config = Config(network="mlp", image_shape=(1, 28, 28), num_classes=10, kv_store="nccl",
                    cpus=3, num_batches=3, optimizer="sgd", timeout_s=120)
    result = run(config)
    assert [s.iteration for s in result.samples] == [1, 2, 3]
    assert all(0 <= s.error < 1e-6 for s in result.samples)
    assert any("Gloo" in note for note in result.notes)
    assert result.reference is not None and result.reference.busbw_median > 0
    assert result.summary.bus_factor == pytest.approx(4 / 3)


def test_chunks_are_equal_and_cover_the_range():
    from bandwidth.arrays.layout import chunk_ranges
    assert chunk_ranges(10, 20, 4) == [(10, 13), (13, 16), (16, 20)]
    assert chunk_ranges(0, 5, 100) == [(0, 5)]
    assert chunk_ranges(3, 3, 4) == []


def test_device_mode_default_pipelines_each_region_in_two_chunks():
    s = Session("device", SHAPES, DeviceSet("cpu", (0, 1)), [0, 1], LocalGroup(), dtype="float32",
                optimizer="none", seed=0, chunk_mb=None)
    assert [len(c) for c in s.store.chunks] == [2, 2]
    assert errors(s, iterations=1) == [0.0]


# PEERS[i][j]: GPU i can access GPU j. 0 and 2 reach each other neither way; 2 reaches 1 but 1
# does not reach 2.
PEERS = [[True, True, False],
         [True, True, False],
         [False, True, True]]


def test_peer_warning_names_the_pairs_without_access():
    text = peer_warning(PEERS, [0, 1, 2])
    assert text.startswith("only 3 out of 6 GPU pairs have direct (peer-to-peer) access")
    assert text.endswith(": 0<->2, 1->2")
    assert peer_warning(PEERS, [4, 5, 7]).endswith(": 4<->7, 5->7")    # named by GPU id
    assert peer_warning([[True, True], [True, True]], [0, 1]) is None
    assert peer_warning([], []) is None                                 # CPU devices


def test_device_mode_logs_the_warning_once_before_the_iterations(monkeypatch, caplog):
    # A logged warning: measure.py's logging configuration sends it to stderr.
    monkeypatch.setattr(dev, "peer_matrix", lambda devices: PEERS)
    with caplog.at_level(logging.WARNING, logger="bandwidth.stores.device"):
        s = session("device", 3)
        at_start = [r.getMessage() for r in caplog.records]
        assert errors(s) == [0.0, 0.0, 0.0]
    assert len(at_start) == 1 and at_start[0].endswith("0<->2, 1->2")
    assert len(caplog.records) == 1               # not repeated by the iterations
    notes = s.store.notes()
    assert f"WARNING: {at_start[0]}" in notes      # and still a note in the summary
    assert "  . v v" in notes
