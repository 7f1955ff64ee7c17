"""A Slurm job across hosts with their own addresses: a bandwidth.netlab lab of 2 namespace hosts
(198.18.12.0/24), one slurmd in each (``nsenter --net``), slurmctld and munged on this machine,
``launch.py --launcher slurm`` from this machine inside ``salloc -N 2``.

Needs root, ip, tc, sshd (the lab) and slurm-wlm + munge; skipped with the reason otherwise.
The lab and the daemons are removed on every exit path; no process is left in the lab's
namespaces but the lab's sshds and the slurmds.
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from launch_support import ROOT, host_processes, lab_leftovers, netlab_for_tests, program
from slurm_support import SlurmCluster, missing_reason

from bandwidth.netlab import lab as labmod


NAME = "bw12s"                        # issue 12's prefix and subnet
SUBNET = "198.18.12.0/24"
LENET = ["--network", "lenet", "--image-shape", "1,28,28", "--num-classes", "10",
         "--num-batches", "3", "--timeout", "60"]

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with netlab_for_tests(NAME, 2, None, None, SUBNET, skip_reason=missing_reason()) as lab:
        nodes = [(f"bw12n{h.index}", h.address, h.namespace) for h in lab.hosts]
        with SlurmCluster(tmp_path_factory.mktemp("slurm"), nodes=nodes,
                          controller=(socket.gethostname(), lab.bridge_address)) as slurm:
            yield lab, slurm


def leftovers(lab) -> list[str]:
    """Processes in the lab's namespaces other than its sshds and the slurmds."""
    return lab_leftovers(lab, is_daemon=lambda cmd: cmd.startswith("slurmd "))


def salloc_launch(cluster, *args: str, timeout: float = 150) -> subprocess.CompletedProcess:
    """launch.py on this machine inside a 2-node allocation. The lab's node names do not
    resolve here, so the launcher is told its address on the lab's bridge."""
    lab, slurm = cluster
    argv = ["salloc", "-N", "2", "--ntasks-per-node", "2", sys.executable, "launch.py",
            "--launcher", "slurm", "--master-addr", lab.bridge_address, *args]
    return subprocess.run(argv, cwd=ROOT, env=slurm.env(PYTHONPATH=str(ROOT)),
                          capture_output=True, text=True, timeout=timeout)


def assert_clean(lab, within_s: float = 15.0) -> None:
    deadline = time.monotonic() + within_s
    while leftovers(lab) and time.monotonic() < deadline:
        time.sleep(0.3)
    assert leftovers(lab) == []


def test_each_task_runs_on_its_node_with_its_address(cluster):
    lab, _ = cluster
    proc = salloc_launch(cluster, "-n", "2", "-s", "2", sys.executable, program("ifname.py"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = sorted(line.split() for line in proc.stdout.splitlines() if line.startswith("bw12n"))
    # Placement over the allocation, round robin: worker 0 and server 0 on the first node,
    # worker 1 and server 1 on the second; each reaches the rendezvous from its own address.
    addresses = {f"bw12n{h.index}": h.address for h in lab.hosts}
    interfaces = {f"bw12n{h.index}": h.interface for h in lab.hosts}
    assert [row[0] for row in seen] == ["bw12n1", "bw12n1", "bw12n2", "bw12n2"]
    for node, gloo, nccl, address in seen:
        assert (gloo, nccl, address) == (interfaces[node], interfaces[node], addresses[node])
    assert_clean(lab)


def test_parameter_server_mode_across_nodes_is_exact(cluster, tmp_path):
    lab, _ = cluster
    out = tmp_path / "result.json"
    proc = salloc_launch(cluster, "-n", "2", "-s", "2", sys.executable, "-m", "bandwidth.measure",
                         "--kv-store", "dist_sync", "--cpus", "1", "--json", str(out), *LENET)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert re.findall(r"GB/sec per gpu, error (\S+)", proc.stdout) == ["0.000000"] * 3
    result = json.loads(out.read_text())["results"][0]
    assert result["summary"]["error_max"] == 0.0
    # torch's per-connection warning: shown once, explained, the rest hidden (as over ssh)
    assert proc.stderr.count("hostname of the client socket cannot be retrieved") <= 1
    assert_clean(lab)


def job_processes(host) -> list[int]:
    """What the job runs on ``host``: the role wrappers and measure.py (not the lab's sshd, not
    slurmd and its slurmstepd: the site's daemons)."""
    return host_processes(host, lambda argv: b"bandwidth" in argv
                          and not argv.startswith((b"sshd", b"slurm")))


def test_a_node_cut_off_mid_run_ends_what_the_job_started_there(cluster):
    """Last in this file: the cut node's slurmd misses the controller for a while. The launcher
    names a process of the cut node (its heartbeat and its wrapper's ``alive`` stop together);
    there, the role wrapper's line to the store goes unanswered (launcherwatch) and it ends the
    command within the heartbeat's time. slurmstepd, the site's daemon, is left to Slurm."""
    from bandwidth.launch.contract.heartbeat import LAUNCHER_GONE_BEATS
    from bandwidth.launch.launchers.rolewrap import GONE_GRACE_S
    lab, slurm = cluster
    host = lab.hosts[1]                   # worker 1 and server 1
    argv = ["salloc", "-N", "2", "--ntasks-per-node", "2", sys.executable, "launch.py",
            "--launcher", "slurm", "--master-addr", lab.bridge_address, "-n", "2", "-s", "2",
            "--heartbeat-interval", "1", sys.executable, "-m", "bandwidth.measure",
            "--kv-store", "dist_sync", "--cpus", "1", "--network", "mlp", "--num-batches",
            "100000000", "--timeout", "20", "--no-reference"]
    proc = subprocess.Popen(argv, cwd=ROOT, env=slurm.env(PYTHONPATH=str(ROOT)),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while "iter 2," not in (line := proc.stdout.readline()):
            assert line and time.monotonic() < deadline, "the job did not start measuring"
        labmod.sh("ip", "-n", host.namespace, "link", "set", host.interface, "down")
        cut = time.monotonic()
        _, err = proc.communicate(timeout=90)
        ended_s = time.monotonic() - cut
        deadline = cut + LAUNCHER_GONE_BEATS * 1.0 + GONE_GRACE_S + 15
        while job_processes(host) and time.monotonic() < deadline:
            time.sleep(0.5)
        left = {pid: Path(f"/proc/{pid}/cmdline").read_bytes()[:200] for pid in job_processes(host)}
    finally:
        labmod.sh("ip", "-n", host.namespace, "link", "set", host.interface, "up")
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        slurm._wait(slurm._all_idle, "the nodes idle again", 120)
    fail = next((line for line in err.splitlines() if line.startswith("FAIL:")), err[-3000:])
    assert re.match(rf"FAIL: (worker 1 \(rank 1\)|server 1 \(rank 3\)) on "
                    rf"({host.address}|bw12n2): ", fail), err[-3000:]
    assert proc.returncode != 0 and "Traceback" not in err
    assert ended_s < 60, f"the launcher ended {ended_s:.0f} s after the cut"
    assert left == {}, left
