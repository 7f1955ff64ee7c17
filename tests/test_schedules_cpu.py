"""The schedule stage on CPU devices: every schedule's parts and events, exact results of every
schedule under every mode that runs it and every dtype, faults caught, and bad input refused."""

import math

import pytest
import torch

import networks
from bandwidth.arrays.data import expected_sum
from bandwidth.hardware.devices import DeviceSet
from bandwidth.measurement import protocol
from bandwidth.measurement.session import Session
from bandwidth.processes.group import LocalGroup
from bandwidth.schedules.base import (
    ALL_GATHER, BACKWARD, EXCHANGE, FORWARD, REDUCE_SCATTER, WAIT, check_events, layer_name,
    layers)
from bandwidth.schedules.ddp import MIB, ddp_buckets
from bandwidth.schedules.fsdp import block_name
from bandwidth.schedules.registry import SCHEDULES
from gloo_pair import gloo_pair, received
from schedule_ranks import run_cases

SHAPES = [("fc1_weight", (64, 100)), ("fc1_bias", (64,)), ("fc2_weight", (300, 64)),
          ("fc2_bias", (300,)), ("h.0.attn_weight", (33, 3)), ("h.0.mlp_weight", (7, 3)),
          ("h.1.mlp_weight", (5, 5))]
NUMEL = sum(math.prod(s) for _, s in SHAPES)
DTYPES = [("float32", 0.0), ("float16", 2e-3), ("bfloat16", 2e-2)]
# ddp caps small enough that these arrays make several buckets: 25.6 kB, 76.8 kB, ...
DDP = {"bucket_mb": 30_000 / MIB, "first_bucket_mb": 1_000 / MIB}


def schedule(name, dtype="float32", shapes=SHAPES):
    return SCHEDULES[name](shapes, torch.tensor([], dtype=getattr(torch, dtype)).element_size(),
                           **(DDP if name == "ddp" else {}))


def test_layers_and_blocks_group_consecutive_arrays():
    assert [layer_name(n) for n in ("fc1_weight", "h.0.attn.c_attn.weight", "wte")] == \
        ["fc1", "h.0.attn.c_attn", "wte"]
    assert [u.keys for u in layers(SHAPES)] == [(0, 1), (2, 3), (4,), (5,), (6,)]
    assert [block_name(n) for n in ("h.0.ln_1.weight", "stage1_unit2_conv1_weight",
                                    "model.layers.3.mlp.up_proj.weight", "fc1_weight")] == \
        ["h.0", "stage1_unit2", "model.layers.3", "fc1"]
    assert [u.keys for u in schedule("fsdp").units] == [(0, 1), (2, 3), (4, 5), (6,)]


def test_ddp_buckets_close_at_their_cap_and_never_split_an_array():
    assert ddp_buckets([10, 10, 10, 10, 10], bucket_bytes=25, first_bucket_bytes=5) == \
        [[0], [1, 2, 3], [4]]
    assert ddp_buckets([30, 1, 1], bucket_bytes=25, first_bucket_bytes=25) == [[0], [1, 2]]
    parts = schedule("ddp").parts          # in key order; bucket 0 holds the last arrays
    assert [p.label for p in parts] == [f"bucket {b}" for b in range(len(parts) - 1, -1, -1)]
    assert sorted(k for p in parts for k in p.keys) == list(range(len(SHAPES)))


