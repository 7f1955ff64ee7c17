"""--backend mxnet under launch.py: ps-lite's servers and scheduler. A single-host mode refuses
them at once (with or without MXNet); with MXNet, dist_sync and dist_async on loopback, exact or
within their staleness, a job whose server dies ends instead of hanging, and every socket of a
one-host job, ps-lite's scheduler's included, listens on loopback and serves a stranger no key.

The tests marked ``needs_mxnet`` run where ``import mxnet`` works and skip, saying why, elsewhere
(tests/mxnet_support.py); .ci/run gives them their own venv.
"""

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest
from conftest import ROOT, run_cli
from launch_support import pids_with
from mxnet_support import LENET, iter_lines, needs_mxnet, size_line
from socket_audit import audit_one_host_job

LAUNCH = ROOT / "launch.py"


def size_lines(stdout: str) -> list[str]:
    return re.findall(r"^num of arrays = .*$", stdout, re.MULTILINE)


def toolkit_size_line(*network_args: str) -> str:
    """The toolkit's own ``num of arrays = ...`` line for a network (measure.py --dry-run)."""
    proc = run_cli(*network_args, "--dry-run")
    assert proc.returncode == 0, proc.stderr
    return size_line(proc.stdout)


def launch(workers: int, servers: int, *measure_args: str, scheduler: bool = True,
           timeout: float = 150) -> subprocess.CompletedProcess:
    argv = [sys.executable, str(LAUNCH), "-n", str(workers), "-s", str(servers),
            "--timeout", "60", *(["--scheduler"] if scheduler else []),
            sys.executable, "bandwidth/measure.py", "--backend", "mxnet", "--timeout", "60",
            *measure_args]
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def ps_lite_job(marker: str, cpus: int, timeout: int) -> list[str]:
    """A dist_sync job of 2 workers, 1 server and the scheduler that runs until stopped, its
    processes found by ``--seed marker`` (a seed no other test uses)."""
    return [sys.executable, str(LAUNCH), "-n", "2", "-s", "1", "--scheduler", "--timeout",
            str(timeout), sys.executable, "bandwidth/measure.py", "--backend", "mxnet",
            "--kv-store", "dist_sync", "--cpus", str(cpus), "--seed", marker, "--num-batches",
            "100000", "--timeout", str(timeout), *LENET]


@pytest.mark.timeout(150)
@pytest.mark.parametrize("backend", ["mxnet", "toolkit"])
def test_a_single_host_mode_under_servers_and_a_scheduler_is_refused_at_once(backend):
    # Issue 5: every process imported mxnet, and a server or the scheduler then waited in
    # ps-lite's loop for ever. The refusal comes before any import of mxnet, so this runs (and
    # means the same) with or without MXNet installed.
    marker = "24681357" if backend == "mxnet" else "24681358"     # --seeds no other test uses
    argv = [sys.executable, str(LAUNCH), "-n", "1", "-s", "1", "--scheduler", sys.executable,
            "bandwidth/measure.py", "--backend", backend, "--kv-store", "local", "--cpus", "2",
            "--seed", marker, *LENET, "--num-batches", "2"]
    start = time.monotonic()
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert time.monotonic() - start < 90
    message = ("measure.py: error: --kv-store local runs on one host: local, device and nccl need "
               "no servers or scheduler, but launch.py started 1 server and a scheduler; run "
               "measure.py without launch.py, or with launch.py -s 0 and no --scheduler")
    lines = proc.stderr.splitlines()
    refusals = [line for line in lines
                if "measure.py: error:" in line and not line.startswith("launch: ")]
    assert refusals and all(line.endswith(message) for line in refusals), proc.stderr
    # Where several processes printed it, the launcher shows it once and says how many did.
    shown_once = [line for line in lines if "printed this line, shown once" in line]
    assert all(re.match(r"launch: [23] processes printed this line", line) for line in shown_once)
    assert "Traceback" not in proc.stderr and "iter 1" not in proc.stdout
    assert "FAIL:" in proc.stderr and "exited with status 2" in proc.stderr
    time.sleep(0.5)
    for role in ("worker", "server", "scheduler"):
        assert pids_with(marker, role) == []


def test_one_worker_alone_may_run_a_single_host_mode_and_several_are_refused():
    from bandwidth.errors import ConfigError
    from bandwidth.launch.contract.environment import Job
    from bandwidth.execution.roles import check_single_host

    check_single_host(["local"], None)                                   # no launcher
    one_worker = Job(1, 0, "127.0.0.1", 4000, 4000, "local")
    check_single_host(["local", "device"], one_worker.role(0, "127.0.0.1", (0, 1)))
    workers_only = Job(2, 0, "127.0.0.1", 4000, 4000, "torchrun")
    with pytest.raises(ConfigError, match=r"this launch \(torchrun\) has 2 workers, which would "
                                          r"run as independent copies"):
        check_single_host(["local", "device"], workers_only.role(1, "127.0.0.1", (1, 2)))
    with_scheduler = Job(2, 0, "127.0.0.1", 4000, 4001, "local")
    with pytest.raises(ConfigError, match=r"started 0 servers and a scheduler; run"):
        check_single_host(["nccl"], with_scheduler.role(0, "127.0.0.1", (0, 2)))
    with_server = Job(1, 1, "127.0.0.1", 4000, 4000, "local")
    with pytest.raises(ConfigError, match=r"--kv-store device runs on one host.* 1 server; run"):
        check_single_host(["device"], with_server.role(0, "127.0.0.1", (0, 2)))


