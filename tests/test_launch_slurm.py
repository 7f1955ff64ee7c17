"""``launch.py --launcher slurm`` against a real Slurm (munged, slurmctld, slurmd started by the
fixture on this machine; tests/slurm_support.py): the contract and placement, a single-host mode
and a parameter-server mode with exact results, and the failure cases (no allocation, too few
slots, a task that exits with a status, scancel mid-run), each one FAIL: line and no process left.
Skips with the reason without root or without slurm-wlm and munge."""

import json
import socket
import subprocess
import sys

import pytest

from launch_support import ROOT, alive, marker, program, records, wait_until
from slurm_support import SlurmCluster, missing_reason

from bandwidth.launch.launchers.slurm import tasks_per_node

REASON = missing_reason()
LENET = ["--network", "lenet", "--image-shape", "1,28,28", "--num-classes", "10",
         "--num-batches", "3", "--timeout", "60"]
NODE = socket.gethostname()


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    if REASON:
        pytest.skip(REASON)
    with SlurmCluster(tmp_path_factory.mktemp("slurm"), nodes=[(NODE, "127.0.0.1", None)],
                      controller=(NODE, "127.0.0.1")) as cluster:
        yield cluster


def run(slurm, *argv: str, timeout: float = 150) -> subprocess.CompletedProcess:
    return subprocess.run(list(argv), cwd=ROOT, env=slurm.env(PYTHONPATH=str(ROOT)),
                          capture_output=True, text=True, timeout=timeout)


def in_allocation(slurm, tasks: int, *launch_args: str, timeout: float = 150):
    return run(slurm, "salloc", "-n", str(tasks), sys.executable, "launch.py", "--launcher",
               "slurm", *launch_args, timeout=timeout)


def fail_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("FAIL:")]


def errors(stdout: str) -> list[str]:
    import re
    return re.findall(r"GB/sec per gpu, error (-?\d+\.\d{6})", stdout)


def test_tasks_per_node_reads_slurms_compact_form():
    assert tasks_per_node("2(x3),1") == [2, 2, 2, 1]
    assert tasks_per_node("4") == [4]
    with pytest.raises(ValueError, match="cannot read '2x'"):
        tasks_per_node("1,2x")


