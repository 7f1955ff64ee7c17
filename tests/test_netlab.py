"""Across hosts for real: a bandwidth.netlab lab of 4 namespace hosts (links shaped with tc tbf,
a real sshd on each host's own address), the real ssh launcher and Open MPI's mpirun.

Needs root, ip, tc and sshd (``.ci/run`` installs them when it runs as root); skipped with the
reason otherwise. The lab is removed on every exit path (and at the start, after a crash); each
launch test checks that no process is left in any of the lab's namespaces. A host's link set down
and a remote worker killed mid-run are tests/test_faults_lab.py's (with the other signals).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from launch_support import descendants, lab_leftovers, netlab_for_tests
from socket_audit import (is_loopback, listening, read_on, socket_inodes, stop_group,
                          strangers_served)

from bandwidth.netlab import lab as labmod
from bandwidth.netlab import sshd as labsshd

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
NAME = "bwi19t"                       # no other lab or test uses this prefix
SUBNET = "198.18.119.0/24"
RATE_GBIT, SLOW_GBIT = 1.0, 0.5       # hosts 1-3, and host 4 shaped slower

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def lab():
    with netlab_for_tests(NAME, 4, f"{RATE_GBIT}gbit", {"4": f"{SLOW_GBIT}gbit"},
                          SUBNET) as made:
        yield made
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    assert NAME not in links


def test_status_lists_the_lab(lab):
    proc = subprocess.run([PYTHON, "-m", "bandwidth.netlab", "status", "--name", NAME], cwd=ROOT,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True,
                          text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    for host in lab.hosts:
        rate = "500 Mbit/s" if host.index == 4 else "1 Gbit/s"
        assert re.search(rf"{re.escape(host.address)} .* {host.interface} +{rate} each way, "
                         "sshd up", proc.stdout), proc.stdout
    assert (lab.state_dir / "hosts").read_text().split() == [h.address for h in lab.hosts]


def leftovers(lab) -> list[str]:
    """Processes in the lab's namespaces other than its sshd daemons."""
    return lab_leftovers(lab)


def assert_clean(lab, within_s: float = 10.0) -> None:
    deadline = time.monotonic() + within_s
    while leftovers(lab) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert leftovers(lab) == []


def lab_launch(lab, *args: str, netns: str | None = None, timeout: float = 150,
               env: dict | None = None, hosts: list[str] | None = None,
               tmp_path: Path | None = None) -> subprocess.CompletedProcess:
    state = lab.state_dir
    hostfile = str(state / "hosts")
    if hosts is not None:
        hostfile = str(tmp_path / "hosts")
        Path(hostfile).write_text("".join(f"{h}\n" for h in hosts))
    argv = [PYTHON, str(ROOT / "launch.py"), "-H", hostfile]
    if "--launcher" not in args:
        argv += ["--ssh-config", str(state / "ssh_config")]
    argv = (["ip", "netns", "exec", netns] if netns else []) + argv + list(args)
    full_env = dict(os.environ, PYTHONPATH=str(ROOT), **(env or {}))
    return subprocess.run(argv, cwd=ROOT, env=full_env, capture_output=True, text=True,
                          timeout=timeout)


def max_error(stdout: str) -> float:
    found = re.findall(r"max error ([0-9.]+)", stdout)
    assert found, stdout
    return max(float(v) for v in found)


MEASURE = ["python3", "bandwidth/measure.py", "--network", "mlp", "--num-batches", "3",
           "--no-reference", "--timeout", "60"]
EXACT = ["python3", "bandwidth/measure.py", "--network", "lenet", "--image-shape", "1,28,28",
         "--num-classes", "10", "--num-batches", "3", "--no-reference", "--timeout", "60"]
MODES = {
    "dist_sync": (["-n", "2", "-s", "2"], ["--kv-store", "dist_sync", "--cpus", "1"]),
    "dist_async_device": (["-n", "2", "-s", "1"], ["--kv-store", "dist_async_device",
                                                    "--cpus", "2", "--optimizer", "sgd",
                                                    "--all-worker-lines"]),
    "dist_nccl": (["-n", "3", "-s", "0"], ["--kv-store", "dist_nccl", "--cpus", "1"]),
}


