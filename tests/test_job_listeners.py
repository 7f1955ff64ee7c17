"""Every socket a one-host job listens on is on loopback (the launcher's gate and its private
store, measure.py's per-device ranks' store, every rank's store relay and Gloo listeners), and
none of them serves a key to another program of this host.

torch's TCPStore server binds every interface whatever host it is given, so the store behind the
gate once listened on ``*:PORT`` beside it, and on loopback it served every user of the host
(issue "Trust"). The job's processes are found as the descendants of the command this test
starts, their listening sockets through /proc.
"""

import sys
from pathlib import Path

import pytest
from socket_audit import audit_one_host_job

ROOT = Path(__file__).resolve().parent.parent
SMALL = ["--network", "mlp", "--image-shape", "1,28,28", "--num-classes", "10", "--no-reference"]


JOBS = {
    "launch.py local dist_sync": [sys.executable, "launch.py", "-n", "2", "-s", "1", "--launcher",
                                  "local", sys.executable, "bandwidth/measure.py", "--kv-store",
                                  "dist_sync", "--cpus", "2", *SMALL, "--num-batches", "100000"],
    "measure.py nccl ranks": [sys.executable, "bandwidth/measure.py", "--kv-store", "nccl",
                              "--cpus", "2", *SMALL, "--num-batches", "100000"],
}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", sorted(JOBS))
def test_a_one_host_job_listens_on_loopback_only_and_serves_no_stranger(kind):
    listeners = audit_one_host_job(JOBS[kind], kind)
    assert len(listeners) >= 3, listeners   # the gate, the store and the ranks' listeners
