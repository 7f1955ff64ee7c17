"""A process whose heartbeat thread is inside a store call when the program ends exits with its
own status, not SIGABRT (CI saw "terminate called without an active exception", status 134, from
a lab worker that had finished its work)."""

import subprocess
import sys

import pytest

from conftest import ROOT

PROGRAM = """
import sys, time
from datetime import timedelta
from torch.distributed import TCPStore
from bandwidth.launch.contract.heartbeat import Heartbeat
master = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                  timeout=timedelta(seconds=10))
# An interval this short keeps the thread in the store nearly all the time.
Heartbeat.start("127.0.0.1", master.port, "", rank=0, interval_s=1e-6, gated=False)
time.sleep(0.3)
print("done", flush=True)
sys.exit(int(sys.argv[1]))
"""


@pytest.mark.timeout(120)
@pytest.mark.parametrize("status", [0, 3])
def test_a_beating_process_exits_with_its_own_status(status):
    for _ in range(3):
        proc = subprocess.run([sys.executable, "-c", PROGRAM, str(status)], cwd=ROOT,
                              capture_output=True, text=True, timeout=60)
        assert (proc.returncode, proc.stdout) == (status, "done\n"), proc.stderr[-2000:]
        assert "terminate called" not in proc.stderr


STORE = """
import time
from datetime import timedelta
from torch.distributed import TCPStore
master = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                  timeout=timedelta(seconds=10))
print(master.port, flush=True)
time.sleep(300)
"""

BEATING = """
import sys, time
from bandwidth.launch.contract.heartbeat import Heartbeat
Heartbeat.start("127.0.0.1", int(sys.argv[1]), "", rank=0, interval_s=0.5, gated=False,
                prog="beating")
print("beating", flush=True)
time.sleep(120)
"""


@pytest.mark.timeout(120)
def test_a_store_that_stops_answering_ends_the_process_within_the_beats():
    """A store that takes the beat and never answers (its process stopped: the kernel still
    accepts, as over a link cut mid-run) is the launcher gone: torch's client would wait without
    end, so the heartbeat's watch ends the process after LAUNCHER_GONE_BEATS seconds."""
    import signal
    import time
    from bandwidth.launch.contract.heartbeat import LAUNCHER_GONE_BEATS
    store = subprocess.Popen([sys.executable, "-c", STORE], cwd=ROOT, stdout=subprocess.PIPE,
                             text=True)
    try:
        port = store.stdout.readline().strip()
        beating = subprocess.Popen([sys.executable, "-c", BEATING, port], cwd=ROOT,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert beating.stdout.readline() == "beating\n"
        time.sleep(1.0)
        store.send_signal(signal.SIGSTOP)
        stopped = time.monotonic()
        _, err = beating.communicate(timeout=60)
        took_s = time.monotonic() - stopped
    finally:
        store.kill()
        store.wait()
    assert beating.returncode == 1, err[-2000:]
    assert "beating: error: the launcher is gone" in err, err[-2000:]
    assert took_s < LAUNCHER_GONE_BEATS * 1.0 + 15, took_s     # + 15: a loaded 2-core machine
