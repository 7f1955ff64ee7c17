"""Faults under the local launcher: the root cause (the earliest failure that is not a
consequence), the heartbeat naming a stopped process within its threshold, ``--report``, the
launcher killed with SIGKILL taking its processes with it, and SIGTERM to the launcher at any
moment of its start-up ending in 143. The random fault fuzz runs 20 of its cases here.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest
from launch_support import ROOT, alive, launch, marker, program, start_launch, wait_until

from bandwidth.launch.supervision.ending import Ending, consequence_line, pick_root

pytestmark = pytest.mark.timeout(120)


def child(subject, at_s, failed=True, consequence=False, by_launcher=False, status=1):
    ending = Ending()
    ending.at_s, ending.failed, ending.by_launcher = at_s, failed, by_launcher
    ending.status = status
    if consequence:
        ending.said = {"consequence": True, "reason": "a peer process is gone"}
    return SimpleNamespace(subject=subject, ending=ending)


def test_the_root_cause_is_the_earliest_failure_that_is_not_a_consequence():
    peer = child("worker 0", 1.0, consequence=True)
    culprit = child("server 0", 1.4, status=137)
    later = child("worker 1", 2.0)
    stopped = child("worker 2", 0.5, failed=False, by_launcher=True)
    assert pick_root([peer, culprit, later, stopped]) is culprit
    assert pick_root([peer]) is peer                     # only consequences: the earliest
    assert pick_root([stopped]) is None
    line = consequence_line(culprit, [peer, culprit, later, stopped])
    assert line == ("  then, as a consequence: worker 0 exited with status 1 at 1.0 s; "
                    "worker 1 exited with status 1 at 2.0 s")


def _joined(proc, count, timeout_s=60):
    """Pids of the beat.py processes once ``count`` of them said they joined."""
    lines = []
    deadline = time.monotonic() + timeout_s
    while len(lines) < count and time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        if " joined " in line:
            lines.append(line)
    assert len(lines) == count, lines
    return {int(line.split()[-2]): int(line.split()[-1]) for line in lines}


def test_a_stopped_process_is_named_within_three_heartbeat_intervals(tmp_path):
    report = tmp_path / "report.json"
    proc = start_launch("-n", "3", "-s", "0", "--heartbeat-interval", "0.5", "--report",
                        str(report), sys.executable, program("beat.py"), "60")
    try:
        pids = _joined(proc, 3)
        os.kill(pids[1], signal.SIGSTOP)
        stopped_at = time.monotonic()
        _, err = proc.communicate(timeout=60)
        took = time.monotonic() - stopped_at
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, err
    fail = [line for line in err.splitlines() if line.startswith("FAIL:")]
    assert len(fail) == 1 and fail[0].startswith(
        "FAIL: worker 1 (rank 1) on 127.0.0.1: stopped answering: stopped by a signal"), err
    assert f"(pid {pids[1]})" in fail[0]
    doc = json.loads(report.read_text())
    assert doc["exit_code"] == 1 and doc["root_cause"]["rank"] == 1
    assert doc["root_cause"]["silent_s"] <= 3 * 0.5 + 0.5
    assert took < 20                  # the threshold and the stop, not a timeout of 60 s
    assert "Traceback" not in err
    assert wait_until(lambda: not any(alive_pid(pid) for pid in pids.values()), 10)


def test_the_report_holds_every_process_and_the_root_cause(tmp_path):
    report = tmp_path / "report.json"
    result = launch("-n", "2", "-s", "1", "--report", str(report), sys.executable,
                    program("fail.py"), marker(), "--rank", "1", "--exit", "3")
    assert result.returncode == 3, result.stderr
    doc = json.loads(report.read_text())
    assert doc["exit_code"] == 3
    assert doc["root_cause"]["subject"] == "worker 1 (rank 1) on 127.0.0.1"
    assert doc["root_cause"]["status"] == 3 and doc["root_cause"]["pid"] > 0
    assert [p["rank"] for p in doc["processes"]] == [0, 1, 2]
    assert sum(p["root_cause"] for p in doc["processes"]) == 1
    lines = result.stderr[result.stderr.index("FAIL:"):].splitlines()
    assert lines[1].startswith("  then")


def test_a_report_path_is_checked_before_the_job_and_written_through_a_link(tmp_path):
    """--report onto a FIFO, a folder, a missing folder or a symlink loop: one line and exit 2
    before anything starts (was: a regular file renamed over the FIFO at the end, exit 0, or the
    missing folder found after the whole job). Onto a symlink: its target gets the report."""
    fifo, loop = tmp_path / "fifo", tmp_path / "loop"
    os.mkfifo(fifo)
    loop.symlink_to(loop)
    started = tmp_path / "started"
    command = (sys.executable, "-c", f"open({str(started)!r}, 'a').close()")
    for path, said in ((fifo, "is not a regular file"), (tmp_path, "is a folder"),
                       (tmp_path / "no" / "r.json", "does not exist"), (loop, "symlink loop")):
        result = launch("-n", "1", "-s", "0", "--report", str(path), *command)
        assert result.returncode == 2, result.stderr
        assert result.stderr.startswith("launch.py: error: --report ") and said in result.stderr
        assert len(result.stderr.splitlines()) == 1 and not started.exists()
    assert fifo.is_fifo()
    target, link = tmp_path / "kept.json", tmp_path / "link.json"
    target.write_text("old")
    link.symlink_to(target)
    result = launch("-n", "1", "-s", "0", "--report", str(link), *command)
    assert result.returncode == 0, result.stderr
    assert link.is_symlink() and json.loads(target.read_text())["exit_code"] == 0


def test_a_launcher_killed_with_sigkill_takes_its_processes_with_it():
    proc = start_launch("-n", "2", "-s", "1", sys.executable, program("beat.py"), "600")
    try:
        pids = _joined(proc, 3)
        proc.kill()
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert wait_until(lambda: not any(alive_pid(pid) for pid in pids.values()), 10)


@pytest.mark.parametrize("ending", ["SIGKILL", "normal"])
def test_what_the_commands_started_ends_with_the_launcher(ending):
    """A command that leaves processes behind, in its group and in sessions of their own
    (setsid): a SIGKILLed launcher takes them all (was: 9 sleeps left under PID 1), and so does
    the end of the job."""
    mark = marker()
    sleeper = f"{sys.executable} -c 'import time; time.sleep(300)' {mark}"
    then = "sleep 300" if ending == "SIGKILL" else "sleep 3"
    proc = start_launch("-n", "1", "-s", "1", "sh", "-c",
                        f"{sleeper} & setsid {sleeper} & {sleeper} & {then}")
    try:
        # the launcher and the two shells (the marker is in their argv), the six sleepers
        assert wait_until(lambda: len(alive(mark)) == 9, timeout_s=30), alive(mark)
        if ending == "SIGKILL":
            proc.kill()
        assert proc.wait(30) == (-9 if ending == "SIGKILL" else 0)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert wait_until(lambda: alive(mark) == [], timeout_s=10), alive(mark)


def alive_pid(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rpartition(")")[2].split()[0] not in ("Z", "X")
    except OSError:
        return False


@pytest.mark.parametrize("after_s", [0.2, 0.4, 0.8, 1.5])
def test_sigterm_to_the_launcher_at_any_moment_of_its_start_is_143(after_s):
    mark = marker()
    proc = start_launch("-n", "2", "-s", "1", sys.executable, program("beat.py"), "600", mark)
    time.sleep(after_s)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    assert "Traceback" not in err
    assert wait_until(lambda: not alive(mark), 10)


@pytest.mark.timeout(300)
def test_random_faults_are_each_named(tmp_path):
    """benchmarks/fault_fuzz.py, 3 cases on loopback: random process, signal and moment (the
    parameter-server modes, 3 processes a case, about 18 s each on 2 cores; 20 cases were 4.7
    minutes of a CI run of 25). The benchmark itself runs 100 cases, dist_nccl and its per-device
    ranks too, and BENCHMARKS.md records them; the other tests here name each kind of fault."""
    out = tmp_path / "fuzz.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "fault_fuzz.py"),
                           "--cases", "3", "--seed", "29", "--max-delay", "1.5",
                           "--modes", "dist_sync,dist_async",
                           "--json", str(out)], cwd=ROOT, capture_output=True, text=True,
                          timeout=280, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    outcomes = json.loads(out.read_text())
    assert len(outcomes) == 3
    broke = [o for o in outcomes if not o["held"]]
    assert broke == [], proc.stdout
    assert proc.returncode == 0


def test_a_signal_inside_an_import_is_told_from_one_outside(tmp_path, monkeypatch):
    """The launcher's handler ends at once (os._exit) when the signal lands inside an import,
    where raising could leave the interpreter hanging, and raises Interrupted elsewhere."""
    import inspect

    from bandwidth.launch.cli import _importing
    (tmp_path / "seen_at_import.py").write_text(
        "import inspect\nFRAME = inspect.currentframe()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import seen_at_import
    assert _importing(seen_at_import.FRAME)
    assert not _importing(inspect.currentframe())
