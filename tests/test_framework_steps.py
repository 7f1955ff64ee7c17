"""The framework's own step (``--framework torch``, bandwidth/measurement/framework.py): real
DistributedDataParallel and FSDP2 over the module of a network's units (schedules/torchmodel.py),
exact on CPU devices (Gloo stands in for NCCL, for both), a wrong gradient caught, its figures in
the summary, the table and the JSON, bad input refused in one line; on GPUs (marked ``gpu``) the
same through measure.py's pipeline on every GPU there is."""

import json
import re

import pytest
import torch
from conftest import requires_cuda
from framework_ranks import run_cases
from gloo_pair import gloo_pair, received

from bandwidth.formulas import framework_split
from bandwidth.results.costs import FrameworkCosts
from bandwidth.schedules.base import Unit
from bandwidth.schedules.torchmodel import UnitsModule, key_offsets

# Two fsdp blocks (h.0, h.1) and a layer; ddp at 0.01 MiB caps makes several buckets.
SHAPES = [["fc1_weight", [64, 100]], ["fc1_bias", [64]], ["h.0.attn_weight", [33, 3]],
          ["h.0.mlp_weight", [7, 3]], ["h.1.mlp_weight", [5, 5]], ["h.1.mlp_bias", [3]]]
DTYPES = {"float32": 0.0, "float16": 2e-3, "bfloat16": 2e-2}
FRAMEWORK_KEYS = {"name", "wraps", "step_s", "schedule_step_s", "compute_s", "network_s",
                  "own_s", "compute_share", "network_share", "own_share", "performance_ratio",
                  "error_max", "notes", "host_s", "step_ci_s"}


@pytest.fixture(scope="module")
def network(tmp_path_factory):
    path = tmp_path_factory.mktemp("framework") / "tiny.json"
    path.write_text(json.dumps(SHAPES))
    return str(path)


# -- the module and the figures, in this process ------------------------------------------------

class Recorder:
    def __init__(self, grads):
        self.calls, self.grads = [], grads

    def compute(self, unit, backward):
        self.calls.append(("bwd" if backward else "fwd", unit))

    def gradient(self, key):
        self.calls.append(("grad", key))
        return self.grads.pop(key)


def test_the_module_runs_each_units_compute_and_hands_over_its_gradients():
    shapes = [(n, tuple(s)) for n, s in SHAPES]
    units = [Unit(0, "fc1", (0, 1)), Unit(1, "h.0", (2, 3)), Unit(2, "h.1", (4, 5))]
    flat = torch.arange(sum(torch.Size(s).numel() for _, s in shapes), dtype=torch.float32)
    offsets = key_offsets(shapes)
    views = {k: flat[offsets[k]:offsets[k] + torch.Size(s).numel()].view(s)
             for k, (_, s) in enumerate(shapes)}
    pointers = {k: v.data_ptr() for k, v in views.items()}
    hooks = Recorder(views)
    model = UnitsModule(shapes, units, torch.float32, torch.device("cpu"), hooks)
    assert [[tuple(p.shape) for p in m.params] for m in model.units] == \
        [[(64, 100), (64,)], [(33, 3), (7, 3)], [(5, 5), (3,)]]
    model(torch.zeros(1)).sum().backward()
    # each unit's backward computes, then hands its gradients last array first
    assert hooks.calls == [("fwd", 0), ("fwd", 1), ("fwd", 2), ("bwd", 2), ("grad", 5),
                           ("grad", 4), ("bwd", 1), ("grad", 3), ("grad", 2), ("bwd", 0),
                           ("grad", 1), ("grad", 0)]
    params = [p for m in model.units for p in m.params]
    # autograd keeps each handed view as the gradient: no copy
    assert [p.grad.data_ptr() for p in params] == [pointers[k] for k in range(len(shapes))]
    with pytest.raises(ValueError, match="every array once"):
        UnitsModule(shapes, units[:2], torch.float32, torch.device("cpu"), hooks)


