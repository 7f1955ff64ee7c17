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
