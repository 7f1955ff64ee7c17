"""measure.py as users run it: as a script from the root and from inside bandwidth/, as a module,
with real child processes; bad input gives one line and exit status 2."""

import json
import os
import re
import shutil
import subprocess
import sys

import pytest
import torch
from conftest import ROOT, main_without_torch

SMALL = ["--network", "mlp", "--image-shape", "1,28,28", "--num-classes", "10"]


def test_dry_run_from_the_root_matches_mxnet_resnet200(cli):
    proc = cli("--network", "resnet", "--num-layers", "200", "--dry-run",
               script="bandwidth/measure.py")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "num of arrays = 205, total size = 257.991328 MB"
    assert lines[2].split()[:2] == ["0", "conv0_weight"]
    assert lines[-1] == "total: 257,991,328 bytes in float32"
    assert len(lines) == 1 + 1 + 205 + 1


def test_dry_run_from_inside_bandwidth_matches_mxnet_inception_v3(cli):
    proc = cli("--network", "inception-v3", "--image-shape", "3,299,299", "--dry-run",
               cwd=ROOT / "bandwidth", script="measure.py")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0] == "num of arrays = 96, total size = 95.200544 MB"


def test_resnext_defaults_to_152_layers_as_mxnet(cli):
    # MXNet's measure.py passed its argparse default num_layers=152 to every get_symbol.
    default = cli("--network", "resnext", "--dry-run")
    explicit = cli("--network", "resnext", "--num-layers", "152", "--dry-run")
    assert default.returncode == 0, default.stderr
    assert default.stdout.splitlines()[0] == "num of arrays = 157, total size = 239.008416 MB"
    assert default.stdout == explicit.stdout


def test_dry_run_counts_size_in_the_chosen_dtype(cli):
    proc = cli("--network", "resnet", "--num-layers", "200", "--dtype", "float16", "--dry-run")
    assert proc.stdout.splitlines()[0] == "num of arrays = 205, total size = 128.995664 MB"


