"""How the launcher learns each process's end under --launcher mpi and slurm, tested directly
(no mpirun, no Slurm): the wrapper's protocol lines, the ending each process gets from them and
from what it said, the root cause among the ranks, and the wrapper itself around a real command
(status, signal, helpers left behind, signals passed on)."""

import os
import signal
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest
from launch_support import ROOT, alive, launch_env, marker, wait_until

from bandwidth.launch.contract.environment import Job
from bandwidth.launch.supervision.rankends import end_line, split_line, start_line
from bandwidth.launch.supervision.runner import RankProcess, RunnerChild, settle

JOB = Job(2, 1, "10.0.0.1", 29500, 29500, "mpi")


def part(index: int = 1) -> RankProcess:
    role = JOB.role(index, "node2", (0, 1))
    return RankProcess(role, role.label, role.title)


def test_protocol_lines_are_taken_out_of_a_ranks_output_wherever_they_start():
    assert split_line(start_line(4711).rstrip("\n")) == ("", ("start", {
        "pid": 4711, "status": None, "signal": None, "stopped": None}))
    text, (kind, record) = split_line("no newline yet" + end_line(7, -9, "SIGTERM").rstrip())
    assert (text, kind) == ("no newline yet", "end")
    assert record == {"pid": 7, "status": None, "signal": "SIGKILL", "stopped": "SIGTERM"}
    assert split_line(end_line(7, 3, None).rstrip())[1][1]["status"] == 3
    for line in ("plain output", "bandwidth-role: end {not json", "bandwidth-role: end [1]",
                 "bandwidth-role: other {}"):
        assert split_line(line) == (line, None)
    # wrong types are dropped field by field, never trusted
    _, (_, bad) = split_line('bandwidth-role: end {"pid": "7", "status": 300, '
                             '"signal": "SIGNOPE", "stopped": true}')
    assert bad == {"pid": None, "status": None, "signal": None, "stopped": None}


def record(status=None, sig=None, stopped=None):
    return {"pid": 42, "status": status, "signal": sig, "stopped": stopped}


@pytest.mark.parametrize("end, said, named, code, expect", [
    # (status, signal, failed, consequence, stopped by the launch, at_s)
    ((record(1), 5.0), None, None, 1, (1, None, True, False, False, 5.0)),
    ((record(sig="SIGTERM"), 5.0), None, None, 143, (None, "SIGTERM", True, False, False, 5.0)),
    ((record(143, stopped="SIGTERM"), 6.0), ({"consequence": False}, 5.9), None, 1,
     (143, None, False, False, True, 6.0)),
    ((record(1, stopped="SIGTERM"), 6.0), ({"consequence": True}, 5.5), None, 1,
     (1, None, True, True, False, 6.0)),
    ((record(0), 7.0), None, None, 0, (0, None, False, False, False, 7.0)),
    (None, ({"consequence": True, "reason": "a peer process is gone"}, 5.5), None, 1,
     (None, None, True, True, False, 5.5)),
    (None, None, 3, 3, (3, None, True, False, False, 9.0)),
    (None, None, -9, 137, (None, "SIGKILL", True, False, False, 9.0)),
    (None, None, None, 0, (0, None, False, False, False, 9.0)),
    (None, None, None, 1, (None, None, False, False, True, 9.0)),
])
def test_each_process_ending_comes_from_its_records_or_the_runner(end, said, named, code, expect):
    p = part()
    known = settle(p, ({"pid": 42}, 0.5), end, said, named, code, now=9.0)
    e = p.ending
    assert known and p.pid == 42 and p.started_s == 0.5
    assert (e.status, e.signal, e.failed, e.consequence, e.by_launcher, e.at_s) == expect
    assert (p.failure_found is not None) == e.failed


def test_a_process_never_heard_of_is_neither_failed_nor_stopped():
    p = part()
    assert not settle(p, None, None, None, None, 1, now=9.0)
    assert (p.ending.failed, p.ending.by_launcher, p.ending.at_s, p.pid) == (False, False, None, None)


def runner(returncode: int, lines: dict[int, list[str]], said=None) -> RunnerChild:
    child = RunnerChild("mpirun", ["mpirun"], {}, [JOB.role(i, "node2", (i, 3)) for i in range(3)])
    child.proc = SimpleNamespace(returncode=returncode, pid=1, wait=lambda: returncode)
    child.said_watch = SimpleNamespace(said=said or {}, poll=lambda now, force=False: None)
    for when, (index, text) in sorted((t, (i, x)) for i, items in lines.items()
                                      for t, x in items):
        child.clock = lambda when=when: when
        shown = child.rank_line(index, text)
        assert shown is None or "bandwidth-role:" not in shown
    child.clock = lambda: 10.0
    child._settle_ranks()
    return child


