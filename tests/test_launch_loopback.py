"""launch.py -H with loopback hosts (the README's ``echo 127.0.0.1 > hosts``): their processes
start on this machine directly, without ssh, so no sshd is needed; a port or an ssh setting still
asks for ssh (tests/test_launch_ssh.py)."""

import os
import stat
import subprocess
import sys

import pytest
from conftest import ROOT

from bandwidth.launch.planning.config import LaunchConfig
from bandwidth.launch.planning.hostfile import Host
from bandwidth.launch.launchers.ssh import is_loopback, needs_ssh, runs_locally


def test_loopback_names_and_addresses():
    for name in ("127.0.0.1", "127.0.0.2", "127.255.0.9", "::1", "localhost", "LOCALHOST"):
        assert is_loopback(name), name
    for name in ("198.18.0.1", "10.0.0.1", "node1", "::2", "localhost2"):
        assert not is_loopback(name), name


def _config(**kwargs):
    return LaunchConfig(**{"num_workers": 1, "num_servers": 0, "command": ("true",),
                           "hosts": (Host("127.0.0.1"),), **kwargs})


def test_a_port_or_an_ssh_setting_keeps_ssh():
    assert runs_locally(Host("127.0.0.1"), _config()) and not needs_ssh(_config())
    assert not runs_locally(Host("127.0.0.1", port=2222), _config())
    assert not runs_locally(Host("127.0.0.1"), _config(ssh_options=("User=x",)))
    assert not runs_locally(Host("127.0.0.1"), _config(ssh_config="cfg"))
    assert needs_ssh(_config(hosts=(Host("127.0.0.1"), Host("198.18.0.2"))))


@pytest.mark.timeout(150)
def test_readme_loopback_hosts_file_runs_without_ssh(tmp_path):
    """A real dist_sync job on `-H hosts` of loopback addresses, with an `ssh` on PATH that would
    record any call and fail: the job runs, and ssh was never called."""
    fake = tmp_path / "bin"
    fake.mkdir()
    called = tmp_path / "ssh-called"
    ssh = fake / "ssh"
    ssh.write_text(f"#!/bin/sh\necho \"$@\" >> {called}\nexit 255\n")
    ssh.chmod(ssh.stat().st_mode | stat.S_IEXEC)
    hosts = tmp_path / "hosts"
    hosts.write_text("127.0.0.1\n127.0.0.2\n")
    env = {k: v for k, v in os.environ.items() if k not in ("DMLC_ROLE", "PYTHONPATH")}
    env["PATH"] = f"{fake}:{env.get('PATH', '')}"
    proc = subprocess.run(
        [sys.executable, "launch.py", "-H", str(hosts), "-n", "2", "-s", "1", "--timeout", "60",
         sys.executable, "bandwidth/measure.py", "--kv-store", "dist_sync", "--cpus", "1",
         "--network", "mlp", "--image-shape", "1,28,28", "--num-classes", "10",
         "--num-batches", "2"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=140)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not called.exists(), called.read_text()
    assert proc.stdout.count("# summary") == 1
    assert "on each of 2 workers" in proc.stdout
