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


@pytest.hookimpl(tryfirst=True)      # before xdist's own hook reads the groups
def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.path.name == "test_readme.py" and item.name.startswith("test_readme_command_runs"):
            item.add_marker(pytest.mark.xdist_group("readme"))
        elif item.path.name in ONE_AT_A_TIME:
            item.add_marker(pytest.mark.xdist_group("machine"))
