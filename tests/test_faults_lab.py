"""Faults across lab hosts, each asserting that the launcher names the process the test hurt:
SIGKILL, SIGTERM and SIGSTOP of a remote worker and a remote server (``dist_sync``), SIGKILL of
a remote per-device rank (``dist_nccl``), a host's link set down, a host's sshd killed mid-run,
and SIGTERM to the launcher while ssh still connects. No process may be left on any host.

A ``bandwidth.netlab`` lab of 3 namespace hosts (name ``h3fl``), removed on every exit path;
skipped without root, ip, tc or sshd.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from launch_support import host_processes, lab_leftovers, netlab_for_tests

from bandwidth.netlab import lab as labmod

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
NAME = "h3fl"
SUBNET = "198.18.134.0/24"
HEARTBEAT_S = 1.0

pytestmark = pytest.mark.timeout(150)


@pytest.fixture(scope="module")
def lab():
    with netlab_for_tests(NAME, 3, None, {}, SUBNET) as made:
        yield made


def start(lab, tmp_path, mode: str, *extra: str) -> subprocess.Popen:
    servers = "0" if mode == "dist_nccl" else "1"
    cpus = "2" if mode == "dist_nccl" else "1"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    if "mpi" in extra:               # mpirun's ssh to the lab's hosts, as the launcher's own
        env["OMPI_MCA_plm_rsh_args"] = f"-F {lab.state_dir / 'ssh_config'} -o BatchMode=yes"
    ssh = [] if "--launcher" in extra else ["--ssh-config", str(lab.state_dir / "ssh_config")]
    argv = [PYTHON, str(ROOT / "launch.py"), "-H", str(lab.state_dir / "hosts"), *ssh,
            "-n", "2", "-s", servers, "--timeout", "30",
            "--heartbeat-interval", f"{HEARTBEAT_S:g}", "--report", str(tmp_path / "r.json"),
            *extra, PYTHON, "bandwidth/measure.py", "--kv-store", mode, "--cpus", cpus,
            "--network", "mlp", "--num-batches", "100000000", "--timeout", "20",
            "--no-reference"]
    return subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def program_pid(host, role: str, device_rank: int | None = None, timeout_s: float = 90) -> int:
    """The measure.py of ``role`` on ``host`` (not the guard above it), or its per-device rank."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for pid in labmod.pids_in(host.namespace):
            try:
                environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
                argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if f"DMLC_ROLE={role}".encode() in environ and argv[1:2] == [b"bandwidth/measure.py"]:
                if device_rank is None:
                    return pid
                for child in labmod.pids_in(host.namespace):
                    try:
                        stat = Path(f"/proc/{child}/stat").read_text()
                        cmd = Path(f"/proc/{child}/cmdline").read_bytes()
                    except OSError:
                        continue
                    if stat.rpartition(")")[2].split()[1] == str(pid) and \
                            f"--rank\0{device_rank}\0".encode() in cmd:
                        return child
        time.sleep(0.2)
    raise AssertionError(f"no {role} on {host.address}")


