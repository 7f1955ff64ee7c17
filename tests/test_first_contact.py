"""First contact (issue 28): what a new user sees on one GPU, on CPU devices, with one rank.

The one-GPU choices are pure functions of the device set, tested here without a GPU; the runs on
one real GPU are in test_gpu_first_contact.py (marked ``gpu``)."""

import os
import re
import subprocess
import sys

import pytest
from conftest import ROOT

from bandwidth.backends.registry import store_class
from bandwidth.execution.commandline import build_parser, job_from_args
from bandwidth.hardware.devices import DeviceSet
from bandwidth.plan.onegpu import one_gpu
from bandwidth.plan.plan import Plan
from bandwidth.report.text import devices_words, reference_skipped
from bandwidth.stores.device import DeviceStore
from bandwidth.stores.dist import DistSync
from bandwidth.stores.local import LocalStore
from bandwidth.stores.nccl import NcclStore

SMALL = ["--network", "mlp", "--image-shape", "1,28,28", "--num-classes", "10",
         "--num-batches", "2"]


def config(*argv):
    return job_from_args(build_parser().parse_args(list(argv))).configs[0]


def test_default_run_on_one_gpu_measures_two_replicas_and_says_so():
    devices, notes = one_gpu(config(), DeviceSet("cuda", (0,)), DeviceStore)
    assert devices == DeviceSet("cuda", (0, 0))
    (note,) = notes
    assert "one GPU visible: measuring 2 replicas on GPU 0 (as --gpus 0,0)" in note
    assert "--gpus 0 for MXNet's one-device run" in note


def test_explicit_gpus_0_keeps_mxnets_zero_with_a_hint():
    devices, notes = one_gpu(config("--gpus", "0"), DeviceSet("cuda", (0,)), DeviceStore)
    assert devices == DeviceSet("cuda", (0,))
    (note,) = notes
    assert "GB/sec per gpu is 0 (MXNet's figure)" in note and "--gpus 0,0" in note


def test_nccl_on_one_gpu_stays_one_rank_with_the_hint_and_local_measures_the_host_path():
    devices, notes = one_gpu(config("--kv-store", "nccl"), DeviceSet("cuda", (3,)), NcclStore)
    assert devices == DeviceSet("cuda", (3,)) and "--gpus 3,3" in notes[0]
    assert one_gpu(config("--kv-store", "local"), DeviceSet("cuda", (0,)), LocalStore) == (
        DeviceSet("cuda", (0,)), ())


def test_several_gpus_cpu_devices_and_distributed_workers_are_left_alone():
    for devices, cls in ((DeviceSet("cuda", (0, 1)), DeviceStore),
                         (DeviceSet("cpu", (0,)), DeviceStore),
                         (DeviceSet("cuda", (0,)), DistSync)):
        assert one_gpu(config(), devices, cls) == (devices, ())


def test_replicas_sharing_a_gpu_are_named_so_and_the_missing_reference_says_why():
    shared = DeviceSet("cuda", (0, 0))
    assert devices_words(shared) == "2 replicas on 1 GPU"
    assert devices_words(DeviceSet("cuda", (0, 0, 1, 1))) == "4 replicas on 2 GPUs"
    assert devices_words(DeviceSet("cpu", (0, 1))) == "2 devices"
    plan = Plan(config(), [("w", (4,))], shared, DeviceStore)
    assert reference_skipped(plan) == "replicas share a GPU, and NCCL cannot hold one GPU twice"
    plan = Plan(config("--no-reference"), [("w", (4,))], shared, DeviceStore)
    assert reference_skipped(plan) == "--no-reference"


def test_nccl_with_one_rank_prints_no_algbw(cli):
    """A one-rank all-reduce moves nothing: algbw n/a with the reason, not a huge figure."""
    proc = cli("--kv-store", "nccl", "--cpus", "1", *SMALL)
    assert proc.returncode == 0, proc.stderr
    assert "#   algbw n/a (one rank: an all-reduce over one process moves no byte)" in proc.stdout
    assert not re.search(r"algbw [0-9]", proc.stdout)


def test_cpu_device_runs_speak_of_devices_not_gpus(cli):
    """On CPU devices the `#` lines say device; MXNet's exact iter lines keep 'GB/sec per gpu'."""
    for mode in ("device", "local"):
        proc = cli("--kv-store", mode, "--cpus", "2", *SMALL)
        assert proc.returncode == 0, proc.stderr
        comments = [line for line in proc.stdout.splitlines() if line.startswith("#")]
        text = "\n".join(comments).replace("GB/sec per gpu", "")
        assert "GPU" not in text, text
        assert "pinned" not in text
        assert re.search(r"^iter 1, [0-9.]+ sec, [0-9.]+ GB/sec per gpu, error 0\.000000$",
                         proc.stdout, re.M)


