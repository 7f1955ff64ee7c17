"""No per-device rank outlives its run: SIGTERM, SIGKILL and Ctrl-C to measure.py and the launcher.

Real processes and real signals. A rank (``python -m bandwidth.execution.rank``) is found as a
descendant
of the process under test; after the signal every one of them must be gone within seconds, and
measure.py's temporary folder (TMPDIR points at the test's own) must be empty.
"""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.timeout(180)

LONG_RUN = ["--cpus", "2", "--network", "mlp", "--image-shape", "1,28,28", "--num-classes", "10",
            "--num-batches", "100000000", "--no-reference"]


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            ppid = int(stat[stat.rfind(")") + 2:].split()[1])
            tree.setdefault(ppid, []).append(int(entry))
    return tree


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def ranks_under(pid: int) -> list[int]:
    """Every ``bandwidth.execution.rank`` process descending from ``pid``."""
    tree, found, todo = _children(), [], [pid]
    while todo:
        for child in tree.get(todo.pop(), []):
            todo.append(child)
            if "bandwidth.execution.rank" in _cmdline(child):
                found.append(child)
    return found


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2:][:1] != "Z"


@pytest.fixture
def seen():
    """Every rank a test saw; whatever is still alive at the end is killed (on the old code,
    where they survive, as well), so that a failing test leaves nothing running."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        if alive(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


def wait_for_ranks(proc: subprocess.Popen, count: int, seen: list[int],
                   timeout_s: float = 90) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = ranks_under(proc.pid)
        seen += [p for p in found if p not in seen]
        if len(found) >= count:
            time.sleep(3.0)          # let them get past their imports into the run
            found = ranks_under(proc.pid)
            seen += [p for p in found if p not in seen]
            return found
        if proc.poll() is not None:
            break
        time.sleep(0.2)
    proc.kill()
    proc.wait()
    pytest.fail(f"{count} ranks never appeared; exit {proc.returncode}; stderr: "
                f"{proc.stderr_path.read_text()[-2000:]}")


def assert_all_gone(pids: list[int], within_s: float = 10.0) -> None:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.1)
    left = [p for p in pids if alive(p)]
    assert not left, f"ranks still running {within_s} s after the signal: {left}"


def start(argv: list[str], tmp_path: Path) -> subprocess.Popen:
    """``argv`` with TMPDIR at ``tmp_path/tmp`` and its output in files (a pipe would be held
    open by a surviving rank)."""
    (tmp_path / "tmp").mkdir()
    env = dict(os.environ, PYTHONPATH=str(ROOT), TMPDIR=str(tmp_path / "tmp"),
               PYTHONUNBUFFERED="1")
    with open(tmp_path / "stdout", "w") as out, open(tmp_path / "stderr", "w") as err:
        proc = subprocess.Popen([sys.executable] + argv, cwd=ROOT, env=env, text=True,
                                stdin=subprocess.DEVNULL, stdout=out, stderr=err)
    proc.stderr_path = tmp_path / "stderr"
    return proc


def finish(proc: subprocess.Popen, timeout_s: float = 30) -> tuple[int, str]:
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        pytest.fail(f"did not exit within {timeout_s} s of the signal: "
                    f"{proc.stderr_path.read_text()[-2000:]}")
    return proc.returncode, proc.stderr_path.read_text()


def no_temporary_files(tmp_path: Path) -> bool:
    return list((tmp_path / "tmp").iterdir()) == []


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_measure_nccl_stopped_by_a_signal_leaves_no_rank_and_no_folder(tmp_path, sig, seen):
    proc = start(["bandwidth/measure.py", "--kv-store", "nccl"] + LONG_RUN, tmp_path)
    ranks = wait_for_ranks(proc, 2, seen)
    proc.send_signal(sig)
    code, err = finish(proc)
    assert_all_gone(ranks)
    assert no_temporary_files(tmp_path)
    assert code == 128 + sig, err[-2000:]
    assert err.strip().splitlines()[-1].startswith("measure.py: "), err[-2000:]


def test_measure_nccl_killed_leaves_no_rank_and_no_folder(tmp_path, seen):
    proc = start(["bandwidth/measure.py", "--kv-store", "nccl"] + LONG_RUN, tmp_path)
    ranks = wait_for_ranks(proc, 2, seen)
    proc.kill()
    finish(proc)
    assert_all_gone(ranks)
    assert no_temporary_files(tmp_path)


def _launch_dist_nccl(tmp_path: Path) -> subprocess.Popen:
    return start(["launch.py", "-n", "2", "-s", "0", "--timeout", "60", sys.executable,
                  "bandwidth/measure.py", "--kv-store", "dist_nccl"] + LONG_RUN, tmp_path)


def test_launcher_ctrl_c_stops_every_rank_of_dist_nccl(tmp_path, seen):
    proc = _launch_dist_nccl(tmp_path)
    ranks = wait_for_ranks(proc, 4, seen)
    proc.send_signal(signal.SIGINT)
    code, err = finish(proc)
    assert_all_gone(ranks)
    assert no_temporary_files(tmp_path)
    assert code == 130, err[-2000:]
    assert "FAIL: launcher: interrupted by SIGINT" in err


def test_killed_worker_of_dist_nccl_takes_its_ranks_and_the_job_down(tmp_path, seen):
    proc = _launch_dist_nccl(tmp_path)
    ranks = wait_for_ranks(proc, 4, seen)
    workers = [p for p in _children().get(proc.pid, []) if "measure.py" in _cmdline(p)]
    assert len(workers) == 2
    os.kill(workers[1], signal.SIGKILL)
    code, err = finish(proc, timeout_s=60)
    assert_all_gone(ranks)
    assert no_temporary_files(tmp_path)
    assert code != 0
    assert "FAIL: worker 1 (rank 1)" in err and "SIGKILL" in err, err[-2000:]