def measuring(proc, timeout_s: float = 120) -> None:
    """Return once the job prints its second iteration (every process joined and beats)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        assert line, "the job ended before measuring"
        if "iter 2," in line:
            return
    raise AssertionError("the job did not start measuring")


def finish(proc, timeout_s: float = 90) -> tuple[int, str]:
    try:
        _, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        raise AssertionError(f"still running {timeout_s} s after the fault: {err[-3000:]}")
    return proc.returncode, err


def assert_clean(lab, within_s: float = 15.0) -> None:
    deadline = time.monotonic() + within_s
    while lab_leftovers(lab) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert lab_leftovers(lab) == []


def fail_line(err: str) -> str:
    return next((line for line in err.splitlines() if line.startswith("FAIL:")), err[-2000:])


# (role, rank, host index): worker 1 runs on host 2, server 0 (rank 2) on host 3
TARGETS = {"worker": (1, 1), "server": (2, 2)}


# Each signal once, the roles alternating: about a minute a case, and the six pairs were six
# minutes of the machine's one-at-a-time tests (`benchmarks/fault_fuzz.py --lab` draws random
# processes, signals and moments on a lab)
# A remote process that ends (a server's SIGTERM) and one that stops answering (a worker's
# SIGSTOP, found by the heartbeat); SIGKILL's abrupt end across hosts is the per-device rank's
# test below and the cut-off host's, and every signal is tried on loopback (tests/test_faults.py).
@pytest.mark.parametrize("role, sig", [("server", "SIGTERM"), ("worker", "SIGSTOP")])
def test_a_signal_to_a_remote_process_names_it(lab, tmp_path, role, sig):
    rank, index = TARGETS[role]
    host = lab.hosts[index]
    proc = start(lab, tmp_path, "dist_sync")
    try:
        pid = program_pid(host, role)
        measuring(proc)
        os.kill(pid, getattr(signal, sig))
        code, err = finish(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
        try:
            os.kill(pid, signal.SIGKILL)
        except (OSError, UnboundLocalError):
            pass
    task = 1 if role == "worker" else 0
    assert fail_line(err).startswith(f"FAIL: {role} {task} (rank {rank}) on {host.address}: "), err
    assert code == {"SIGKILL": 137, "SIGTERM": 143, "SIGSTOP": 1}[sig], err[-3000:]
    assert f"(pid {pid})" in fail_line(err)
    assert "Traceback" not in err
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["root_cause"]["rank"] == rank
    if sig == "SIGSTOP":
        assert doc["root_cause"]["silent_s"] is not None, err[-3000:]      # the heartbeat saw it
        assert doc["root_cause"]["silent_s"] <= 3 * HEARTBEAT_S + 0.5
    assert_clean(lab)


def test_a_killed_per_device_rank_is_named(lab, tmp_path):
    host = lab.hosts[1]                                   # worker 1's host
    proc = start(lab, tmp_path, "dist_nccl")
    try:
        rank_pid = program_pid(host, "worker", device_rank=1)
        measuring(proc)
        os.kill(rank_pid, signal.SIGKILL)
        code, err = finish(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
    line = fail_line(err)
    assert line.startswith(f"FAIL: worker 1 (rank 1) on {host.address}: "), err[-3000:]
    assert f"rank 1 (pid {rank_pid}) was killed by SIGKILL" in line
    assert code == 1 and "Traceback" not in err
    assert_clean(lab)


def job_processes(host) -> list[int]:
    """The guards, role wrappers, MPI daemons and measure.py processes (with their per-device
    ranks) on ``host``; not the lab's sshd (its configuration's path names the lab's folder,
    bandwidth-netlab)."""
    return host_processes(host, lambda argv: not argv.startswith(b"sshd") and (
        b"bandwidth" in argv or argv.startswith((b"orted", b"prted"))))    # mpirun's daemon


def describe(pid: int) -> str:
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")[:300]
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[:2]
    except OSError:
        return "gone"
    return f"{argv.decode(errors='replace')} (state {state[0]}, parent {state[1]})"


@pytest.mark.parametrize("launcher", ["ssh", "mpi"])
def test_a_link_set_down_names_the_host_behind_it(lab, tmp_path, launcher):
    """The launcher names the host; on the host, cut off and told nothing, everything the job
    started there ends within the heartbeat's time: over ssh the guard hears no launcher for
    GUARD_QUIET_S (was: its sshd session, the guard and measure.py alive 127 s later); under
    mpirun the role wrapper's line to the store goes unanswered (launcherwatch) and it ends the
    command and the MPI daemon above it (was: orted, the wrapper and measure.py alive 90 s later,
    and the launcher waited 200 s for an mpirun that had crashed in its abort)."""
    from bandwidth.launch.contract.heartbeat import LAUNCHER_GONE_BEATS
    from bandwidth.launch.launchers.rolewrap import GONE_GRACE_S
    from bandwidth.launch.launchers.ssh import GUARD_GRACE_S, GUARD_QUIET_S
    if launcher == "mpi" and shutil.which("mpirun") is None:
        pytest.skip("Open MPI's mpirun not installed (apt-get install openmpi-bin)")
    host = lab.hosts[1]
    extra = ["--launcher", "mpi"] if launcher == "mpi" else []
    proc = start(lab, tmp_path, "dist_sync", *extra)
    try:
        program_pid(host, "worker")
        measuring(proc)
        labmod.sh("ip", "-n", host.namespace, "link", "set", host.interface, "down")
        cut = time.monotonic()
        code, err = finish(proc)
        ended_s = time.monotonic() - cut
        within_s = GUARD_QUIET_S + GUARD_GRACE_S if launcher == "ssh" else \
            LAUNCHER_GONE_BEATS * HEARTBEAT_S + GONE_GRACE_S
        deadline = cut + within_s + 15        # + 15: what the loaded 2-core machine adds
        while job_processes(host) and time.monotonic() < deadline:
            time.sleep(0.5)
        left = {pid: describe(pid) for pid in job_processes(host)}
    finally:
        labmod.sh("ip", "-n", host.namespace, "link", "set", host.interface, "up")
        if proc.poll() is None:
            proc.kill()
    assert fail_line(err).startswith(f"FAIL: worker 1 (rank 1) on {host.address}: "), err[-3000:]
    assert code != 0 and "Traceback" not in err
    assert ended_s < 60, f"the launcher ended {ended_s:.0f} s after the cut"
    assert left == {}, left
    assert_clean(lab, within_s=30)


def test_sshd_killed_mid_run_names_the_process_on_that_host(lab, tmp_path):
    host = lab.hosts[2]                                   # server 0's host
    proc = start(lab, tmp_path, "dist_sync")
    try:
        program_pid(host, "server")
        measuring(proc)
        for pid in labmod.pids_in(host.namespace):        # the daemon and the sessions
            try:
                program = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]
                if os.path.basename(program).startswith(b"sshd"):
                    os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        code, err = finish(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
        from bandwidth.netlab import sshd as labsshd
        labsshd.start_sshd(lab, host)
        labsshd.wait_ready(lab, host)
    assert fail_line(err).startswith(f"FAIL: server 0 (rank 2) on {host.address}: "), err[-3000:]
    assert code != 0 and "Traceback" not in err
    assert_clean(lab, within_s=30)


@pytest.mark.parametrize("after_s", [0.3, 1.0, 2.5])
def test_sigterm_to_the_launcher_during_start_up_is_143(lab, tmp_path, after_s):
    proc = start(lab, tmp_path, "dist_sync")
    time.sleep(after_s)
    proc.send_signal(signal.SIGTERM)
    code, err = finish(proc, 60)
    assert code == 143, err[-3000:]
    assert "Traceback" not in err
    assert_clean(lab)