def test_local_mode_on_cpu_devices_prints_mxnet_lines_and_json(cli, tmp_path):
    out = tmp_path / "result.json"
    proc = cli(*SMALL, "--kv-store", "local", "--cpus", "3", "--num-batches", "4",
               "--disp-batches", "2", "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    iters = [line for line in proc.stdout.splitlines() if line.startswith("iter ")]
    assert [line.split(",")[0] for line in iters] == ["iter 2", "iter 4"]
    assert all(line.endswith("GB/sec per gpu, error 0.000000") for line in iters)
    assert "num of arrays = 6, total size = 0.437544 MB" in proc.stdout
    assert "# summary: kvstore local, 3 devices" in proc.stdout
    assert "reference, one flat all-reduce of the same bytes" in proc.stdout
    doc = json.loads(out.read_text())
    assert doc["schema_version"] == 1 and doc["environment"]["torch"] == torch.__version__
    assert doc["fingerprint"]["device_count"] == 3
    (data,) = doc["results"]
    assert data["config"]["kv_store"] == "local" and data["devices"] == ["cpu:0", "cpu:1", "cpu:2"]
    assert len(data["iterations"]) == 4 and len(data["reports"]) == 2
    assert data["launch"] == "eager" and data["graph_steps"] == 1      # CPU devices: no graphs
    assert data["network"]["bytes"] == 437544 and data["network"]["arrays"] == 6
    assert data["summary"]["bus_factor"] == pytest.approx(4 / 3)
    assert data["reference"]["busbw_median"] > 0
    assert data["ceiling"]["gbps"] > 0 and data["ceiling"]["name"].startswith("host memory")
    # a percentage of the ceiling, or n/a where the run beat the host-memory probe (caches)
    # (local's probe is the network's own size, 0.44 MB here)
    assert re.search(r"\n#   ceiling: ([\d.]+ % of [\d.]+ GB/s \(host memory|n/a \(fits in "
                     r"cache: the [\d.]+ \S+ host memory probe is not a bound)",
                     proc.stdout.split("# summary")[1])


def test_nccl_mode_on_cpu_devices_says_it_uses_gloo(cli):
    proc = cli(*SMALL, "--kv-store", "nccl", "--cpus", "2", "--num-batches", "2",
               "--optimizer", "sgd")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("GB/sec per gpu, error 0.000000") == 2
    assert "Gloo all-reduce stands in for NCCL" in proc.stdout


def test_default_device_mode_with_sgd(cli):
    proc = cli(*SMALL, "--cpus", "2", "--num-batches", "3", "--optimizer", "sgd",
               "--no-reference")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("GB/sec per gpu, error 0.000000") == 3
    assert "# kvstore device" in proc.stdout
    assert "not measured (--no-reference)" in proc.stdout
    assert "#   ceiling: n/a (not measured (--no-reference))" in proc.stdout


@pytest.mark.parametrize("args, message", [
    (["--network", "resnet-9000"], "unknown network 'resnet-9000'; valid: alexnet, bert-base"),
    (["--network", "resnet", "--num-layers", "51"], "valid --num-layers: 18, 34, 50, 101"),
    (["--network", "inception-v3"], "inception-v3 at image shape 3,224,224"),
    (["--kv-store", "dist_sink"], "unknown --kv-store 'dist_sink'"),
    (["--image-shape", "3x224x224"], "--image-shape must be three positive integers"),
    (["--cpus", "0"], "--cpus must be at least 1"),
    (["--network", "missing.json"], "cannot read shape file 'missing.json'"),
])
def test_bad_input_is_one_line_and_status_2(cli, args, message):
    proc = cli(*args)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU message")
def test_gpus_on_a_machine_without_gpus(cli):
    proc = cli("--gpus", "0,1", *SMALL)
    assert proc.returncode == 2
    assert "GPU 0 does not exist; this machine has no GPU visible (use --cpus N" in proc.stderr


def test_arrays_that_do_not_fit_in_host_memory(cli, tmp_path):
    huge = tmp_path / "huge.json"
    huge.write_text(json.dumps({"arrays": [{"name": "w", "shape": [10**7, 10**6]}]}))
    proc = cli("--network", str(huge), "--cpus", "2")
    assert proc.returncode == 2
    assert "of host memory but only" in proc.stderr and "GB is available" in proc.stderr


def test_bad_shape_file_entries_are_named(cli, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([["w", [3, -1]]]))
    proc = cli("--network", str(bad), "--dry-run")
    assert proc.returncode == 2
    assert "entry 0 must be a name and a list of positive integers" in proc.stderr


def test_user_shape_file_runs(cli, tmp_path):
    shapes = tmp_path / "mine.json"
    shapes.write_text(json.dumps([["emb", [100, 16]], ["head", [16]]]))
    proc = cli("--network", str(shapes), "--cpus", "2", "--num-batches", "2", "--no-reference")
    assert proc.returncode == 0, proc.stderr
    assert "num of arrays = 2, total size = 0.006464 MB" in proc.stdout


def test_list_networks_and_help(cli):
    listed = cli("--list-networks")
    assert listed.returncode == 0
    names = [line.split()[0] for line in listed.stdout.splitlines()]
    for name in ("resnet", "inception-v3", "vgg", "bert-base", "gpt2-xl", "llama-8b", "vit-l16"):
        assert name in names
    helped = cli("--help")
    assert helped.returncode == 0
    for flag in ("--kv-store", "--gpus", "--cpus", "--num-batches", "--disp-batches",
                 "--test-results", "--image-shape", "--num-classes", "--num-layers", "--optimizer",
                 "--dtype", "--json", "--dry-run"):
        assert flag in helped.stdout


def _script_env(unbuffered: bool) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONUNBUFFERED")}
    if unbuffered:
        env["PYTHONUNBUFFERED"] = "1"
    return env


@pytest.mark.parametrize("unbuffered", [False, True])
def test_dry_run_into_a_pipe_closed_after_one_line_ends_quietly(tmp_path, unbuffered):
    # 4000 arrays make about 300 KB of output, far more than a pipe holds, so the write after
    # the reader has closed its end fails whatever the timing.
    shapes = tmp_path / "many.json"
    shapes.write_text(json.dumps([[f"w{i}", [i + 1]] for i in range(4000)]))
    stderr_path = tmp_path / "stderr"
    with open(stderr_path, "w") as stderr:
        proc = subprocess.Popen([sys.executable, "bandwidth/measure.py", "--network", str(shapes),
                                 "--dry-run"], cwd=ROOT, env=_script_env(unbuffered),
                                stdout=subprocess.PIPE, stderr=stderr, text=True)
        try:
            first = proc.stdout.readline()
            proc.stdout.close()
            status = proc.wait(timeout=60)
        finally:
            proc.kill()
    assert first.startswith("num of arrays = 4000, total size = ")
    assert status == 141                   # 128 + SIGPIPE, as a shell reports `yes | head -1`
    assert stderr_path.read_text() == ""    # no "Broken pipe" line, no traceback


@pytest.mark.parametrize("unbuffered", [False, True])
def test_list_networks_into_a_closed_pipe_ends_quietly(tmp_path, unbuffered):
    # The listing is smaller than a pipe's buffer: close the reading end before the program
    # starts, so that its first write meets a pipe nobody reads.
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        proc = subprocess.run([sys.executable, "bandwidth/measure.py", "--list-networks"],
                              cwd=ROOT, env=_script_env(unbuffered), stdout=write_end,
                              stderr=subprocess.PIPE, text=True, timeout=60)
    finally:
        os.close(write_end)
    assert proc.returncode == 141
    assert proc.stderr == ""


@pytest.mark.skipif(shutil.which("bandwidth-measure") is None, reason="package not installed")
def test_console_entry_point():
    proc = subprocess.run(["bandwidth-measure", *SMALL, "--dry-run"], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0
    assert proc.stdout.startswith("num of arrays = 6")


def test_sweep_prints_a_progress_bar_and_one_table(cli, tmp_path):
    out = tmp_path / "sweep.json"
    proc = cli(*SMALL, "--kv-store", "local,device", "--cpus", "2", "--scaling",
               "--num-batches", "2", "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    # stderr is no terminal here: one line per finished configuration, no \r (a CI log)
    assert "\r" not in proc.stderr
    bars = proc.stderr.splitlines()
    assert [line[:31] for line in bars] == [
        "[======>                 ] 1/4 ", "[============>           ] 2/4 ",
        "[==================>     ] 3/4 ", "[========================] 4/4 "]
    assert bars[0][31:].startswith("local mlp cpu x1: algbw ") and bars[0].endswith("(1 device)")
    assert re.fullmatch(r"device mlp cpu x2: [\d.]+ GB/sec per gpu, "
                        r"([\d.]+ % of ceiling|ceiling n/a)", bars[3][31:]), bars[3]
    table = proc.stdout.split("# sweep of 4 configurations")[1]
    body = [line.split() for line in table.splitlines() if line[:3].strip().isdigit()]
    assert [(r[0], r[1], r[3] + " " + r[4]) for r in body] == [
        ("1", "local", "cpu x1"), ("2", "local", "cpu x2"), ("3", "device", "cpu x1"),
        ("4", "device", "cpu x2")]
    for r in body[0], body[2]:         # GB/s per GPU n/a (1 device), min, max -, % of ceiling n/a
        assert r[7:12] == ["n/a", "(1", "device)", "-", "-"] and r[-2] == "n/a"
    assert ("# ceiling of local on cpu x2: host memory: least traffic at the fastest host memory "
            "rate") in table
    assert len(json.loads(out.read_text())["results"]) == 4


def test_one_device_keeps_mxnets_zero_in_iter_lines_but_not_in_the_summary(cli):
    proc = cli(*SMALL, "--kv-store", "local", "--cpus", "1", "--num-batches", "2")
    assert proc.returncode == 0, proc.stderr
    iters = [line for line in proc.stdout.splitlines() if line.startswith("iter ")]
    assert len(iters) == 2 and all(", 0.000000 GB/sec per gpu," in line for line in iters)
    summary = proc.stdout.split("# summary")[1]
    assert "#   GB/sec per gpu: n/a (1 device): nothing crosses a link" in summary
    assert "0.000" not in summary.split("algbw")[0]           # no busbw figure before algbw
    assert re.search(r"#   algbw [\d.]+ GB/s", summary)
    assert ("#   ceiling: n/a (1 device); bound by host memory: every gradient read and every "
            "output written once") in summary
    assert "PCIe" not in proc.stdout


def test_flat_size_sweep(cli):
    proc = cli("--network", "flat", "-b", "64K", "-e", "256K", "--cpus", "2", "--num-batches", "2",
               "--kv-store", "nccl", "--no-reference")
    assert proc.returncode == 0, proc.stderr
    for size in ("flat 64K", "flat 128K", "flat 256K"):
        assert size in proc.stdout


def test_ceiling_first_on_the_runs_own_cpu_devices_and_in_the_json(cli, tmp_path):
    out = tmp_path / "run.json"
    proc = cli(*SMALL, "--kv-store", "local", "--cpus", "3", "--num-batches", "2",
               "--no-reference", "--ceiling", "--json", str(out), timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "# GLOO collectives, 3 ranks" in proc.stdout          # not the default 2 CPU devices
    assert proc.stdout.index("Host memory (") < proc.stdout.index("num of arrays")
    doc = json.loads(out.read_text())
    ceiling = doc["ceiling"]
    assert ceiling["devices"] == {"kind": "cpu", "ids": [0, 1, 2], "names": ["host memory"] * 3}
    assert ceiling["host_memory"]["copy_gbps"] > 0 and ceiling["failures"] == []
    assert ceiling["collectives"]["rows"] and doc["results"][0]["devices"] == [
        "cpu:0", "cpu:1", "cpu:2"]


def test_a_failed_ceiling_part_fails_the_run(monkeypatch, tmp_path, capsys):
    from bandwidth import measure
    from bandwidth.ceiling import collectives
    from bandwidth.errors import WorkerError

    def broken(*args, **kwargs):
        raise WorkerError("rank 1 exited with status 9")

    monkeypatch.setattr(collectives, "sweep", broken)
    out = tmp_path / "run.json"
    status = measure.main([*SMALL, "--kv-store", "local", "--cpus", "2", "--num-batches", "2",
                           "--no-reference", "--ceiling", "--json", str(out)])
    captured = capsys.readouterr()
    assert status == 1
    assert "# FAILED: collectives: rank 1 exited with status 9" in captured.out
    assert "the ceiling measurement (--ceiling) failed in part" in captured.err
    assert "# summary: kvstore local, 2 devices" in captured.out     # measured all the same
    assert json.loads(out.read_text())["ceiling"]["failures"] == [
        "collectives: rank 1 exited with status 9"]


def test_a_sigterm_after_main_has_returned_changes_nothing():
    # The launcher stops the other processes once one has failed: a SIGTERM that lands after
    # main has its status (before the exit handlers ignore it) must not raise from the handler.
    code = ("import os, signal\n"
            "from bandwidth import measure\n"
            "status = measure.main(['--list-networks'])\n"
            "os.kill(os.getpid(), signal.SIGTERM)\n"
            "print('status', status)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == "status 0"
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("command", [["bandwidth/measure.py", "--cpus", "1"],
                                     ["launch.py", "-n", "1", "--launcher", "local", "true"]])
def test_a_python_without_torch_gets_one_line(command):
    """A python outside the tool's environment (-S: no site-packages, so no torch or numpy):
    one line naming that interpreter and exit 2, not an import's traceback."""
    proc = subprocess.run([sys.executable, "-S", *command], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 2
    name = command[0].split("/")[-1]
    assert proc.stderr == (f"{name}: error: torch and numpy not installed for {sys.executable}: "
                           "install the package there (pip install -e . or pip install torch), "
                           "or run the python of the environment that has it\n")


@pytest.mark.parametrize("argv", [["--help"], ["--help-all"], ["--list-networks"],
                                  ["--kv-store", "bogus"], ["--cpus", "0"], ["--num-batches", "x"]])
def test_help_listing_and_bad_flags_answer_without_importing_torch(argv):
    # Importing torch costs 2 s of CPU: --help, --list-networks and a typo in a flag answer first.
    imported, status, stderr = main_without_torch("bandwidth.measure:main", argv)
    expected = 0 if argv[0] in ("--help", "--help-all", "--list-networks") else 2
    assert (imported, status) == (False, expected), stderr
    assert "Traceback" not in stderr
