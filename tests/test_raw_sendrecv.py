"""benchmarks/raw_sendrecv.py, the raw Gloo reference of the parameter-server modes, through the
real launcher on loopback for W workers x S servers (real processes, timeouts), and the same
pattern timed inside a dist_sync run with one device per worker, where it bounds algbw."""

import json
import re
import subprocess
import sys

import pytest

from launch_support import ROOT, launch

RAW = "benchmarks/raw_sendrecv.py"


@pytest.mark.parametrize("workers, servers", [(1, 1), (2, 2), (3, 2)])
def test_raw_reference_runs_for_w_workers_and_s_servers(workers, servers, tmp_path):
    out = tmp_path / "raw.json"
    proc = launch("-n", str(workers), "-s", str(servers), "--timeout", "60", sys.executable, RAW,
                  "--bytes", "3000000", "--message-bytes", "400000", "--iters", "2",
                  "--warmup", "1", "--json", str(out), timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "double free" not in proc.stderr and "Traceback" not in proc.stderr
    assert f"{workers} worker(s) x {servers} server(s): 3.00 MB each way per worker" in proc.stdout
    assert len(re.findall(r"^  worker \d+: [\d.]+ ms, [\d.]+ GB/s each way$", proc.stdout,
                          re.M)) == workers
    doc = json.loads(out.read_text())
    assert (doc["workers"], doc["servers"], doc["bytes"]) == (workers, servers, 3_000_000)
    assert len(doc["worker_gbps"]) == workers and min(doc["worker_gbps"]) == doc["gbps"] > 0
    # 750,000 float32 split evenly over the servers, each share in messages of <= 100,000
    shares = [750_000 * (i + 1) // servers - 750_000 * i // servers for i in range(servers)]
    assert f"{sum(-(-share // 100_000) for share in shares)} messages of at most 0.4 MB" \
        in proc.stdout


def test_raw_reference_splits_a_network_as_the_modes_do():
    proc = launch("-n", "1", "-s", "2", "--timeout", "60", sys.executable, RAW, "--network", "mlp",
                  "--iters", "1", "--warmup", "0", timeout=120)
    assert proc.returncode == 0, proc.stderr
    # mlp at 224x224: 77.36 MB; its big arrays split evenly over the two servers (MXNet's rule)
    assert "77.36 MB each way per worker (per server: " in proc.stdout


def test_raw_reference_without_servers_is_one_line():
    proc = launch("-n", "1", "-s", "0", "--timeout", "60", sys.executable, RAW, "--bytes", "1000",
                  timeout=60)
    assert proc.returncode != 0
    assert "needs at least one server" in proc.stderr and "Traceback" not in proc.stderr


def test_outside_the_launcher_is_one_line():
    proc = subprocess.run([sys.executable, RAW, "--bytes", "1000"], capture_output=True,
                          text=True, timeout=60,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin"}, cwd=ROOT)
    assert proc.returncode == 2 and "run under launch.py" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_dist_sync_with_one_device_per_worker_is_judged_against_the_raw_exchange():
    proc = launch("-n", "2", "-s", "2", "--timeout", "60", sys.executable, "bandwidth/measure.py",
                  "--kv-store", "dist_sync", "--cpus", "1", "--network", "lenet", "--image-shape",
                  "1,28,28", "--num-classes", "10", "--num-batches", "3", timeout=150)
    assert proc.returncode == 0, proc.stderr
    (line,) = [x for x in proc.stdout.splitlines() if x.startswith("#   ceiling: ")]
    assert re.match(r"#   ceiling: ([\d.]+ % of [\d.]+ GB/s|n/a \(timing noise[^)]*\);) ?.*raw "
                    r"Gloo send\+recv between workers and servers, same bytes and messages, same "
                    r"run, algbw", line), line
