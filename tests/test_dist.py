"""The distributed modes through the real launcher on loopback, with CPU devices: parameter
servers in sync and async mode, the GPU-reduce variants, the multi-worker all-reduce, scale and a
server killed mid-run."""

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from conftest import ROOT

LAUNCH = ROOT / "launch.py"
LENET = ["--network", "lenet", "--image-shape", "1,28,28", "--num-classes", "10"]
pytestmark = pytest.mark.skipif(not LAUNCH.exists(), reason="launch.py is not there yet")


def launch(workers: int, servers: int, *measure_args: str, timeout: float = 150):
    argv = [sys.executable, str(LAUNCH), "-n", str(workers), "-s", str(servers), "--timeout", "60",
            sys.executable, "bandwidth/measure.py", *measure_args]
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def iter_errors(stdout: str) -> list[float]:
    return [float(m) for m in re.findall(r"GB/sec per gpu, error (-?[0-9.]+)", stdout)]


@pytest.mark.timeout(200)
@pytest.mark.parametrize("mode, optimizer", [("dist_sync", "none"), ("dist_sync", "sgd"),
                                             ("dist_sync_device", "none")])
def test_sync_servers_are_exact(mode, optimizer):
    proc = launch(2, 2, "--kv-store", mode, "--cpus", "2", "--optimizer", optimizer,
                  "--num-batches", "3", *LENET)
    assert proc.returncode == 0, proc.stderr[-3000:]
    errors = iter_errors(proc.stdout)
    assert len(errors) == 6                       # 3 lines from each of 2 workers
    assert max(errors) < 1e-6
    assert "per-server load: 0:" in proc.stdout and "network: each worker pushes" in proc.stdout
    assert re.search(r"ceiling: [0-9.]+ % of [0-9.]+ GB/s \(raw Gloo send\+recv", proc.stdout)


@pytest.mark.timeout(200)
@pytest.mark.parametrize("mode", ["dist_async", "dist_async_device"])
def test_async_servers_err_only_by_staleness(mode):
    workers, devices = 2, 2
    proc = launch(workers, 1, "--kv-store", mode, "--cpus", str(devices), "--optimizer", "sgd",
                  "--num-batches", "4", *LENET)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = re.findall(r"iter (\d+), .* error ([0-9.]+)", proc.stdout)
    assert len(lines) == workers * 4
    for iteration, error in lines:
        steps = int(iteration) + 1                # the warm-up step counts for the optimizer
        # Workers stay within one step of each other (a barrier per step), so the other
        # worker's pushes are at most one step ahead or behind, summed over this worker's devices.
        assert float(error) <= 1.2 * devices * (workers - 1) / steps


def test_async_without_optimizer_is_refused():
    proc = launch(1, 1, "--kv-store", "dist_async", "--cpus", "2", *LENET)
    assert proc.returncode != 0
    assert "needs an optimizer" in proc.stderr + proc.stdout


def test_without_the_launcher_is_one_clear_line(cli):
    proc = cli("--kv-store", "dist_sync", "--cpus", "2", *LENET)
    assert proc.returncode == 2
    assert "runs under the launcher" in proc.stderr and "python launch.py -n 2 -s 2" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.timeout(200)
def test_dist_nccl_all_reduces_over_every_device_of_every_worker():
    proc = launch(2, 0, "--kv-store", "dist_nccl", "--cpus", "2", "--num-batches", "3", *LENET)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert len(iter_errors(proc.stdout)) == 6 and max(iter_errors(proc.stdout)) == 0.0
    assert "busbw = algbw x 1.5" in proc.stdout      # 2(N-1)/N over N = 4 devices


@pytest.mark.timeout(280)
def test_sixteen_workers_and_four_servers():
    proc = launch(16, 4, "--kv-store", "dist_sync", "--cpus", "1", "--num-batches", "2",
                  "--network", "mlp", "--image-shape", "1,28,28", "--num-classes", "10",
                  timeout=260)
    assert proc.returncode == 0, proc.stderr[-3000:]
    errors = iter_errors(proc.stdout)
    assert len(errors) == 32 and max(errors) == 0.0


def _pids_with(marker: str, role: str) -> list[int]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if marker.encode() not in f.read():
                    continue
            with open(f"/proc/{pid}/environ", "rb") as f:
                if f"DMLC_ROLE={role}".encode() in f.read().split(b"\0"):
                    found.append(int(pid))
        except OSError:
            pass
    return found


@pytest.mark.timeout(200)
def test_a_server_killed_mid_run_ends_the_job():
    marker = "24681357"                       # a --seed no other test uses
    argv = [sys.executable, str(LAUNCH), "-n", "2", "-s", "1", "--timeout", "30", sys.executable,
            "bandwidth/measure.py", "--kv-store", "dist_sync", "--cpus", "1", "--seed", marker,
            "--num-batches", "100000", "--timeout", "30", *LENET]
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    deadline = time.monotonic() + 60
    while not _pids_with(marker, "server") and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(3)                              # let it run
    (server,) = _pids_with(marker, "server")
    os.kill(server, signal.SIGKILL)
    start = time.monotonic()
    out, err = proc.communicate(timeout=120)
    assert proc.returncode != 0
    assert time.monotonic() - start < 90
    assert "server" in err and ("SIGKILL" in err or "signal" in err)
    time.sleep(0.5)
    assert _pids_with(marker, "worker") == [] and _pids_with(marker, "server") == []


@pytest.mark.timeout(150)
def test_host_to_host_matrix(tmp_path):
    out = tmp_path / "net.json"
    argv = [sys.executable, str(LAUNCH), "-n", "3", "-s", "0", "--timeout", "60", sys.executable,
            "-m", "bandwidth.ceiling", "--network", "--mb", "8", "--repeats", "2",
            "--json", str(out)]
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=140)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Host-to-host bandwidth" in proc.stdout
    matrix = json.loads(out.read_text())["network"]
    assert matrix["hosts"] == ["0@127.0.0.1", "1@127.0.0.1", "2@127.0.0.1"]
    for i, row in enumerate(matrix["gbps"]):
        assert row[i] is None and all(v > 0 for j, v in enumerate(row) if j != i)