def test_the_split_adds_up_to_the_framework_step():
    assert framework_split(0.010, 0.006, 0.003) == pytest.approx((0.006, 0.003, 0.001))
    # faster than the schedule: the framework's own cost is negative
    assert framework_split(0.008, 0.006, 0.003)[2] == pytest.approx(-0.001)
    samples = [{"seconds": s, "error": 0.0} for s in (0.011, 0.010, 0.012)]
    costs = FrameworkCosts.of({"name": "torch", "wraps": "DistributedDataParallel",
                               "samples": samples}, compute_s=0.006, step_s=0.009,
                              exposed_s=0.003)
    d = costs.to_dict()
    assert set(d) == FRAMEWORK_KEYS
    assert d["step_s"] == 0.011 and d["own_s"] == pytest.approx(0.002)
    assert d["compute_share"] + d["network_share"] + d["own_share"] == pytest.approx(1.0)
    first, split = costs.lines("ddp")
    assert "framework torch (DistributedDataParallel): step 11.000 ms against the ddp " \
        "schedule's 9.000 ms (x1.222)" in first
    assert split == ("#   the framework's step = compute 6.000 ms (54.5 %) + network 3.000 ms "
                     "(27.3 %, what the ddp schedule exposes) + the framework's own 2.000 ms "
                     "(18.2 %)")
    assert d["step_ci_s"] is None                       # 3 samples give no 95 % interval
    # 10 samples: the median's 95 % interval is the 2nd to the 9th smallest (order statistics)
    ten = [{"seconds": s / 1000, "error": 0.0} for s in (15, 11, 12, 18, 13, 10, 14, 16, 19, 17)]
    costs = FrameworkCosts.of({"name": "torch", "wraps": "FSDP2 fully_shard",
                               "samples": ten}, compute_s=0.006, step_s=0.009,
                              exposed_s=0.003)
    assert costs.step_ci_s == pytest.approx((0.011, 0.018))


def test_the_median_interval_is_the_gates_own():
    from bandwidth.formulas import median_ci
    from bandwidth.report import stats
    assert stats.median_ci is median_ci
    assert median_ci([3, 1, 2, 5, 4]) is None            # below 6 samples: none at 95 %
    assert median_ci([6, 1, 2, 5, 4, 3]) == (1.0, 6.0)
    low, high = median_ci(range(100))
    assert (low, high) == (39.0, 60.0)


# -- exact on CPU devices: real processes ------------------------------------------------------

@pytest.mark.timeout(120)
def test_ddp_and_fsdp2_are_exact_on_cpu_devices_and_a_wrong_gradient_is_caught(network):
    """One pair of Gloo processes: DistributedDataParallel and FSDP2 in every dtype, then each
    with one rank's gradients wrong."""
    cases = [(name, dtype, False) for name in ("ddp", "fsdp") for dtype in DTYPES]
    cases += [("ddp", "float32", True), ("fsdp", "float32", True)]
    got = {}
    with gloo_pair(run_cases, lambda r, port, q: (r, 2, port, network, cases, q)) as results:
        for case, errors in received(results, len(cases), timeout_s=100):
            got[case] = errors
    assert len(got) == len(cases), got
    for (name, dtype, fault), errors in got.items():
        assert all(isinstance(e, float) for e in errors), (name, dtype, errors)
        if fault:
            assert min(errors) > 0.01, (name, errors)
        else:
            assert all(0 <= e <= DTYPES[dtype] for e in errors), (name, dtype, errors)


# -- the command line ----------------------------------------------------------------------------

RUN = ["--kv-store", "nccl", "--cpus", "2", "--compute-ms", "1,2", "--framework", "torch",
       "--num-batches", "3", "--no-reference"]


