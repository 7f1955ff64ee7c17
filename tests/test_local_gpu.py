"""The local mode on a GPU: exact through every chunk schedule (one GPU goes straight back up,
two replicas sharing a GPU sum on the host, SGD on the host copy of the weights), and its ceiling
on one GPU is the duplex host path, bounding algbw. Skipped without CUDA."""

import math

import pytest
import torch
from conftest import requires_cuda

from bandwidth.arrays.data import expected_sum
from bandwidth.config.options import Config
from bandwidth.hardware.devices import DeviceSet
from bandwidth.measurement import protocol
from bandwidth.measurement.session import Session
from bandwidth.processes.group import LocalGroup
from bandwidth.run import run

pytestmark = [pytest.mark.gpu, requires_cuda]

# Keys of 1,000,003 and 7 elements and one of 300,000: chunks of 0.5 MB (125,000 float32) cut
# the first key into pieces and hold several small keys each.
SHAPES = [("big", (1_000_003,)), ("odd", (7,)), ("mid", (300, 1000))]
NUMEL = sum(math.prod(s) for _, s in SHAPES)


def session(gpus, optimizer="none", chunk_mb=0.5, dtype="float32", launch="eager"):
    return Session("local", SHAPES, DeviceSet("cuda", gpus), list(range(len(gpus))), LocalGroup(),
                   dtype=dtype, optimizer=optimizer, seed=5, chunk_mb=chunk_mb, launch=launch)


def errors(s, iterations=3):
    samples, _ = protocol.measure(s, iterations=iterations, warmup=1, disp_batches=1, check=True,
                                  nbytes=NUMEL * 4, bus_factor=1.0)
    return [x.error for x in samples]


@pytest.mark.parametrize("gpus", [(0,), (0, 0)])
@pytest.mark.parametrize("chunk_mb", [0.5, 4.0, None])
def test_local_on_a_gpu_is_exact_whatever_the_chunks(gpus, chunk_mb):
    s = session(gpus, chunk_mb=chunk_mb)
    try:
        assert errors(s) == [0.0, 0.0, 0.0]
        want = expected_sum(0, NUMEL, len(gpus), 5, "cpu").to(torch.float32)
        for replica in s.replicas:
            assert torch.equal(replica.outputs.cpu(), want)
        if chunk_mb == 0.5:
            assert len(s.store.chunks) == math.ceil(NUMEL / 125_000)
        text = " ".join(s.store.notes())
        assert ("nothing to sum" in text) == (len(gpus) == 1), text
    finally:
        s.close()


@pytest.mark.parametrize("gpus", [(0,), (0, 0)])
def test_local_sgd_on_a_gpu_matches_the_closed_form(gpus):
    s = session(gpus, optimizer="sgd")
    try:
        assert all(0 <= e < 1e-6 for e in errors(s, iterations=4))
        want = expected_sum(0, NUMEL, len(gpus), 5, "cpu") * (-0.05)     # 5 steps from zero
        assert torch.allclose(s.replicas[-1].outputs.cpu().double(), want, rtol=4e-6, atol=1e-6)
    finally:
        s.close()


def test_local_on_one_gpu_is_judged_against_the_duplex_host_path():
    result = run(Config(kv_store="local", gpus=(0,), network="resnet", num_layers=50,
                        num_batches=3))
    assert [s.error for s in result.samples] == [0.0, 0.0, 0.0]
    ceiling = result.ceiling
    assert ceiling is not None and ceiling.of == "algbw" and "duplex" in ceiling.name
    assert ceiling.gbps > 1.0
    # A ceiling is an upper bound: within the 10 % noise margin, or marked as not one.
    assert ceiling.not_a_bound or result.pct_of_ceiling <= 110.0


@pytest.mark.parametrize("chunk_mb", [0.5, None])
def test_local_graph_on_one_gpu_is_exact_and_auto_stays_eager(chunk_mb):
    # --launch graph captures one GPU's copies down and up (and the events between them) and
    # replays them: exact every step; auto issues them eagerly (LocalStore.traits.auto_graph).
    for launch, want in (("graph", "graph"), ("auto", "eager")):
        s = session((0,), chunk_mb=chunk_mb, launch=launch)
        try:
            assert s.launch == want and (s.graph is not None) == (want == "graph")
            assert errors(s, iterations=4) == [0.0] * 4
            want_sum = expected_sum(0, NUMEL, 1, 5, "cpu").to(torch.float32)
            assert torch.equal(s.replicas[0].outputs.cpu(), want_sum)
        finally:
            s.close()


def test_local_graph_where_the_host_sums_runs_eager():
    # Two replicas (or an optimizer) need the host between the copies: no graph, eager steps.
    for gpus, optimizer in (((0, 0), "none"), ((0,), "sgd")):
        s = session(gpus, optimizer=optimizer, launch="graph")
        try:
            assert s.launch == "eager" and s.graph is None and s.graph_failure is None
            assert all(0 <= e < 1e-6 for e in errors(s))
        finally:
            s.close()