@pytest.mark.parametrize("name", list(SCHEDULES))
@pytest.mark.parametrize("network", ["mlp", "resnet", "gpt2", "inception-v3"])
def test_every_schedule_has_well_formed_events(name, network):
    image = (3, 299, 299) if network == "inception-v3" else (3, 224, 224)
    shapes = networks.get_shapes(network, image_shape=image)
    s = schedule(name, shapes=shapes)
    events = s.events()
    check_events(events, len(s.units), len(s.parts))
    assert sum(p.nbytes for p in s.parts) == networks.num_elements(shapes) * 4
    # Parts cover the arrays once, each a run of consecutive keys.
    keys = [k for p in s.parts for k in p.keys]
    assert keys == list(range(len(shapes)))
    backward = [e.unit for e in events if e.kind == BACKWARD]
    assert backward == sorted(backward, reverse=True)             # last layer first
    forward = [e.unit for e in events if e.kind == FORWARD]
    assert forward == sorted(forward)
    if name == "backward":   # each layer's exchange starts right after its backward slot
        for i, e in enumerate(events):
            if e.kind == BACKWARD:
                assert events[i + 1] == type(e)(EXCHANGE, part=e.unit)
    if name == "fsdp":       # two all-gathers and one reduce-scatter per unit
        ops = [(e.part, e.op) for e in events if e.kind == EXCHANGE]
        assert all(ops.count((u, ALL_GATHER)) == 2 and ops.count((u, REDUCE_SCATTER)) == 1
                   for u in range(len(s.units)))


def scheduled_session(kv, n, name, dtype="float32", optimizer="none"):
    return Session(kv, SHAPES, DeviceSet("cpu", tuple(range(n))), list(range(n)), LocalGroup(),
                   dtype=dtype, optimizer=optimizer, seed=3, chunk_mb=0.01,
                   schedule=schedule(name, dtype))


def errors(s, iterations=3):
    samples, _ = protocol.measure(s, iterations=iterations, warmup=1, disp_batches=1, check=True,
                                  nbytes=NUMEL * 4, bus_factor=1.0)
    return [x.error for x in samples]


@pytest.mark.parametrize("kv", ["local", "device"])
@pytest.mark.parametrize("dtype, bound", DTYPES)
@pytest.mark.parametrize("optimizer", ["none", "sgd"])
def test_backward_is_exact_in_the_single_process_modes(kv, dtype, bound, optimizer):
    s = scheduled_session(kv, 3, "backward", dtype, optimizer)
    bound = max(bound, 1e-6) if optimizer == "sgd" else bound      # sgd: rounding of lr x sum
    errs = errors(s)
    assert all(0 <= e <= bound for e in errs), errs
    if dtype == "float32" and optimizer == "none":
        ref = expected_sum(0, NUMEL, 3, 3, "cpu").to(torch.float32)
        assert all(torch.equal(r.outputs, ref) for r in s.replicas)
    s.close()


def test_a_part_never_exchanged_is_caught():
    s = scheduled_session("device", 2, "backward")
    s.store.events = [e for e in s.store.events if e.part != 1]     # fc2's exchange dropped
    for r in s.replicas:
        r.outputs.zero_()             # what the untimed thread trial's steps left there
    assert min(errors(s, iterations=2)) > 0.01


def test_a_part_exchanged_twice_with_sgd_is_caught():
    s = scheduled_session("local", 2, "backward", optimizer="sgd")
    twice = []
    for e in s.store.events:
        twice.append(e)
        if e.kind == WAIT and e.part == 0:
            twice += [type(e)(EXCHANGE, part=0), type(e)(WAIT, part=0)]
    s.store.events = twice
    assert min(errors(s, iterations=2)) > 0.01


@pytest.mark.timeout(240)
def test_every_schedule_is_exact_under_nccl_in_every_dtype():
    """One pair of Gloo processes runs backward, ddp and fsdp x 3 dtypes (and sgd)."""
    cases = [(schedule(name, dtype), dtype, "none") for name in ("backward", "ddp", "fsdp")
             for dtype, _ in DTYPES]
    cases += [(schedule(name), "float32", "sgd") for name in ("ddp", "fsdp")]
    got = {}
    with gloo_pair(run_cases, lambda r, port, q: (r, 2, port, SHAPES, cases, q)) as results:
        for case, errs, exact in received(results, len(cases), timeout_s=200):
            got[case] = (errs, exact)
    assert len(got) == len(cases), got
    bounds = dict(DTYPES)
    for (name, dtype, optimizer), (errs, exact) in got.items():
        bound = bounds[dtype] if optimizer == "none" else 1e-6
        assert all(0 <= e <= bound for e in errs), (name, dtype, optimizer, errs)
        if exact is not None:
            assert exact, (name, dtype)



