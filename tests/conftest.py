import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def run_cli(*args: str, cwd: Path = ROOT, script: str | None = None, timeout: float = 120):
    """Run measure.py as a user would; returns the CompletedProcess (text)."""
    argv = [sys.executable] + ([script] if script else ["-m", "bandwidth.measure"]) + list(args)
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    if script is None:
        env["PYTHONPATH"] = str(ROOT)
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def main_without_torch(main: str, argv: list[str]) -> tuple[bool, object, str]:
    """Call ``main`` ("module:function", e.g. "bandwidth.measure:main") with ``argv`` in a fresh
    interpreter; returns (whether torch was imported by the end, the status, stderr)."""
    module, _, function = main.partition(":")
    code = (f"import sys; from {module} import {function} as main\n"
            "try:\n    status = main(sys.argv[1:])\n"
            "except SystemExit as end:\n    status = end.code\n"
            "print('torch', 'torch' in sys.modules, status, file=sys.stderr)")
    proc = subprocess.run([sys.executable, "-c", code, *argv], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    _, imported, status = proc.stderr.splitlines()[-1].split()
    return imported == "True", int(status), proc.stderr


@pytest.fixture
def cli():
    return run_cli


requires_cuda = pytest.mark.skipif(
    not __import__("torch").cuda.is_available(), reason="needs CUDA GPUs")


# Under pytest-xdist (CI: `-n 2 --dist loadgroup`), the tests that build machine-wide things run
# one after another on one worker: network namespaces and their labs (module fixtures with fixed
# names), sshd, Open MPI, the Slurm daemons, the shared /tmp/heavy.lock, and the store gate's
# tests, which read the machine's TCP table (/proc/net/tcp), where other tests' connections
# would be counted. The rest make their own processes (each test finds its own by
# a marker or as its children) and spread over the workers. README's commands run in order in
# one folder (one writes what the next reads) and take about 4 minutes: a group of their own,
# so that they need not wait for the machine's (the lab's lines stay in the machine's group).
ONE_AT_A_TIME = {
    "test_faults_lab.py", "test_launch_contract.py", "test_launch_interface.py",
    "test_launch_loopback.py", "test_launch_mpi.py", "test_launch_slurm.py", "test_launch_ssh.py",
    "test_netlab.py", "test_netlab_cli.py", "test_netlab_ready.py", "test_netlab_rounds.py",
    "test_netlab_rto.py",
    "test_rank_ends.py",
    "test_readme.py", "test_rendezvous_security.py", "test_slurm_netlab.py",
    "test_store_gate.py"}


# Modules whose module-scoped fixture runs real processes: their tests stay on one worker, so that
# the fixture runs once, not once on each worker (test_bad_inputs' took 23 s).
ONE_WORKER = {"test_bad_inputs.py", "test_ceiling.py", "test_ci_gate_cpu.py",
              "test_framework_steps.py", "test_gate_reports.py", "test_malformed_documents.py",
              "test_regression_cli.py"}

# Left out of CI's run (marked slow; `python -m pytest -q -m slow` runs them), each beside a
# lighter test of the same thing that CI runs. Every test process imports torch (2.3 s of CPU on
# an idle core), and CI's two cores came near its 25 minutes (23:08 at 45ccc7b).
SLOW_IN_CI = {
    # the fuzz draws 3 random faults (53 s); every fault kind has its own test in the file
    "test_faults.py::test_random_faults_are_each_named",
    # 20 processes (39 s); test_launch_local's 16 x 4 finishes, test_dist's modes are exact
    "test_dist.py::test_sixteen_workers_and_four_servers",
    # one of each: dist_sync with the sgd optimizer, dist_sync_device, dist_async
    "test_dist.py::test_sync_servers_are_exact[dist_sync-none]",
    "test_dist.py::test_async_servers_err_only_by_staleness[dist_async_device]",
    "test_dist_messages.py::test_balanced_keys_are_exact_and_stated[dist_sync_device-2]",
    "test_dist_messages.py::test_a_server_that_admits_one_push_at_a_time_is_exact_and_stated"
    "[dist_async]",
    # the audit of a one-host job's listeners: dist_sync's launcher and measure.py's ranks stay
    "test_job_listeners.py::test_a_one_host_job_listens_on_loopback_only_and_serves_no_stranger"
    "[launch.py local dist_nccl]",
    "test_job_listeners.py::test_a_one_host_job_listens_on_loopback_only_and_serves_no_stranger"
    "[launch.py local dist_sync_device]",
    # a cut link under ssh stays; a remote worker's SIGSTOP stays (a server's end: test_dist)
    "test_faults_lab.py::test_a_link_set_down_names_the_host_behind_it[mpi]",
    "test_faults_lab.py::test_a_signal_to_a_remote_process_names_it[server-SIGTERM]",
    # Slurm: nccl's modes and the sbatch example's parameter servers stay
    "test_launch_slurm.py::test_modes_are_exact_under_slurm[2-2-dist_sync]",
    # across lab hosts: dist_sync and dist_nccl stay
    "test_netlab.py::test_mode_across_hosts_is_exact[dist_async_device]",
    # the late server said without a terminal stays
    "test_progress.py::test_a_late_server_shows_the_launchers_bar_on_a_terminal",
    # the matrix of 4 lab hosts (45 s): the lab's shaped rates are read and the slow host named by
    # test_netlab_rounds, the matrix through the launcher and --network-ceiling by test_hostceiling,
    # the gate's naming from a matrix by test_hostgate
    "test_netlab.py::test_matrix_reads_the_shaped_rates_and_names_the_slow_host",
    # a sweep of ddp and fsdp (20 s): one run of the framework's step and its table stays, and
    # DDP and FSDP2 are exact in test_ddp_and_fsdp2_are_exact_on_cpu_devices...
    "test_framework_steps.py::test_a_sweep_of_ddp_and_fsdp_tables_the_frameworks_step",
}


@pytest.hookimpl(tryfirst=True)      # before xdist's own hook reads the groups
def pytest_collection_modifyitems(config, items):
    for item in items:
        if f"{item.path.name}::{item.name}" in SLOW_IN_CI:
            item.add_marker(pytest.mark.slow)
        if item.path.name == "test_readme.py" and item.name.startswith("test_readme_command_runs"):
            item.add_marker(pytest.mark.xdist_group("readme"))
        elif item.path.name in ONE_AT_A_TIME:
            item.add_marker(pytest.mark.xdist_group("machine"))
        elif item.path.name in ONE_WORKER:
            item.add_marker(pytest.mark.xdist_group(item.path.stem))