@pytest.mark.timeout(90)
def test_one_run_gives_compute_the_schedules_step_and_the_frameworks_split(cli, network,
                                                                          tmp_path):
    out = tmp_path / "ddp.json"
    done = cli(*RUN, "--network", network, "--schedule", "ddp", "--bucket-mb", "0.0005",
               "--first-bucket-mb", "0.0005", "--host-ms", "0.5,1", "--json", str(out),
               timeout=80)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    step = next(line for line in lines if line.startswith("#   step at batch"))
    assert "compute alone" in step and "step" in step
    first = next(line for line in lines if line.startswith("#   framework torch"))
    assert "(DistributedDataParallel): step" in first and "against the ddp schedule's" in first
    assert first.endswith("max error 0.000000")
    assert "#   no 95 % interval of the medians from 3 iterations (6 or more give one: " \
        "--num-batches)" in lines
    split = next(line for line in lines if line.startswith("#   the framework's step = "))
    assert "compute" in split and "network" in split and "the framework's own" in split
    # on CPU devices the host is the device: no host time of its own (a GPU's test has it)
    assert not any(line.startswith("#   the host issued the framework") for line in lines)
    note = next(line for line in lines
                if line.startswith("# note: framework torch: DistributedDataParallel over 4 "))
    # DDP's rebuilt buckets are the schedule's parts (gradients ready last array first)
    buckets = re.search(r"(\d+) bucket\(s\) .*the ddp schedule's parts: (\d+)", note)
    assert buckets and buckets.group(1) == buckets.group(2) != "1", note
    (result,) = json.loads(out.read_text())["results"]
    assert result["config"]["framework"] == "torch"
    assert result["config"]["host_ms"] == [0.5, 1.0]
    costs = result["step_costs"]
    assert costs["compute_launch"] == "eager (--host-ms)"
    # the compute alone spends the host's 1.5 ms beside the 3 ms of waits (CPU devices)
    assert costs["compute_s"] >= 0.0045
    framework = costs["framework"]
    assert set(framework) == FRAMEWORK_KEYS
    assert framework["error_max"] == 0.0
    assert framework["host_s"] is None
    assert framework["schedule_step_s"] == costs["step_s"]
    assert framework["compute_s"] == costs["compute_s"]
    assert framework["network_s"] == costs["exposed_s"]
    assert framework["compute_s"] + framework["network_s"] + framework["own_s"] == \
        pytest.approx(framework["step_s"])


@pytest.mark.timeout(120)
def test_a_sweep_of_ddp_and_fsdp_tables_the_frameworks_step(cli, network, tmp_path):
    out = tmp_path / "sweep.json"
    done = cli(*RUN, "--network", network, "--schedule", "ddp,fsdp", "--json", str(out),
               timeout=110)
    assert done.returncode == 0, done.stderr
    header = next(line for line in done.stdout.splitlines() if "exposed ms" in line)
    assert "framework ms" in header and "its own ms" in header and "its host ms" in header
    rows = [line.split() for line in done.stdout.splitlines()
            if re.match(r"\s+[12]\s+(ddp|fsdp)", line)]
    assert len(rows) == 2 and all(row[-1] == "-" for row in rows), rows     # CPU devices
    results = json.loads(out.read_text())["results"]
    assert [r["step_costs"]["framework"]["wraps"] for r in results] == \
        ["DistributedDataParallel", "FSDP2 fully_shard"]
    assert all(r["step_costs"]["framework"]["error_max"] == 0.0 for r in results)


# -- bad input -----------------------------------------------------------------------------------