@pytest.mark.timeout(120)
def test_contract_and_placement_from_the_allocation(slurm, tmp_path):
    proc = in_allocation(slurm, 4, "-n", "2", "-s", "1", "--scheduler", sys.executable,
                         program("role_env.py"), str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    found = records(tmp_path)
    assert sorted(found) == ["scheduler-0", "server-0", "worker-0", "worker-1"]
    for name, record in found.items():
        env = record["env"]
        assert env["DMLC_JOB_CLUSTER"] == "slurm" and env["DMLC_NODE_HOST"] == NODE
        assert env["WORLD_SIZE"] == "3" and env["DMLC_NUM_SERVER"] == "1"
        assert env["SLURMD_NODENAME"] == NODE and "SLURM_JOB_ID" in env
    assert [found[n]["env"].get("RANK") for n in ("worker-0", "worker-1", "server-0")] == \
        ["0", "1", "2"]
    assert [found[n]["env"]["SLURM_PROCID"] for n in ("worker-0", "worker-1", "server-0",
                                                       "scheduler-0")] == ["0", "1", "2", "3"]
    assert found["server-0"]["env"]["LOCAL_RANK"] == "2"
    assert "RANK" not in found["scheduler-0"]["env"]


@pytest.mark.timeout(200)
@pytest.mark.parametrize("workers, servers, mode", [(1, 0, "nccl"), (2, 2, "dist_sync")])
def test_modes_are_exact_under_slurm(slurm, tmp_path, workers, servers, mode):
    out = tmp_path / "result.json"
    proc = in_allocation(slurm, workers + servers, "-n", str(workers), "-s", str(servers),
                         sys.executable, "-m", "bandwidth.measure", "--kv-store", mode,
                         "--cpus", "2" if mode == "nccl" else "1", "--json", str(out), *LENET)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert errors(proc.stdout) == ["0.000000"] * 3              # worker 0's lines
    result = json.loads(out.read_text())["results"][0]
    assert result["summary"]["error_max"] == 0.0 and result["config"]["kv_store"] == mode
    assert proc.stdout.count("# summary:") == 1


@pytest.mark.timeout(60)
def test_outside_an_allocation_is_one_fail_line(slurm):
    proc = run(slurm, sys.executable, "launch.py", "--launcher", "slurm", "-n", "2", "-s", "0",
               "true")
    assert proc.returncode == 2
    assert fail_lines(proc.stderr) == [
        "FAIL: slurm: not inside a Slurm allocation (SLURM_JOB_ID is not set): run launch.py "
        "under salloc or sbatch, e.g. salloc -n 2 python launch.py --launcher slurm ..."]


@pytest.mark.timeout(60)
def test_too_few_slots_is_one_fail_line(slurm):
    mark = marker()
    proc = in_allocation(slurm, 2, "-n", "2", "-s", "2", sys.executable, program("fail.py"),
                         mark, "--rank", "-1")
    assert proc.returncode == 2
    (line,) = fail_lines(proc.stderr)
    assert line.startswith("FAIL: slurm: the job needs 4 processes but allocation ")
    assert f"has 2 tasks ({NODE}): ask for more (salloc -n 4" in line
    assert alive(mark) == []


@pytest.mark.timeout(120)
def test_a_task_that_exits_fails_the_job_and_leaves_nothing(slurm):
    mark = marker()
    proc = in_allocation(slurm, 3, "-n", "2", "-s", "1", sys.executable, program("fail.py"),
                         mark, "--rank", "1", "--exit", "3", "--spawn")
    assert proc.returncode == 3, proc.stderr[-3000:]
    (line,) = fail_lines(proc.stderr)
    assert line.startswith(f"FAIL: worker 1 (rank 1) on {NODE}: exited with status 3 after ")
    assert "rank 1 failing on purpose" in proc.stderr.split(line, 1)[1]
    assert wait_until(lambda: alive(mark) == [], 15), alive(mark)


@pytest.mark.timeout(120)
def test_scancel_mid_run_is_one_fail_line_and_leaves_nothing(slurm):
    mark = marker()
    proc = subprocess.Popen(
        ["salloc", "-n", "3", sys.executable, "launch.py", "--launcher", "slurm", "-n", "2", "-s",
         "1", sys.executable, program("fail.py"), mark, "--rank", "-1", "--spawn"],
        cwd=ROOT, env=slurm.env(PYTHONPATH=str(ROOT)), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)
    try:
        # 3 tasks and 3 helpers running, then the job is cancelled from outside.
        assert wait_until(lambda: len(alive(mark)) >= 6, 60), alive(mark)
        jobs = slurm.jobs()
        assert len(jobs) == 1
        subprocess.run(["scancel", jobs[0]], env=slurm.env(), check=True, timeout=20)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode != 0
    (line,) = fail_lines(stderr)
    assert line.startswith(f"FAIL: slurm job {jobs[0]}: was cancelled (scancel, or its time "
                           f"limit): STEP {jobs[0]}.0 ON {NODE} CANCELLED AT "), stderr[-2000:]
    assert wait_until(lambda: alive(mark) == [], 15), alive(mark)
    assert wait_until(lambda: slurm.jobs() == [], 15)


@pytest.mark.timeout(90)
def test_a_worker_that_exits_mid_run_is_named_and_every_task_reported(slurm, tmp_path):
    report = tmp_path / "report.json"
    proc = in_allocation(slurm, 3, "-n", "2", "-s", "1", "--report", str(report),
                         sys.executable, program("worker_exits.py"), str(tmp_path),
                         sys.executable, "-m", "bandwidth.measure", "--kv-store", "dist_sync",
                         "--cpus", "1", "--num-batches", "100000", "--all-worker-lines",
                         *LENET[:-2], "--timeout", "30", timeout=80)
    assert proc.returncode == 1, proc.stderr[-3000:]
    (line,) = fail_lines(proc.stderr)
    assert line.startswith(f"FAIL: worker 1 (rank 1) on {NODE}: exited with status 1 after ")
    after = proc.stderr.split(line, 1)[1].splitlines()[1:]
    assert after[0].startswith("  then, as a consequence: ") or \
        after[0] == "  then: no other process failed"
    assert after[after.index(f"  last stderr lines of worker 1@{NODE}:") + 1] == \
        "    worker 1 exiting with status 1 on purpose, mid-run"
    doc = json.loads(report.read_text())
    got = [(p["role"], p["rank"], p["status"], p["root_cause"]) for p in doc["processes"]]
    assert got[1] == ("worker", 1, 1, True) and doc["root_cause"]["subject"] == \
        f"worker 1 (rank 1) on {NODE}"
    assert [g[:2] for g in got] == [("worker", 0), ("worker", 1), ("server", 2)]
    for other in (doc["processes"][0], doc["processes"][2]):
        assert other["consequence"] or other["stopped_by_launcher"], other
        assert other["subject"] in after[0] or other["stopped_by_launcher"]
    assert wait_until(lambda: alive(str(tmp_path)) == [], 15), alive(str(tmp_path))


@pytest.mark.timeout(60)
def test_a_task_killed_with_sigterm_is_named_and_the_others_stopped(slurm, tmp_path):
    mark = marker()
    report = tmp_path / "report.json"
    proc = in_allocation(slurm, 2, "-n", "2", "-s", "0", "--report", str(report),
                         sys.executable, program("fail.py"), mark, "--rank", "1", "--signal",
                         "SIGTERM", timeout=50)
    assert proc.returncode == 143, proc.stderr[-3000:]
    (line,) = fail_lines(proc.stderr)
    assert line.startswith(f"FAIL: worker 1 (rank 1) on {NODE}: was killed by SIGTERM after ")
    assert "  stopped 1 running process" in proc.stderr.split(line, 1)[1].splitlines()
    zero, one = json.loads(report.read_text())["processes"]
    assert (one["signal"], one["root_cause"], zero["stopped_by_launcher"], zero["failed"]) == \
        ("SIGTERM", True, True, False)
    assert wait_until(lambda: alive(mark) == [], 15), alive(mark)


@pytest.mark.timeout(150)
def test_the_sbatch_example_runs_a_parameter_server_mode(slurm, tmp_path):
    out = tmp_path / "job.out"
    proc = run(slurm, "sbatch", "--wait", "--nodes", "1", "--ntasks", "4", "--ntasks-per-node",
               "4", "--output", str(out), "examples/slurm.sbatch", "--kv-store", "dist_sync",
               "--cpus", "1", *LENET, timeout=140)
    text = out.read_text() if out.exists() else ""
    assert proc.returncode == 0, proc.stderr[-2000:] + text[-3000:]
    assert errors(text) == ["0.000000"] * 3                  # worker 0's 3 iterations
    assert "on each of 2 workers" in text and text.count("# summary:") == 1


@pytest.mark.timeout(120)
def test_sigterm_to_the_launcher_stops_the_step_and_leaves_nothing(slurm):
    """What sbatch's scancel does to a batch script's launcher, and a user's kill."""
    import os
    import signal
    from pathlib import Path

    mark = marker()
    proc = subprocess.Popen(
        ["salloc", "-n", "2", sys.executable, "launch.py", "--launcher", "slurm", "-n", "2", "-s",
         "0", sys.executable, program("fail.py"), mark, "--rank", "-1", "--spawn"],
        cwd=ROOT, env=slurm.env(PYTHONPATH=str(ROOT)), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)

    def processes(word: bytes, at: int | None = None) -> list[int]:
        found = []
        for pid in alive(mark):
            try:
                argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if (word in argv) if at is None else argv[at:at + 1] == [word]:
                found.append(pid)
        return found

    try:
        # Both tasks have started their helpers (python -c "...sleep(600)" MARK)
        assert wait_until(lambda: len(processes(b"-c")) == 2, 60), alive(mark)
        (pid,) = processes(b"launch.py", at=1)            # python launch.py ..., not salloc
        os.kill(pid, signal.SIGTERM)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 128 + signal.SIGTERM
    (line,) = fail_lines(stderr)
    assert line.startswith("FAIL: launcher: interrupted by SIGTERM after "), stderr[-2000:]
    assert wait_until(lambda: alive(mark) == [], 15), alive(mark)


def srun_failure(returncode: int, *srun_lines: str, task_lines=()):
    """SrunChild.failure() on srun's messages as they read, without running Slurm."""
    from types import SimpleNamespace

    from bandwidth.launch.contract.environment import Job
    from bandwidth.launch.launchers.slurm import SrunChild

    job = Job(2, 0, "10.0.0.1", 29500, 29500, "slurm")
    child = SrunChild(["srun"], {}, [job.role(0, "a", (0, 1)), job.role(1, "b", (0, 1))], "/",
                      job_id="7")
    child.proc = SimpleNamespace(returncode=returncode)
    child.own.extend(srun_lines)
    for task, line in task_lines:
        child.rank_line(task, line)
    return child.failure()


def test_srun_messages_name_the_task_at_fault():
    # The task that exited with a status, not those --kill-on-bad-exit then terminated.
    failure = srun_failure(3, "srun: error: a: task 0: Terminated",
                           "srun: error: b: task 1: Exited with exit code 3")
    assert (failure.subject, failure.what, failure.exit_code) == \
        ("worker 1 (rank 1) on b", "exited with status 3", 3)
    failure = srun_failure(137, "srun: error: b: task 1: Killed",
                           "srun: error: a: tasks 0: Terminated")
    assert (failure.subject, failure.what, failure.exit_code) == \
        ("worker 1 (rank 1) on b", "was killed by SIGKILL", 137)
    failure = srun_failure(143, "srun: error: a: tasks 0-1: Terminated", task_lines=[
        (0, "slurmstepd-a: error: *** STEP 7.0 ON a CANCELLED AT 2026-11-23T23:24:16 ***")])
    assert (failure.subject, failure.exit_code) == ("slurm job 7", 143)
    assert failure.what == ("was cancelled (scancel, or its time limit): STEP 7.0 ON a "
                            "CANCELLED AT 2026-11-23T23:24:16")
    failure = srun_failure(1, "srun: error: Unable to create step for job 7: Invalid node name")
    assert (failure.subject, failure.what) == ("srun", "exited with status 1")