def test_scaling_without_gpus_or_cpus_sweeps_the_default_devices():
    """--scaling alone (the README's and --help's example) sweeps 1..N default devices instead of
    measuring one configuration (here, without a GPU: 1 and 2 CPU devices)."""
    import torch

    job = job_from_args(build_parser().parse_args(["--scaling", "--kv-store", "local"]))
    if torch.cuda.is_available():
        assert [c.gpus for c in job.configs] == [tuple(range(k)) for k in
                                                 range(1, torch.cuda.device_count() + 1)]
    else:
        assert [(c.gpus, c.cpus) for c in job.configs] == [(None, 1), (None, 2)]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("launcher", ["env", "launch.py"])
def test_a_single_host_mode_under_several_ranks_is_refused_in_one_line(launcher):
    """nccl/device/local under torchrun's variables or launch.py -s 0 with 2 workers would run as 2
    independent copies sharing the devices: refused (exit 2) with what to run instead."""
    env = {k: v for k, v in os.environ.items() if k not in ("DMLC_ROLE", "PYTHONPATH")}
    measure = [sys.executable, "bandwidth/measure.py", "--kv-store", "nccl", "--cpus", "1", *SMALL]
    if launcher == "env":
        env.update(RANK="1", WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT="29999")
        argv = measure
    else:
        argv = [sys.executable, "launch.py", "-n", "2", "-s", "0", "--timeout", "60", *measure]
    proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=100)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    assert "would run as independent copies" in proc.stderr
    assert "--kv-store dist_nccl" in proc.stderr
    assert "# summary" not in proc.stdout


@pytest.mark.timeout(120)
def test_a_single_host_mode_under_one_worker_runs_once():
    env = {k: v for k, v in os.environ.items() if k not in ("DMLC_ROLE", "PYTHONPATH")}
    proc = subprocess.run([sys.executable, "launch.py", "-n", "1", "-s", "0", "--timeout", "60",
                           sys.executable, "bandwidth/measure.py", "--kv-store", "local", "--cpus",
                           "2", *SMALL], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=100)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.count("# summary") == 1


@pytest.mark.timeout(150)
def test_parameter_servers_with_one_device_per_worker_say_what_the_network_carried():
    """--cpus 1 under dist_sync: MXNet's per-GPU figure stays 0 (iter lines), but the summary
    says the bytes each way per step and the GB/s, not "nothing crosses a link"."""
    env = {k: v for k, v in os.environ.items() if k not in ("DMLC_ROLE", "PYTHONPATH")}
    proc = subprocess.run([sys.executable, "launch.py", "-n", "1", "-s", "1", "--timeout", "60",
                           sys.executable, "bandwidth/measure.py", "--kv-store", "dist_sync",
                           "--cpus", "1", *SMALL], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=140)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "0.000000 GB/sec per gpu" in proc.stdout                 # MXNet's figure, kept
    assert "nothing crosses a link" not in proc.stdout
    size = float(re.search(r"total size = ([0-9.]+) MB", proc.stdout).group(1))
    line = re.search(r"^#   network: ([0-9.]+) MB pushed and ([0-9.]+) MB pulled per step, "
                     r"([0-9.]+) GB/s each way$", proc.stdout, re.M)
    assert line, proc.stdout
    assert float(line.group(1)) == float(line.group(2)) == pytest.approx(size, abs=0.01)
    seconds = float(re.search(r"time median ([0-9.]+) s", proc.stdout).group(1))
    assert float(line.group(3)) == pytest.approx(size / 1e3 / seconds, rel=0.05)


def test_cpu_collectives_cut_each_burst_to_64_mib():
    from bandwidth.ceiling.collectives import CPU_BURST_BYTES, cpu_calls

    assert CPU_BURST_BYTES == 64 << 20
    assert cpu_calls(1 << 20, 20, 5) == (20, 5)          # small sizes: nccl-tests' -n and -w
    assert cpu_calls(8 << 20, 20, 5) == (8, 5)
    assert cpu_calls(64 << 20, 20, 5) == (1, 1)
    assert cpu_calls(1 << 30, 20, 5) == (1, 1)           # at least one timed call
    assert cpu_calls(1 << 30, 20, 0) == (1, 0)