@pytest.mark.parametrize("argv, words", [
    (["--schedule", "ddp", "--kv-store", "local"], "--schedule ddp runs under --kv-store nccl"),
    (["--schedule", "fsdp", "--kv-store", "device"], "--schedule fsdp runs under --kv-store nccl"),
    (["--schedule", "ddp", "--kv-store", "nccl", "--bucket-mb", "0"], "positive number of MiB"),
    (["--schedule", "ddp", "--kv-store", "nccl", "--bucket-mb", "nan"], "got nan"),
    (["--schedule", "ddp", "--kv-store", "nccl", "--bucket-mb", "-1"], "got -1"),
    (["--schedule", "ddp", "--kv-store", "nccl", "--bucket-mb", "25,x"], "numbers of MiB"),
    (["--schedule", "ddp", "--kv-store", "nccl", "--first-bucket-mb", "inf"], "got inf"),
    (["--schedule", "backward", "--bucket-mb", "25"], "add --schedule ddp"),
    (["--schedule", "zigzag"], "valid: flat, backward, ddp, fsdp"),
])
def test_bad_schedule_input_is_one_error(argv, words):
    from bandwidth.execution.commandline import build_parser, job_from_args
    from bandwidth.errors import ConfigError
    with pytest.raises(ConfigError, match=None) as raised:
        job_from_args(build_parser().parse_args(["--cpus", "2"] + argv))
    assert words in str(raised.value)


def test_a_sweep_of_modes_and_schedules_keeps_the_pairs_that_run():
    from bandwidth.execution.commandline import build_parser, job_from_args
    job = job_from_args(build_parser().parse_args(
        ["--cpus", "2", "--kv-store", "local,nccl", "--schedule", "flat,ddp",
         "--bucket-mb", "1,25"]))
    assert [(c.kv_store, c.schedule, c.bucket_mb) for c in job.configs] == [
        ("local", "flat", 25.0), ("nccl", "flat", 25.0), ("nccl", "ddp", 1.0),
        ("nccl", "ddp", 25.0)]


def test_the_command_line_refuses_a_mode_the_schedule_cannot_run(cli):
    proc = cli("--kv-store", "local", "--cpus", "2", "--network", "mlp", "--schedule", "ddp")
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "Traceback" not in proc.stderr


