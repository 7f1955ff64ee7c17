"""The sweep's progress bar and a long wait's stages: one line per finished configuration (or stage) where stderr is no terminal (CI
logs), a bar rewritten in place with \\r on a terminal."""

import io
import os
import pty
import select
import subprocess

import pytest
from launch_support import PYTHON, ROOT, launch_env

from bandwidth.progress import Progress, Stages, bar


def test_the_bar_fills_from_an_arrow_to_full():
    assert bar(0, 8, width=8) == "[>       ] 0/8"
    assert bar(3, 8, width=8) == "[===>    ] 3/8"
    assert bar(8, 8, width=8) == "[========] 8/8"


def test_without_a_terminal_each_configuration_is_one_line():
    out = io.StringIO()             # isatty() is False
    progress = Progress(2, out)
    progress.start(0, "local flat 1M cpu x2")          # nothing: a log wants finished lines only
    progress.finish(1, "local flat 1M cpu x2: 2.5 GB/sec per gpu")
    progress.start(1, "nccl flat 1M cpu x2")
    progress.finish(2, "nccl flat 1M cpu x2: 0.3 GB/sec per gpu")
    progress.close()
    assert out.getvalue() == (f"{bar(1, 2)} local flat 1M cpu x2: 2.5 GB/sec per gpu\n"
                              f"{bar(2, 2)} nccl flat 1M cpu x2: 0.3 GB/sec per gpu\n")


def test_on_a_terminal_the_bar_is_rewritten_in_place():
    out = io.StringIO()
    progress = Progress(2, out, tty=True)
    progress.start(0, "local flat 1M cpu x2")
    progress.finish(1, "local: 2.5")
    progress.finish(2, "nccl: 0.3")
    progress.close()
    text = out.getvalue()
    assert "\n" not in text[:-1] and text.endswith("\n")     # one line, ended once
    frames = text[:-1].split("\r")[1:]
    assert frames[0] == f"{bar(0, 2)} local flat 1M cpu x2 ..."
    # a shorter frame is padded with blanks over what the longer one left on the screen
    assert frames[1] == f"{bar(1, 2)} local: 2.5".ljust(len(frames[0]))
    assert frames[2].rstrip() == f"{bar(2, 2)} nccl: 0.3"


# ----- Stages: what a long wait is doing (bandwidth.progress.Stages) -----

class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_without_a_terminal_a_stage_is_one_line_once_silent_for_ten_seconds():
    out, clock = io.StringIO(), Clock()
    stages = Stages(stream=out, clock=clock)
    stages.enter("setting up")
    clock.now = 9.5
    stages.tick()
    assert out.getvalue() == ""                        # quiet runs print nothing more
    clock.now = 10.0
    stages.tick()
    clock.now = 30.0
    stages.tick()                                      # one line per stage, however long
    assert out.getvalue() == "# setting up ... 10 s\n"
    stages.enter("warming up")                # silent since the last line: said at once
    clock.now = 39.0
    stages.tick()
    stages.said()                             # an iteration's line: the silence starts again
    stages.enter("checking")
    clock.now = 48.0
    stages.tick()
    clock.now = 49.0
    stages.tick()
    stages.close()
    assert out.getvalue().splitlines() == ["# setting up ... 10 s", "# warming up ... 9 s",
                                           "# checking ... 10 s"]


def test_on_a_terminal_a_stage_is_rewritten_in_place_and_cleared_before_other_output():
    out, clock = io.StringIO(), Clock()
    joined = [3]
    stages = Stages(stream=out, tty=True, clock=clock)
    stages.enter(lambda: f"joining: {joined[0]} of 4", 3, 4)
    clock.now = 10.0
    stages.tick()
    clock.now = 11.0
    joined[0] = 4
    stages.tick()
    stages.said()
    frames = out.getvalue().split("\r")[1:]
    assert frames[0] == f"{bar(3, 4)} joining: 3 of 4 ... 10 s"
    assert frames[1].rstrip() == f"{bar(3, 4)} joining: 4 of 4 ... 11 s"
    assert frames[2] == " " * len(frames[1]) and frames[3] == ""      # blanked, back to column 0
    stages.close()
    assert "\n" not in out.getvalue()


def test_quiet_stages_never_speak():
    out = io.StringIO()
    stages = Stages.quiet()
    stages._progress.stream = out
    stages.enter("anything")
    stages.tick()
    assert out.getvalue() == ""


# ----- a real distributed run on loopback with a server that starts 12 s late -----

LATE_SERVER = ('if [ "$DMLC_ROLE" = server ]; then sleep 12; fi; exec "$0" '
               'bandwidth/measure.py --kv-store dist_sync --cpus 1 --network mlp '
               '--image-shape 1,28,28 --num-classes 10 --num-batches 2 --no-reference')


def late_server_launch() -> list[str]:
    return [PYTHON, str(ROOT / "launch.py"), "-n", "1", "-s", "1", "--launcher", "local",
            "sh", "-c", LATE_SERVER, PYTHON]


@pytest.mark.timeout(60)
def test_a_late_server_is_said_by_the_launcher_and_worker_0_without_a_terminal():
    done = subprocess.run(late_server_launch(), cwd=ROOT, env=launch_env(), capture_output=True,
                          text=True, timeout=55)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "iter 2," in done.stdout
    lines = done.stderr.splitlines()
    joining = [line for line in lines if line.startswith("# joining: 1 of 2 processes in the "
                                                         "rendezvous ... ")]
    assert len(joining) == 1, done.stderr[-2000:]             # one line for the stage
    assert any(line.startswith("[worker 0@127.0.0.1] # setting up: the Gloo group of 1 workers "
                               "and 1 servers ... ") for line in lines), done.stderr[-2000:]
    assert "\r" not in done.stderr


@pytest.mark.timeout(60)
def test_a_late_server_shows_the_launchers_bar_on_a_terminal():
    master, slave = pty.openpty()
    try:
        proc = subprocess.Popen(late_server_launch(), cwd=ROOT, env=launch_env(),
                                stdout=subprocess.PIPE, stderr=slave)
        os.close(slave)
        seen = bytearray()
        while True:
            ready, _, _ = select.select([master], [], [], 55)
            if not ready:
                break
            try:
                chunk = os.read(master, 4096)
            except OSError:                                   # EIO: the launcher is done
                break
            if not chunk:
                break
            seen += chunk
        out, _ = proc.communicate(timeout=30)
    finally:
        os.close(master)
    text = seen.decode(errors="replace")
    assert proc.returncode == 0, text[-2000:]
    assert b"iter 2," in out
    frames = [frame for frame in text.split("\r") if "joining: 1 of 2 processes" in frame]
    assert frames, text[-2000:]                     # rewritten in place, one frame a tick
    assert "# joining" not in text                             # a bar, not a line