# ---------------------------------------------------------------------------------------------
# with MXNet: ps-lite through launch.py on loopback


@needs_mxnet
@pytest.mark.timeout(200)
def test_dist_sync_through_the_launcher_is_exact(tmp_path):
    out = tmp_path / "dist.json"
    proc = launch(2, 1, "--kv-store", "dist_sync", "--cpus", "2", "--num-batches", "3",
                  "--all-worker-lines", "--json", str(out), *LENET)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = iter_lines(proc.stdout)
    assert len(lines) == 6 and max(err for _, _, err in lines) == 0.0   # 3 lines per worker
    assert size_lines(proc.stdout) == [toolkit_size_line(*LENET)] * 2    # one per worker
    assert "mx.kv.create('dist_sync')" in proc.stdout and "ps-lite: 2 workers" in proc.stdout
    (result,) = json.loads(out.read_text())["results"]
    assert result["config"]["backend"] == "mxnet" and result["config"]["kv_store"] == "dist_sync"


@needs_mxnet
@pytest.mark.timeout(200)
def test_dist_sync_with_one_cpu_device_per_worker_is_exact():
    # One CPU context: MXNet's comm_buf is the gradient array, so the pull lands in it; without
    # the untimed refill the next push sends the last sum (errors 2, 6, 14).
    proc = launch(2, 1, "--kv-store", "dist_sync", "--cpus", "1", "--num-batches", "3",
                  "--all-worker-lines", *LENET)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = iter_lines(proc.stdout)
    assert len(lines) == 6 and max(err for _, _, err in lines) == 0.0


@needs_mxnet
@pytest.mark.timeout(200)
def test_dist_async_with_sgd_errs_only_by_staleness():
    workers, devices = 2, 2
    proc = launch(workers, 1, "--kv-store", "dist_async", "--optimizer", "sgd", "--cpus",
                  str(devices), "--num-batches", "3", "--all-worker-lines", *LENET)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert size_lines(proc.stdout) == [toolkit_size_line(*LENET)] * workers
    lines = iter_lines(proc.stdout)
    assert len(lines) == workers * 3
    for iteration, _, error in lines:
        # as tests/test_dist.py: the other worker's pushes are at most a step ahead or behind
        assert error <= 1.2 * devices * (workers - 1) / (iteration + 1)


@needs_mxnet
@pytest.mark.timeout(120)
def test_without_the_scheduler_every_process_says_add_it():
    proc = launch(1, 1, "--kv-store", "dist_sync", "--cpus", "2", *LENET, scheduler=False)
    assert proc.returncode == 2
    assert "needs ps-lite's scheduler, which the launcher starts with --scheduler" in proc.stderr
    assert "FAIL:" in proc.stderr


@needs_mxnet
@pytest.mark.timeout(200)
def test_a_dead_server_ends_the_job_instead_of_hanging_ps_lite():
    marker = "13572468"
    proc = subprocess.Popen(ps_lite_job(marker, cpus=1, timeout=30), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        deadline = time.monotonic() + 60
        while not pids_with(marker, "server") and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(4)                          # let it run
        (server,) = pids_with(marker, "server")
        os.kill(server, signal.SIGKILL)
        start = time.monotonic()
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode != 0 and time.monotonic() - start < 60
    assert "FAIL: server 0" in err and "SIGKILL" in err
    time.sleep(0.5)
    for role in ("worker", "server", "scheduler"):
        assert pids_with(marker, role) == []


@needs_mxnet
@pytest.mark.timeout(200)
def test_a_one_host_ps_lite_job_listens_on_loopback_only_and_serves_no_stranger():
    # Issue "Trust", the socket audit of tests/test_job_listeners.py for --backend mxnet: the
    # launcher's gate and store, the ranks' Gloo listeners, and ps-lite's own ZeroMQ sockets
    # (scheduler, servers, workers), which bind the host each node is given (127.0.0.1 here).
    marker = "24681357"

    def scheduler_among(listeners):
        (scheduler,) = pids_with(marker, "scheduler")
        environ = dict(item.split("=", 1) for item in
                       open(f"/proc/{scheduler}/environ").read().split("\0") if "=" in item)
        ports = {port for _, port in listeners}
        assert int(environ["DMLC_PS_ROOT_PORT"]) in ports, (environ["DMLC_PS_ROOT_PORT"], ports)

    audit_one_host_job(ps_lite_job(marker, cpus=2, timeout=60), "a ps-lite job",
                       running=lambda line: "iter " in line, also=scheduler_among)