@pytest.mark.timeout(200)
def test_the_document_lists_ddps_buckets(cli, tmp_path):
    out = tmp_path / "r.json"
    proc = cli("--kv-store", "nccl", "--cpus", "2", "--network", "lenet", "--image-shape",
               "1,28,28", "--num-classes", "10", "--schedule", "ddp", "--bucket-mb", "0.1",
               "--num-batches", "2", "--no-reference", "--json", str(out), timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = __import__("json").loads(out.read_text())["results"][0]
    parts = result["schedule"]["parts"]
    shapes = networks.get_shapes("lenet", image_shape=(1, 28, 28), num_classes=10)
    expected = SCHEDULES["ddp"](shapes, 4, bucket_mb=0.1).parts[::-1]
    assert [p["nbytes"] for p in parts] == [p.nbytes for p in expected] and len(parts) > 1
    assert [p["arrays"] for p in parts] == [[shapes[k][0] for k in p.keys] for p in expected]
    assert result["summary"]["error_max"] == 0.0
    assert "nccl ddp 0.1/1MiB" in proc.stdout or "schedule ddp" in proc.stdout


def test_how_a_scheduled_step_is_launched():
    """backward and ddp follow the flat rule with a graph per part on GPUs; fsdp and CPU devices
    stay eager; the note says which and why (tests/test_schedules_gpu.py runs the graphs)."""
    from bandwidth.plan.launching import launch_of, schedule_launch_note
    from bandwidth.stores.registry import KVSTORES
    gpu, gpus, cpus = DeviceSet("cuda", (0, 0)), DeviceSet("cuda", (0,)), DeviceSet("cpu", (0, 1))
    device, local, nccl = KVSTORES["device"], KVSTORES["local"], KVSTORES["nccl"]
    backward, fsdp = schedule("backward"), schedule("fsdp")
    assert launch_of(device, gpu, None, "none", backward) == "auto"
    assert launch_of(device, gpu, "graph", "sgd", backward) == "graph"
    assert launch_of(device, gpu, "eager", "none", backward) == "eager"
    assert launch_of(local, gpus, None, "none", backward) == "eager"        # auto_graph False
    assert launch_of(local, gpus, "graph", "none", backward) == "graph"
    assert launch_of(nccl, gpus, "graph", "none", schedule("ddp")) == "graph"
    assert launch_of(nccl, gpus, "graph", "none", fsdp) == "eager"
    assert launch_of(device, cpus, None, "none", backward) == "eager"
    note = schedule_launch_note(backward, device, gpu, "graph", "none", True)
    assert note.startswith(f"launch: each of the {len(backward.parts)} parts' exchanges "
                           "replayed from a CUDA graph")
    assert "(local runs eager under --launch auto" in schedule_launch_note(
        backward, local, gpus, None, "none", False)
    assert "(fsdp's parts are not captured)" in schedule_launch_note(
        fsdp, nccl, gpus, "auto", "none", False)
    assert "(--launch eager)" in schedule_launch_note(backward, device, gpu, "eager", "none",
                                                      False)


def test_a_scheduled_step_on_cpu_devices_runs_eager_and_says_so(cli):
    s = scheduled_session("device", 2, "backward")
    assert s.launch == "eager" and s.graph is None
    assert errors(s, iterations=1) == [0.0]
    s.close()
    proc = cli("--kv-store", "device", "--cpus", "2", "--network", "mlp", "--schedule",
               "backward", "--num-batches", "1", "--no-reference")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "# note: launch: eager, each of the 3 parts' exchanges issued from the host (CPU " \
        "devices)" in proc.stdout


def test_compute_slots_run_together_where_no_exchange_parts_them():
    """compute.graphs.slot_runs (one CUDA graph per run): flat's backward slots and forward slots
    are one run each, backward's every slot its own, ddp's backward slots up to each unit that
    completes a bucket; every slot in exactly one run, in the events' order."""
    from bandwidth.compute.graphs import slot_runs
    for name in SCHEDULES:
        events = schedule(name).events()
        runs = slot_runs(events)
        slots = [(e.unit, e.kind == BACKWARD) for e in events if e.kind in (FORWARD, BACKWARD)]
        assert [slot for run in runs for slot in run] == slots
        between = [e.kind in (FORWARD, BACKWARD) for e in events]
        # a run ends exactly where a non-compute event comes between two compute slots
        assert len(runs) == sum(1 for i, c in enumerate(between)
                                if c and (i == 0 or not between[i - 1]))
    units = len(schedule("flat").units)
    assert [len(r) for r in slot_runs(schedule("flat").events())] == [units, units]
    assert all(len(r) == 1 for r in slot_runs(schedule("backward").events()))
    ddp = schedule("ddp")
    backward_runs = [r for r in slot_runs(ddp.events()) if r[0][1]]
    # a run per unit that completes buckets (one unit may complete two)
    assert 1 < len(backward_runs) <= len(ddp.parts)
    assert sum(map(len, backward_runs)) == len(ddp.units)


def test_a_step_replayed_whole_counts_as_one_of_the_sessions_steps():
    """compute.stepgraph: a step with compute replayed as one graph is one session step (the
    error check counts it: with sgd every step moves the weights), and the compute alone's graph
    replays instead of the slots. Here the "graph" is the eager step, on CPU devices."""
    from bandwidth.measurement.costs import ComputeAlone, StepWithCompute
    s = scheduled_session("device", 2, "backward", optimizer="sgd")

    class Replay:
        def __init__(self, work):
            self.work, self.replays = work, 0

        def replay(self):
            self.replays += 1
            self.work()

    whole = Replay(s.store.step)
    step = StepWithCompute(s, [], None, s.store.events, whole)
    errs = errors(step, iterations=3)
    assert whole.replays == 4 and s.steps == 4
    assert all(0 <= e <= 1e-6 for e in errs), errs
    alone = Replay(lambda: None)
    ComputeAlone(s, [], None, s.store.events, alone).step()       # no slots: slots is None
    assert alone.replays == 1 and s.steps == 4
    s.close()


def test_a_schedules_parts_are_planned_as_parts():
    """Every part's store of a scheduled step is built as a part (Traits.part_options): device's
    parts take PART_GRAPH_SCHEDULE on a shared GPU, a whole network's store does not."""
    from bandwidth.stores import device as device_mode
    s = scheduled_session("device", 2, "backward")
    assert len(s.store.stores) > 1
    assert {part.shared_schedule for part in s.store.stores} == \
        {device_mode.PART_GRAPH_SCHEDULE}
    s.close()
    assert device_mode.DeviceStore.shared_schedule is None


def test_a_whole_step_graph_needs_one_gpu_and_graphs_per_part():
    from types import SimpleNamespace as NS

    from bandwidth.compute.stepgraph import step_graph_unavailable
    from bandwidth.schedules.graphs import PartGraphs
    gpu0, gpu1 = torch.device("cuda", 0), torch.device("cuda", 1)
    runners = [NS(kind="cuda", waits=False, device=gpu0)]
    parts = PartGraphs.__new__(PartGraphs)          # what the session replays per part
    one = NS(graph=parts, replicas=[NS(device=gpu0), NS(device=gpu0)])
    assert step_graph_unavailable(one, runners) is None
    assert step_graph_unavailable(one, [NS(kind="cpu", waits=False)]) == "no products on a GPU"
    assert step_graph_unavailable(one, [NS(kind="cuda", waits=True)]) == "no products on a GPU"
    eager = NS(graph=None, replicas=one.replicas)
    assert "not replayed from graphs" in step_graph_unavailable(eager, runners)
    two = NS(graph=parts, replicas=[NS(device=gpu0), NS(device=gpu1)])
    assert step_graph_unavailable(two, runners) == "the process drives 2 GPUs"


def test_the_summary_says_how_the_products_were_issued():
    from bandwidth.results.costs import StepCosts
    base = dict(batch_size=32, devices=2, compute_s=1e-3, exchange_s=1e-3, step_s=1.5e-3,
                exposed_s=5e-4, overlap=0.5, compute_slowdown=1.0, samples_per_s=1.0,
                performance_ratio=0.7, compute_rate_flops=5e14, large_matmul_rate_flops=7e14,
                calibrated_rate_flops=6e14, step_flops=10 ** 12, device_type="cuda")
    words = {"eager": "products issued eagerly",
             "graph": "products issued from a CUDA graph per run of slots",
             "step graph": "products issued with the exchange, one CUDA graph per step",
             "graph per GPU": "products issued from a CUDA graph per run of slots (the compute "
                              "alone: one CUDA graph per GPU)"}
    for launch, said in words.items():
        assert said in StepCosts(**base, compute_launch=launch).lines()[2]
    assert "max error not checked in the steps" in StepCosts(**base).lines()[1]
    assert "max error 0.000000 in the steps" in StepCosts(**base, error_max=0.0).lines()[1]