# Every mode is exact on loopback (tests/test_dist.py); across hosts, one of each transport path:
# a sync and an async parameter server (host and device reduce) and the all-reduce.
@pytest.mark.parametrize("mode", list(MODES))
def test_mode_across_hosts_is_exact(lab, mode, tmp_path):
    launch_args, measure_args = MODES[mode]
    # Exactness needs no large arrays: lenet's 1.7 MB (mlp's 77 MB took 45 s a mode in CI).
    doc = tmp_path / "run.json"
    proc = lab_launch(lab, *launch_args, "--timeout", "60", *EXACT, *measure_args,
                      "--json", str(doc))
    assert proc.returncode == 0, proc.stderr[-3000:]
    if "async" not in mode:
        assert max_error(proc.stdout) == 0.0
    else:
        # As on one host (tests/test_dist.py): async servers err only by staleness, the other
        # worker's pushes at most one step ahead or behind, over this worker's devices.
        workers, devices = int(launch_args[1]), int(measure_args[measure_args.index("--cpus") + 1])
        lines = re.findall(r"iter (\d+), .* error ([0-9.]+)", proc.stdout)
        assert len(lines) == workers * 3
        for iteration, error in lines:
            assert float(error) <= 1.2 * devices * (workers - 1) / (int(iteration) + 1)
    # Each host's counters, with the share of its machine's cores busy meanwhile: the lab's
    # hosts are namespaces of this one machine (one boot id).
    counters = json.loads(doc.read_text())["results"][0]["link_counters"]
    assert len(counters) >= 2
    assert all(0.0 <= c["cpu_busy"] <= 1.0 and c["cores"] == os.cpu_count()
               for c in counters.values())
    assert len({c["machine"] for c in counters.values()}) == 1
    # A host with a worker counts the machine's CPU inside the timed steps only; a server-only
    # host, which times no step, the whole run.
    for c in counters.values():
        worker = any(p.startswith("worker") for p in c["processes"])
        assert c["cpu_window"] == ("steps" if worker else "run"), c
    assert all(c["bytes_out"] > 0 and c["bytes_in"] > 0 for c in counters.values())
    assert_clean(lab)


def test_every_host_uses_its_own_interface(lab, tmp_path):
    """Interface names differ from host to host; each process finds its own, and the address it
    reaches the rendezvous from is its host's."""
    proc = lab_launch(lab, "-n", "4", "-s", "0", "--timeout", "30", "python3",
                      "tests/launch_programs/ifname.py")
    assert proc.returncode == 0, proc.stderr[-2000:]
    seen = sorted(line.split() for line in proc.stdout.splitlines() if line.strip())
    assert seen == [[h.address, h.interface, h.interface, h.address] for h in lab.hosts]
    # A user's choice is kept.
    proc = lab_launch(lab, "-n", "2", "-s", "0", "--timeout", "30", "--env",
                      "GLOO_SOCKET_IFNAME=lo", "python3", "tests/launch_programs/ifname.py")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert {line.split()[1] for line in proc.stdout.splitlines()} == {"lo"}
    assert_clean(lab)


def test_unreachable_rendezvous_fails_in_one_line(lab):
    """A rendezvous address that no lab host reaches (the launcher must listen on an address of
    its own host, so: its loopback, which inside each namespace is that host's own): every process
    fails naming its host and the address."""
    proc = lab_launch(lab, "-n", "1", "-s", "0", "--timeout", "20", "--master-addr",
                      "127.0.0.1", "python3", "tests/launch_programs/ifname.py", timeout=60)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert re.search(r"198\.18\.119\.1: cannot reach the rendezvous at 127\.0\.0\.1:\d+",
                     proc.stderr), proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    assert_clean(lab)


def test_launcher_inside_a_host(lab):
    """The launcher started inside host 1: the rendezvous is on host 1's address."""
    launch_args, measure_args = MODES["dist_sync"]
    proc = lab_launch(lab, *launch_args, "--timeout", "60", *MEASURE, *measure_args,
                      netns=lab.hosts[0].namespace)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert max_error(proc.stdout) == 0.0
    assert_clean(lab)


