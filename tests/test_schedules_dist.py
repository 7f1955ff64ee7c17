"""Schedules under the distributed modes, through the real launcher on loopback with CPU devices:
``backward`` on the parameter servers (one push per layer, served part after part) and ``ddp``
and ``fsdp`` on ``dist_nccl``, every value checked."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LENET = ["--network", "lenet", "--image-shape", "1,28,28", "--num-classes", "10"]


def launch(workers: int, servers: int, *measure_args: str, timeout: float = 170):
    argv = [sys.executable, str(ROOT / "launch.py"), "-n", str(workers), "-s", str(servers),
            "--timeout", "60", sys.executable, "bandwidth/measure.py", "--no-reference",
            "--num-batches", "2", *LENET, *measure_args]
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def iter_errors(stdout: str) -> list[float]:
    """Every worker's MXNet lines (each worker prints its own)."""
    return [float(m) for m in re.findall(r"GB/sec per gpu, error (-?[0-9.]+)", stdout)]


@pytest.mark.timeout(200)
@pytest.mark.parametrize("mode, optimizer", [("dist_sync", "none"), ("dist_sync_device", "sgd")])
def test_backward_on_parameter_servers_is_exact(mode, optimizer):
    proc = launch(2, 2, "--kv-store", mode, "--cpus", "2", "--optimizer", optimizer,
                  "--schedule", "backward", "--all-worker-lines")
    assert proc.returncode == 0, proc.stderr[-3000:]
    errors = iter_errors(proc.stdout)
    assert len(errors) == 4 and max(errors) < 1e-6, proc.stdout[-2000:]     # 2 workers x 2
    assert "schedule backward" in proc.stdout


@pytest.mark.timeout(200)
@pytest.mark.parametrize("schedule", ["ddp", "fsdp"])
def test_ddp_and_fsdp_on_dist_nccl_are_exact(schedule):
    proc = launch(2, 0, "--kv-store", "dist_nccl", "--cpus", "1", "--schedule", schedule,
                  "--all-worker-lines",
                  *(["--bucket-mb", "0.05"] if schedule == "ddp" else []))
    assert proc.returncode == 0, proc.stderr[-3000:]
    errors = iter_errors(proc.stdout)
    assert len(errors) == 4 and max(errors) == 0.0, proc.stdout[-2000:]     # 2 workers x 2
    if schedule == "fsdp":
        assert "busbw = algbw x 1.5" in proc.stdout        # 3(n-1)/n over n = 2 devices