@pytest.mark.parametrize("argv, words", [
    (["--schedule", "backward"], "--schedule backward has no counterpart there: use "
                                 "--schedule ddp,fsdp"),
    (["--schedule", "ddp,flat"], "--schedule flat has no counterpart"),
    ([], "--schedule flat has no counterpart"),
    (["--schedule", "ddp", "--compute", "none"], "give --compute flops, --compute-ms"),
    (["--schedule", "fsdp", "--optimizer", "sgd"], "drop --optimizer sgd"),
    (["--schedule", "ddp", "--framework", "tensorflow"], "unknown --framework 'tensorflow'; "
                                                         "valid: none, torch"),
    (["--schedule", "ddp", "--kv-store", "local"], "--schedule ddp runs under --kv-store nccl"),
    (["--schedule", "ddp", "--host-ms", "5"], "--host-ms must be the host's milliseconds"),
    (["--schedule", "ddp", "--host-ms", "0,0"], "(not both 0)"),
    (["--schedule", "ddp", "--host-ms", "1,nan"], "--host-ms must be"),
    (["--schedule", "ddp", "--compute", "none", "--host-ms", "2,3"],
     "--host-ms is the host's time to issue a step's compute: give the compute too"),
])
def test_bad_framework_input_is_one_error(argv, words):
    from bandwidth.errors import ConfigError
    from bandwidth.execution.commandline import build_parser, job_from_args
    base = ["--cpus", "2", "--kv-store", "nccl", "--framework", "torch", "--compute-ms", "1,2"]
    args = base + argv
    if "--compute" in argv:
        args = [a for a in args if a not in ("--compute-ms", "1,2")]
    with pytest.raises(ConfigError) as raised:
        job_from_args(build_parser().parse_args(args))
    assert words in str(raised.value)


def test_the_command_line_refuses_it_in_one_line(cli):
    done = cli("--cpus", "2", "--kv-store", "nccl", "--schedule", "backward", "--compute-ms",
               "1,2", "--framework", "torch")
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "has no counterpart" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


# -- GPUs ----------------------------------------------------------------------------------------

GPUS = tuple(range(torch.cuda.device_count())) if torch.cuda.is_available() else ()


@pytest.mark.gpu
@requires_cuda
@pytest.mark.timeout(300)
@pytest.mark.parametrize("schedule", ["ddp", "fsdp"])
@pytest.mark.parametrize("dtype, bound", [("float32", 0.0), ("bfloat16", 2e-2)])
def test_the_framework_on_every_gpu(schedule, dtype, bound):
    """resnet-50 at batch 32 with its FLOPs, on every GPU there is (one process each, NCCL)."""
    from bandwidth.config.options import Config
    from bandwidth.run import run
    # bfloat16 with the host's time to issue the model (--host-ms): issued eagerly
    host_ms = (2.0, 4.0) if dtype == "bfloat16" else None
    result = run(Config(kv_store="nccl", gpus=GPUS, network="resnet", num_layers=50,
                        schedule=schedule, dtype=dtype, compute="flops", batch_size=32,
                        framework="torch", num_batches=5, reference=False, host_ms=host_ms))
    framework = result.costs.framework
    assert framework is not None and 0 <= framework.error_max <= bound
    assert framework.step_s > 0 and framework.compute_s > 0
    assert 0 < framework.host_s
    if host_ms:
        assert result.costs.compute_launch == "eager (--host-ms)"
        assert framework.host_s >= 6e-3         # the spins alone take 6 ms of the host
    assert framework.compute_s + framework.network_s + framework.own_s == \
        pytest.approx(framework.step_s)
    assert any(note.startswith("framework torch: ") for note in result.notes), result.notes


def test_the_host_column_stars_a_host_paced_step():
    from bandwidth.report.table import _host
    assert _host(0.095, 0.100) == "95.000*"        # above 90 % of the step: the host paces it
    assert _host(0.050, 0.100) == "50.000"
    assert _host(None, 0.100) == "-"               # CPU devices: the host is the device


def test_a_gpu_run_without_host_ms_says_what_it_leaves_out():
    from bandwidth.measurement.framework import host_note
    note = host_note("cuda", None)
    assert note.startswith("framework torch: without --host-ms") and "real_step.py" in note
    assert host_note("cuda", (5.0, 10.0)) is None         # given: nothing left out
    assert host_note("cpu", None) is None                 # CPU devices: the host is the device
