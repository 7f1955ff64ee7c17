"""Schedules on GPUs through their CUDA code paths (benchmarks/gpu_all.sh runs them; skipped
without CUDA): ``backward`` on ``device`` with two replicas sharing GPU 0 and on ``local``, with
each part's exchange a CUDA graph of its own (schedules.graphs.PartGraphs) and issued eagerly,
a step with compute as one graph (compute.stepgraph), and, with two GPUs, ``ddp`` and ``fsdp`` on
``nccl``."""

import pytest
import torch
from conftest import requires_cuda

import networks
from bandwidth.arrays.data import expected_sum
from bandwidth.config.options import Config
from bandwidth.hardware.devices import DeviceSet
from bandwidth.measurement.session import Session
from bandwidth.processes.group import LocalGroup
from bandwidth.run import run
from bandwidth.schedules.base import FORWARD
from bandwidth.schedules.graphs import PartGraphs
from bandwidth.schedules.registry import SCHEDULES

pytestmark = [pytest.mark.gpu, requires_cuda]

GPUS = tuple(range(torch.cuda.device_count())) if torch.cuda.is_available() else ()
RESNET50 = dict(network="resnet", num_layers=50, num_batches=3)


@pytest.mark.parametrize("kv, gpus", [("device", (0, 0)), ("local", (0,)), ("local", GPUS)])
@pytest.mark.parametrize("dtype, bound", [("float32", 0.0), ("bfloat16", 5e-2)])
def test_backward_on_one_gpu_is_exact(kv, gpus, dtype, bound):
    result = run(Config(kv_store=kv, gpus=gpus, schedule="backward", dtype=dtype, **RESNET50))
    assert all(0 <= s.error <= bound for s in result.samples), result.samples
    assert result.summary.busbw_median >= 0
    if kv == "local":            # local's auto stays eager (LocalStore.traits.auto_graph)
        assert result.launch == "eager"
    assert any("schedule backward" in note for note in result.notes)
    assert any(note.startswith("launch: ") for note in result.notes), result.notes


@pytest.mark.parametrize("kv, gpus, optimizer, bound", [
    ("device", (0, 0), "none", 0.0), ("device", (0, 0), "sgd", 1e-6),
    ("local", (0,), "none", 0.0)])
def test_backward_with_a_graph_per_part_is_exact(kv, gpus, optimizer, bound):
    result = run(Config(kv_store=kv, gpus=gpus, schedule="backward", launch="graph",
                        optimizer=optimizer, **RESNET50))
    assert result.launch == "graph"
    assert all(0 <= s.error <= bound for s in result.samples), result.samples
    assert any("replayed from a CUDA graph of its own" in n for n in result.notes), result.notes


def test_each_part_is_a_graph_and_compute_waits_for_its_part():
    """The session replays one graph per part, and a FORWARD slot issued after its part's WAIT
    reads the finished sum on the compute stream: from outputs zeroed before the step, a stream
    that did not wait would read zeros for the parts exchanged last (the first layers)."""
    schedule, session = backward_session()
    try:
        assert session.launch == "graph" and isinstance(session.graph, PartGraphs)
        assert len(session.graph.graphs) == len(schedule.parts) > 50
        store = session.store
        read = {}

        def compute(event):
            if event.kind == FORWARD:       # backward's part p is unit p
                read[event.unit] = [r.outputs.clone() for r in store.stores[event.unit].replicas]

        for replica in session.replicas:
            replica.outputs.zero_()
        session.synchronize()
        store.compute = compute
        session.prepare()
        session.step()
        store.compute = None
        session.synchronize()
        assert_each_forward_read_its_sum(read, store, len(schedule.parts))
        assert session.error() == 0.0
    finally:
        session.close()


def test_backward_with_compute_replays_parts_and_keeps_the_timeline():
    result = run(Config(kv_store="device", gpus=(0, 0), schedule="backward", launch="graph",
                        compute="flops", batch_size=8, **RESNET50))
    assert result.launch == "graph" and all(s.error == 0.0 for s in result.samples)
    timeline = result.costs.timeline
    lane = "replica 0 (cuda:0)"
    exchanges = {e["label"].split(" ", 1)[1]: e for e in timeline
                 if e["device"] == lane and e["lane"] == "exchange"}
    forwards = {e["label"][4:]: e for e in timeline
                if e["device"] == lane and e["lane"] == "compute" and e["label"].startswith("fwd")}
    assert len(exchanges) > 50 and set(exchanges) == set(forwards)
    for name, exchange in exchanges.items():
        # each exchange ends (its WAIT on the compute stream) before its layer's forward starts
        assert 0 <= exchange["start_s"] <= exchange["end_s"] <= forwards[name]["start_s"]


@pytest.mark.parametrize("kv, gpus, optimizer, launch, bound", [
    ("device", (0, 0), "none", "graph", 0.0), ("device", (0, 0), "sgd", "auto", 1e-6),
    ("local", (0,), "none", "graph", 0.0), ("nccl", (0,), "none", "graph", 0.0)])