def test_mpirun_across_hosts(lab):
    if shutil.which("mpirun") is None:
        pytest.skip("Open MPI's mpirun not installed (apt-get install openmpi-bin)")
    config = lab.state_dir / "ssh_config"
    launch_args, measure_args = MODES["dist_sync"]
    proc = lab_launch(lab, *launch_args, "--launcher", "mpi", "--timeout", "60", *MEASURE,
                      *measure_args, env={"OMPI_MCA_plm_rsh_args":
                                          f"-F {config} -o BatchMode=yes"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert max_error(proc.stdout) == 0.0
    assert_clean(lab)


def test_matrix_reads_the_shaped_rates_and_names_the_slow_host(lab, tmp_path):
    matrix_path = tmp_path / "hosts.json"
    proc = lab_launch(lab, "-n", "4", "-s", "0", "--timeout", "60", "python3", "-m",
                      "bandwidth.ceiling", "--network", "--mb", "32", "--repeats", "2",
                      "--json", str(matrix_path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(matrix_path.read_text())
    matrix = doc.get("network", doc)
    rate = {h.address: (h.rate_bits or 0) / 8e9 for h in lab.hosts}    # GB/s
    hosts = [label.rpartition("@")[2] for label in matrix["hosts"]]
    cells = []
    for i, row in enumerate(matrix["gbps"]):
        for j, gbps in enumerate(row):
            if i != j:
                # Never above the shaping; below it by as much as a loaded machine makes it
                # (0.086 GB/s against 0.125 was seen beside other tests): BENCHMARKS.md holds
                # the accuracy on a quiet machine.
                shaped = min(rate[hosts[i]], rate[hosts[j]])
                assert 0.5 * shaped <= gbps <= 1.10 * shaped, (hosts[i], hosts[j], gbps, shaped)
                cells.append((gbps, hosts[i], hosts[j]))
    slow = lab.hosts[3].address
    assert slow in min(cells)[1:]
    # Issue 20's per-host gate on the same matrix: the host shaped to half the others' rate fails,
    # and the re-pairing pass names it and no other host.
    gate = subprocess.run([PYTHON, "-m", "bandwidth.hostgate", str(matrix_path)], cwd=ROOT,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True,
                          text=True, timeout=60)
    assert gate.returncode == 1, gate.stdout + gate.stderr
    faulty = [line for line in gate.stdout.splitlines() if line.startswith("# HOST AT FAULT")]
    assert len(faulty) == 1 and slow in faulty[0], gate.stdout
    verdict = next(line for line in gate.stdout.splitlines() if line.startswith("# FAILED"))
    blamed = verdict.partition("at fault: ")[2]
    assert slow in blamed and not any(h.address in blamed for h in lab.hosts[:3]), gate.stdout
    # The run's summary names a cell of the slow host as its ceiling (server 1 is on host 4).
    launch_args, measure_args = MODES["dist_sync"]
    proc = lab_launch(lab, *launch_args, "--timeout", "60", *MEASURE, *measure_args,
                      "--network-ceiling", str(matrix_path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(line for line in proc.stdout.splitlines() if "host-to-host ceiling" in line)
    assert f"@{slow}" in line and "%" in line, line
    assert_clean(lab)



def test_no_listener_of_a_job_across_hosts_serves_a_stranger(lab):
    """Mid-run, torch's own store client from a program outside the job, at every socket the
    job listens on: the launcher's (its gate, its store's private port) from the launching host;
    each job host's (store relays, Gloo, the servers') from that host and, beyond loopback, from
    the lab host the job does not use. None serves a key."""
    state = lab.state_dir
    argv = [PYTHON, str(ROOT / "launch.py"), "-H", str(state / "hosts"), "--ssh-config",
            str(state / "ssh_config"), "-n", "2", "-s", "1", "--timeout", "60", "python3",
            "bandwidth/measure.py", "--kv-store", "dist_sync", "--cpus", "1", "--network", "mlp",
            "--num-batches", "100000", "--no-reference", "--timeout", "60"]
    proc = subprocess.Popen(argv, cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)),
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            start_new_session=True)
    try:
        for line in proc.stdout:
            if line.startswith("iter 2,"):
                break
        else:
            pytest.fail(f"no iteration (exit {proc.wait()})")
        read_on(proc)
        probes = [(listening(socket_inodes({proc.pid} | descendants(proc.pid))), None, True)]
        used, free = [], []
        for host in lab.hosts:
            pids = [pid for pid in labmod.pids_in(host.namespace)
                    if not Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"sshd")]
            (used if pids else free).append((host, pids))
        assert free and len(used) == 3, [h.address for h, _ in used]
        for host, pids in used:
            here = listening(socket_inodes(pids), table_of=pids[0])
            remote = [(host.address if address in ("0.0.0.0", "::") else address, port)
                      for address, port in here if not is_loopback(address)]
            probes += [(here, host.namespace, True), (remote, free[0][0].namespace, False)]
        served = strangers_served(probes)
        assert not served, served
    finally:
        stop_group(proc)
    assert_clean(lab, within_s=20)

# Faults across hosts: each ends within the launcher's --timeout plus a few seconds, with FAIL:
# naming the host and the role, a non-zero exit, and no process left in any namespace.

FAULT_TIMEOUT_S = 12
SLACK_S = 12                   # the FAIL report, stopping the rest; a loaded 2-core machine
def fail_line(stderr: str) -> str:
    return next((line for line in stderr.splitlines() if line.startswith("FAIL:")), stderr[-2000:])


def restart_sshd(lab, host) -> None:
    for pid in labmod.pids_in(host.namespace):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"sshd_config." in cmd:
            os.kill(pid, signal.SIGKILL)
    labsshd.start_sshd(lab, host)
    labsshd.wait_ready(lab, host)


def test_fault_sshd_stopped_before_the_start(lab):
    host = lab.hosts[2]
    for pid in labmod.pids_in(host.namespace):
        os.kill(pid, signal.SIGKILL)
    try:
        start = time.monotonic()
        proc = lab_launch(lab, "-n", "2", "-s", "2", "--timeout", str(FAULT_TIMEOUT_S), *MEASURE,
                          *MODES["dist_sync"][1], timeout=FAULT_TIMEOUT_S + 30)
        seconds = time.monotonic() - start
    finally:
        restart_sshd(lab, host)
    assert proc.returncode == 255
    line = fail_line(proc.stderr)
    assert line.startswith(f"FAIL: {host.address}: connection refused"), line
    assert f"while starting server 0@{host.address}" in proc.stderr
    assert seconds <= FAULT_TIMEOUT_S + SLACK_S
    assert_clean(lab)


def test_fault_host_accepts_but_never_answers(lab):
    host = lab.hosts[3]
    for pid in labmod.pids_in(host.namespace):
        os.kill(pid, signal.SIGKILL)
    mute = subprocess.Popen(["ip", "netns", "exec", host.namespace, PYTHON, "-c",
                             "import socket, time\n"
                             f"s = socket.create_server(('{host.address}', 22))\n"
                             "held = []\n"
                             "while True: held.append(s.accept())\n"])
    try:
        time.sleep(0.5)
        start = time.monotonic()
        proc = lab_launch(lab, "-n", "2", "-s", "2", "--timeout", str(FAULT_TIMEOUT_S), *MEASURE,
                          *MODES["dist_sync"][1], timeout=FAULT_TIMEOUT_S + 40)
        seconds = time.monotonic() - start
    finally:
        mute.kill()
        mute.wait()
        restart_sshd(lab, host)
    assert proc.returncode == 255
    line = fail_line(proc.stderr)
    assert line.startswith(f"FAIL: {host.address}: connection timed out after "
                           f"{FAULT_TIMEOUT_S} s"), line
    assert f"while starting server 1@{host.address}" in proc.stderr
    # + the login's 5 s; twice the slack: 32.6 s were seen beside another heavy test (a bound
    # against a launcher that waits far past its timeout, not a timing figure)
    assert seconds <= FAULT_TIMEOUT_S + 5 + 2 * SLACK_S
    assert_clean(lab)