def test_the_root_cause_among_the_ranks_is_the_earliest_that_is_not_a_consequence():
    child = runner(1, {
        0: [(1.0, start_line(100)), (4.2, "error: a peer process is gone"),
            (4.3, end_line(100, 1, None))],
        1: [(1.0, start_line(101)), (4.0, "boom: error here"), (4.1, end_line(101, 3, None))],
        2: [(1.0, start_line(102)), (4.5, end_line(102, -15, "SIGTERM"))],
    }, said={0: ({"consequence": True, "reason": "a peer process is gone"}, 4.2)})
    assert child.parts() == child.ranks
    failure = child.failure()
    assert (failure.subject, failure.what, failure.exit_code) == \
        ("worker 1 (rank 1) on node2", "exited with status 3", 3)
    assert list(failure.tail) == ["boom: error here"]          # its own lines only
    assert [r.pid for r in child.ranks] == [100, 101, 102]
    assert child.ranks[2].ending.by_launcher and child.ranks[0].ending.consequence


def test_without_any_word_from_the_ranks_the_runner_stands_for_them():
    child = runner(1, {})
    assert child.parts() == [child]
    assert child.failure().subject == "mpirun"


def wrapper(*command: str, **popen) -> subprocess.Popen:
    code = ("import os, sys; from bandwidth.launch.launchers.rolewrap import run_command; "
            "sys.exit(run_command('test', sys.argv[1:], dict(os.environ)))")
    return subprocess.Popen([sys.executable, "-c", code, *command], cwd=ROOT, env=launch_env(),
                            stderr=subprocess.PIPE, text=True, start_new_session=True, **popen)


@pytest.mark.timeout(60)
def test_the_wrapper_says_how_the_command_ended_and_ends_the_same_way():
    proc = wrapper("sh", "-c", "echo about to fail >&2; exit 3")
    _, err = proc.communicate(timeout=30)
    words = [split_line(line) for line in err.splitlines()]
    assert proc.returncode == 3 and ("about to fail", None) in words
    (start,) = [event for _, event in words if event and event[0] == "start"]
    assert words[-1][1] == ("end", record(3) | {"pid": start[1]["pid"]})    # the last line
    proc = wrapper("sh", "-c", "kill -KILL $$")
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL            # the same signal, for mpirun and srun
    assert split_line(err.splitlines()[-1])[1][1]["signal"] == "SIGKILL"


@pytest.mark.timeout(60)
def test_the_wrapper_passes_signals_on_and_leaves_no_helper():
    mark = marker()
    # a helper left as an orphan (the wrapper adopts it), and one that ends at once
    helper = f"{sys.executable} -c 'import time; time.sleep(600)' {mark}"
    proc = wrapper("sh", "-c", f"({helper} &); (sleep 0.2 &); trap 'exit 7' TERM; "
                   "while :; do sleep 0.1; done")
    try:
        assert wait_until(lambda: len(alive(mark)) == 3, 20)   # wrapper, shell, helper
        time.sleep(0.5)
        assert zombies(proc.pid) == []                           # the ended one was reaped
        time.sleep(0.3)                          # the shell's trap is set
        # from another process than the wrapper's parent: passed on to the command
        subprocess.run(["kill", "-TERM", str(proc.pid)], check=True)
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == 7
        assert split_line(err.splitlines()[-1])[1][1]["stopped"] is None
        assert wait_until(lambda: alive(mark) == [], 5), alive(mark)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)      # whatever a failure left in its session
        except ProcessLookupError:
            pass
        proc.wait()


@pytest.mark.timeout(60)
def test_a_signal_from_the_runner_reaches_the_command_once_and_marks_it_stopped():
    # mpirun's daemon and slurmstepd (the wrapper's parent) signal the whole group: the wrapper
    # passes nothing on (a second SIGTERM would end measure.py at once) and notes the stop
    proc = wrapper("sh", "-c", "n=0; trap 'n=$((n+1))' TERM; echo ready >&2; "
                   "while [ $n = 0 ]; do sleep 0.1; done; sleep 0.5; exit $((6+n))")
    try:
        while proc.stderr.readline() not in ("ready\n", ""):     # the shell's trap is set
            pass
        os.killpg(proc.pid, signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 7                       # one SIGTERM, not two
    _, (kind, end) = split_line(err.splitlines()[-1])
    assert (kind, end) == ("end", record(7, stopped="SIGTERM") | {"pid": end["pid"]})


def zombies(parent: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    fields = stat.read().rpartition(")")[2].split()
            except OSError:
                continue
            if fields[1] == str(parent) and fields[0] == "Z":
                found.append(int(entry))
    return found