def test_a_step_with_compute_on_one_gpu_is_one_graph(kv, gpus, optimizer, launch, bound):
    """compute.stepgraph: under --launch graph a backward step with compute is one CUDA graph
    (and the compute alone another); auto keeps it where its trial steps ran faster, and those
    steps are counted (with sgd every step moves the weights). The steps with compute are exact
    and the traced step still marks every exchange and slot."""
    result = run(Config(kv_store=kv, gpus=gpus, schedule="backward", launch=launch,
                        optimizer=optimizer, compute="flops", batch_size=8, **RESNET50))
    costs = result.costs
    assert costs.compute_launch == "step graph" or launch == "auto", costs.compute_launch
    assert 0 <= costs.error_max <= bound and all(0 <= s.error <= bound for s in result.samples)
    lanes = [e["lane"] for e in costs.timeline if e["device"] == "replica 0 (cuda:0)"]
    assert lanes.count("exchange") == lanes.count("compute") // 2 > 50


def test_the_whole_step_graph_orders_each_forward_after_its_part():
    """schedules.graphs.capture_step: a FORWARD slot captured after its part's WAIT reads the
    finished sum on the capture stream (from outputs zeroed before the replay, a slot not ordered
    after its part's exchange on the side stream would read zeros for the parts exchanged last)."""
    from bandwidth.schedules.graphs import capture_step
    schedule, session = backward_session()
    try:
        store = session.store
        read = {}

        def compute(event):
            if event.kind == FORWARD:       # backward's part p is unit p
                read[event.unit] = [r.outputs.clone() for r in store.stores[event.unit].replicas]

        graph = capture_step(store, compute)
        for replica in session.replicas:
            replica.outputs.zero_()
        session.prepare()
        session.step(graph=graph)
        session.synchronize()
        assert_each_forward_read_its_sum(read, store, len(schedule.parts))
        assert session.steps == 1 and session.error() == 0.0
    finally:
        session.close()


def test_flat_compute_replays_one_graph_per_run_of_slots():
    """Under flat, every unit's backward slot and then every unit's forward slot follow one
    another with only the exchange between: two runs, one graph each (compute.graphs), in the
    step and in the compute alone; the step stays exact and the timeline names each run."""
    result = run(Config(kv_store="device", gpus=(0, 0), launch="graph", compute="flops",
                        batch_size=8, **RESNET50))
    assert result.costs.compute_launch == "graph"
    assert all(s.error == 0.0 for s in result.samples)
    computes = [e["label"] for e in result.costs.timeline
                if e["device"] == "replica 0 (cuda:0)" and e["lane"] == "compute"]
    assert len(computes) == 2
    assert computes[0].startswith("bwd fc1") and computes[0].endswith("units)")
    assert computes[1].startswith("fwd conv0 .. ") and computes[1].endswith("units)")


@pytest.mark.skipif(len(GPUS) < 2, reason="needs two GPUs")
@pytest.mark.parametrize("schedule", ["backward", "ddp", "fsdp"])
@pytest.mark.parametrize("launch", ["eager", "graph"])
def test_nccl_schedules_on_gpus_are_exact(schedule, launch):
    if schedule == "fsdp" and launch == "graph":
        pytest.skip("fsdp's parts are issued eagerly (--launch graph is refused)")
    result = run(Config(kv_store="nccl", gpus=GPUS, schedule=schedule, launch=launch,
                        **RESNET50))
    assert [s.error for s in result.samples] == [0.0, 0.0, 0.0]
    assert result.launch == launch


@pytest.mark.skipif(len(GPUS) < 2, reason="needs two GPUs")
@pytest.mark.parametrize("launch", ["eager", "graph"])
def test_every_gpu_of_one_process_computes_its_share(launch):
    """``device`` drives both GPUs from one process: each GPU's compute slots run its own
    products, captured or not. The second GPU's slot graphs were once captured on the first
    GPU's capture stream: torch warned "The CUDA Graph is empty", and GPU 1 computed 0.9 ms of a
    19 ms step."""
    import warnings
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = run(Config(kv_store="device", gpus=GPUS[:2], schedule="backward",
                            launch=launch, compute="flops", batch_size=8, **RESNET50))
    assert not [w for w in caught if "Graph is empty" in str(w.message)]
    assert all(s.error == 0.0 for s in result.samples)
    # the compute alone of several GPUs: one graph each (compute.stepgraph.AloneGraphs)
    assert result.costs.compute_launch == ("graph per GPU" if launch == "graph" else "eager")
    busy = {}
    for e in result.costs.timeline:
        if e["lane"] == "compute":
            busy[e["on"]] = busy.get(e["on"], 0.0) + e["end_s"] - e["start_s"]
    assert set(busy) == {"cuda:0", "cuda:1"}
    assert min(busy.values()) > 0.5 * max(busy.values()), busy


def assert_each_forward_read_its_sum(read: dict, store, parts: int) -> None:
    """``read``: part -> its replicas' outputs cloned at the forward slot that reads them; each
    is the exact sum of the two replicas (seed 5)."""
    assert sorted(read) == list(range(parts))
    for part, clones in read.items():
        view = store.stores[part].replicas[0].outputs
        start = view.storage_offset()
        want = expected_sum(start, start + view.numel(), 2, 5, view.device).to(torch.float32)
        assert all(torch.equal(c, want) for c in clones), part


def backward_session():
    """(schedule, session): resnet-50 under ``backward`` on ``device --gpus 0,0`` with a CUDA
    graph per part, seed 5."""
    shapes = networks.get_shapes("resnet", num_layers=50)
    schedule = SCHEDULES["backward"](shapes, 4)
    return schedule, Session("device", shapes, DeviceSet("cuda", (0, 0)), [0, 1], LocalGroup(),
                             dtype="float32", optimizer="none", seed=5, chunk_mb=None,
                             launch="graph", schedule=schedule)
