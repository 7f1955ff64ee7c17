"""Ctrl-C and a reader that goes away end every command quietly (bandwidth.cliexit): 130 after
Ctrl-C, with one line and nothing left running; 141 (128 + SIGPIPE) with no traceback when stdout
closes early (``| head -1``). Real processes; Ctrl-C is SIGINT to the command's process group, as
a terminal sends it."""

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from resultdocs import make_document, make_result

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.timeout(120)
TINY_CEILING = ["-m", "bandwidth.ceiling", "--cpus", "2", "-b", "64K", "-e", "64K", "--mb", "1",
                "--p2p-mb", "1", "--repeats", "1", "-n", "2", "-w", "1"]


def _marked_env() -> tuple[dict, str]:
    mark = uuid.uuid4().hex
    return dict(os.environ, PYTHONPATH=str(ROOT), BANDWIDTH_TEST_MARK=mark), mark


def _left(mark: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if mark.encode() in Path(f"/proc/{entry}/environ").read_bytes():
                    found.append(int(entry))
            except OSError:
                pass
    return found


def _ctrl_c(argv: list[str], when) -> tuple[int, str, str]:
    env, mark = _marked_env()
    proc = subprocess.Popen([sys.executable, *argv], cwd=ROOT, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        when(proc)
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    deadline = time.monotonic() + 10
    while _left(mark) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _left(mark) == []
    return proc.returncode, out, err


def test_ctrl_c_while_measure_imports_torch():
    code, _, err = _ctrl_c([str(ROOT / "bandwidth" / "measure.py"), "--cpus", "2"],
                           lambda proc: time.sleep(0.4))
    assert (code, err) == (130, "measure.py: interrupted\n")


def test_ctrl_c_during_the_ceilings_collectives():
    def in_collectives(proc):
        for line in proc.stderr:          # the progress lines
            if "collectives" in line:
                time.sleep(1.0)           # the ranks are up and exchanging
                return
        pytest.fail("the ceiling never reached its collectives")

    code, _, err = _ctrl_c(TINY_CEILING + ["-e", "64M", "-n", "50"], in_collectives)
    assert code == 130, err
    assert "Traceback" not in err and err.strip().splitlines()[-1] == \
        "python -m bandwidth.ceiling: interrupted", err


def test_compare_into_head_ends_141_without_a_traceback(tmp_path):
    doc = make_document([make_result(network=f"net-{i}") for i in range(1500)])
    (tmp_path / "many.json").write_text(json.dumps(doc))
    script = (f"{sys.executable} -m bandwidth.compare {tmp_path / 'many.json'} 2>{tmp_path}/err "
              "| head -1; echo \"status ${PIPESTATUS[0]}\"")
    done = subprocess.run(["bash", "-c", script], cwd=ROOT, capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=100)
    first, status = done.stdout.splitlines()
    assert status == "status 141", (tmp_path / "err").read_text()[-2000:]
    assert (tmp_path / "err").read_text() == ""
    assert first.strip()


def test_the_ceiling_into_head_does_not_pretend_success(tmp_path):
    script = (f"{sys.executable} {' '.join(TINY_CEILING)} 2>{tmp_path}/err | head -1; "
              "echo \"status ${PIPESTATUS[0]}\"")
    done = subprocess.run(["bash", "-c", script], cwd=ROOT, capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=100)
    first, status = done.stdout.splitlines()
    err = (tmp_path / "err").read_text()
    assert first.startswith("# ceilings on ")
    assert status == "status 141", err[-2000:]
    assert "Traceback" not in err and "Broken pipe" not in err
