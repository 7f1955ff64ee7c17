"""torchrun's variables gone wrong (issue 28, Faults): each ends in the tool's one line and a
non-zero exit. Real processes on loopback (CPU devices, Gloo), and the real torchrun."""

import os
import re
import shutil
import socket
import subprocess
import sys

import pytest
from conftest import ROOT
from launch_support import outputs_of

TORCHRUN = shutil.which("torchrun")
LENET = ["--network", "lenet", "--image-shape", "1,28,28", "--num-classes", "10",
         "--num-batches", "3", "--timeout", "30", "--no-reference"]


def _env(**variables: str) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT), **variables)
    for name in ("DMLC_ROLE", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_USE_AGENT_STORE"):
        env.pop(name, None)
    return env


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.timeout(60)
def test_master_port_out_of_range_is_one_line_and_status_2():
    done = subprocess.run(
        [sys.executable, "-m", "bandwidth.measure", "--kv-store", "dist_nccl", "--cpus", "1",
         *LENET], cwd=ROOT, capture_output=True, text=True, timeout=50,
        env=_env(RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT="70000"))
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.splitlines() == ["measure.py: error: MASTER_PORT=70000 is not a TCP port "
                                        "(1..65535; set by torchrun or the launcher that "
                                        "started this process)"]


@pytest.mark.timeout(150)
def test_ranks_that_disagree_on_world_size_each_end_in_one_line():
    """Rank 0 told WORLD_SIZE=2, ranks 1 and 2 told 3 (a hand-written pod spec gone wrong):
    every rank ends non-zero naming WORLD_SIZE, none waits for a world that never forms."""
    port = _free_port()
    procs = [subprocess.Popen(
        [sys.executable, "-m", "bandwidth.measure", "--kv-store", "dist_nccl", "--cpus", "1",
         *LENET], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=_env(RANK=str(rank), WORLD_SIZE=str(size), MASTER_ADDR="127.0.0.1",
                 MASTER_PORT=str(port)))
        for rank, size in ((0, 2), (1, 3), (2, 3))]
    outs = outputs_of(procs)
    for proc, (out, err) in zip(procs, outs):
        lines = err.splitlines()
        assert proc.returncode == 2, err[-2000:]
        assert len(lines) == 1 and "Traceback" not in err, err[-2000:]
        assert re.match(r"measure\.py: error: rank \d has WORLD_SIZE=\d but .*WORLD_SIZE=\d",
                        lines[0]), lines[0]


@pytest.mark.skipif(TORCHRUN is None, reason="torchrun is not on PATH")
@pytest.mark.timeout(120)
def test_torchrun_reports_the_tools_line_as_the_cause():
    """--num-servers equal to the world size: torchrun's failure report (its own, printed by
    torchrun itself) names the tool's line as each rank's error instead of 'To enable traceback
    see ...', and no rank prints a traceback of its own while torchrun stops it."""
    env = _env()
    for name in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    done = subprocess.run(
        [TORCHRUN, "--standalone", "--nproc-per-node", "2", "-m", "bandwidth.measure",
         "--kv-store", "dist_sync", "--num-servers", "2", "--cpus", "1", *LENET], cwd=ROOT,
        env=env, capture_output=True, text=True, timeout=100)
    assert done.returncode != 0
    line = ("measure.py: error: --num-servers 2 leaves no worker among WORLD_SIZE=2 ranks: give "
            "at most 1, or start more processes (torchrun --nproc-per-node)")
    assert f"traceback : {line}" in done.stderr, done.stderr[-3000:]
    assert "To enable traceback" not in done.stderr
    assert "Exception ignored" not in done.stderr and "Stopped" not in done.stderr


# ----- the open-file limit (launch.py) -----

def _launch_with_limit(soft: int, hard: int, n: int) -> subprocess.CompletedProcess:
    import resource

    def limit():
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))

    return subprocess.run([sys.executable, str(ROOT / "launch.py"), "-n", str(n), "-s", "0",
                           "true"], cwd=ROOT, env=_env(), capture_output=True, text=True,
                          timeout=100, preexec_fn=limit)


@pytest.mark.timeout(120)
def test_too_low_an_open_file_limit_is_refused_before_anything_starts():
    done = _launch_with_limit(100, 100, 60)
    assert done.returncode == 2, done.stderr[-2000:]
    (line,) = done.stderr.splitlines()
    assert line.startswith("launch.py: error: -n 60 -s 0: 60 processes need about 304 open files")
    assert "limit (RLIMIT_NOFILE) is 100" in line and "ulimit -n 304" in line


@pytest.mark.timeout(120)
def test_the_soft_open_file_limit_is_raised_up_to_the_hard_one():
    done = _launch_with_limit(100, 4096, 60)
    assert done.returncode == 0, done.stderr[-2000:]