@pytest.mark.timeout(200)
def test_ceiling_large_sizes_on_cpu_devices_say_the_calls_were_cut(tmp_path):
    """The README's `-b 1M -e 1G -f 2` on CPU devices ran 20 calls per burst of every size and
    failed after 600 s; each burst is now cut to 64 MiB of data, and the output says so."""
    out = tmp_path / "c.json"
    proc = subprocess.run([sys.executable, "-m", "bandwidth.ceiling", "--cpus", "2", "-b", "128M",
                           "-e", "128M", "--skip", "host", "--mb", "8", "--json", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "cut to 64 MiB of data each" in proc.stdout
    import json
    (row,) = json.loads(out.read_text())["ceilings"]["collectives"]["rows"]
    assert row["iters"] == 1 and row["nbytes"] == 128 << 20
    assert all(r["wrong"] == 0 for r in row["results"].values())


def test_graph_steps_on_default_cpu_devices_is_refused_in_one_line(cli):
    """No GPU, no --cpus: the default devices are CPU devices, where --graph-steps does nothing."""
    proc = cli("--graph-steps", "4", *SMALL, "--dry-run")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "measure.py: error: --graph-steps counts replays of a CUDA graph, and this run is on CPU "
        "devices (no GPU visible), which run eager: drop --graph-steps"]


def test_graph_steps_where_the_mode_runs_eager_says_so(monkeypatch):
    """On GPUs (a device set standing for two, no GPU needed to plan), local runs eager: the
    plan's note says --graph-steps does nothing; device, which replays a graph, gets no note."""
    import bandwidth.plan.plan as planmod

    monkeypatch.setattr(planmod, "resolve", lambda gpus, cpus: DeviceSet("cuda", (0, 1)))
    plan = planmod.make_plan(config("--kv-store", "local", "--gpus", "0,1", "--graph-steps", "4",
                                    *SMALL), store_class)
    assert plan.notes == ("--graph-steps 4 does nothing here: local on 2 GPUs (0,1) runs eager "
                          "with these settings (no CUDA graph to replay)",)
    plan = planmod.make_plan(config("--kv-store", "device", "--gpus", "0,1", "--graph-steps",
                                    "4", *SMALL), store_class)
    assert plan.notes == ()


def _help_of(flag: str) -> str:
    text = " ".join(build_parser().format_help().split())
    start = text.index(f"{flag} ")
    return text[start:start + 700]


def test_help_and_readme_agree_with_the_code():
    """--plot's formats, --cpu-threads' rule and --chunk-mb's defaults, as the code has them."""
    from bandwidth.cliparse import PLOT_SUFFIXES
    from bandwidth.hardware.cputhreads import MORE_THREADS_MARGIN
    from bandwidth.stores.local import GPU_MAX_CHUNK_BYTES, GPU_MIN_CHUNK_BYTES

    readme = (ROOT / "README.md").read_text()
    plot = _help_of("--plot PLOT_PATH")
    assert all(suffix in plot for suffix in PLOT_SUFFIXES) and "PNG" not in plot
    threads = f"at least {100 * MORE_THREADS_MARGIN:g} % faster"
    assert threads in _help_of("--cpu-threads CPU_THREADS") and threads in readme
    chunks = f"within {GPU_MIN_CHUNK_BYTES // 10**6}-{GPU_MAX_CHUNK_BYTES // 10**6} MB"
    assert chunks in _help_of("--chunk-mb CHUNK_MB")
    assert chunks.replace("-", "–") in readme


def _writes(argv, env):
    """The write(2) calls of ``argv``'s Python processes to stdout, under strace (not those of
    programs they run with a pipe for stdout, as ctypes.util.find_library runs ldconfig -p)."""
    proc = subprocess.run(["strace", "-f", "-qq", "-e", "trace=write,execve", "-e",
                           "signal=none", "-s", "65536", "-o", "/dev/stderr", *argv], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    others = {pid for pid, path in re.findall(r'^(\d+) +execve\("([^"]+)"', proc.stderr,
                                               re.MULTILINE) if "python" not in path}
    return [text for pid, text in re.findall(r'^(\d+) +write\(1, "((?:[^"\\]|\\.)*)"',
                                              proc.stderr, re.MULTILINE) if pid not in others]


@pytest.mark.skipif(__import__("shutil").which("strace") is None, reason="needs strace")
def test_unbuffered_output_writes_whole_lines():
    """Under PYTHONUNBUFFERED (CI, containers) print wrote the text and its newline in two
    writes, so the ranks sharing stdout could split each other's lines: now one write a line."""
    env = {k: v for k, v in os.environ.items() if k not in ("DMLC_ROLE", "PYTHONPATH")}
    env["PYTHONUNBUFFERED"] = "1"
    writes = _writes([sys.executable, "bandwidth/measure.py", "--kv-store", "local", "--cpus",
                      "2", *SMALL], env)
    assert any(w.startswith("iter 1, ") for w in writes), writes
    assert all(w.endswith("\\n") for w in writes), [w for w in writes if not w.endswith("\\n")]
