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


def local_job(mode: str, servers: str) -> list[str]:
    return [sys.executable, "launch.py", "-n", "2", "-s", servers, "--launcher", "local",
            sys.executable, "bandwidth/measure.py", "--kv-store", mode, "--cpus", "2", *SMALL,
            "--num-batches", "100000"]


# Each kind of listener a one-host job opens: parameter servers (dist_sync; dist_async's are the
# same), per-device ranks behind a worker with servers (dist_sync_device; dist_async_device's are
# the same) and without (dist_nccl), and measure.py's own per-device ranks.
JOBS = {
    "launch.py local dist_sync": local_job("dist_sync", "1"),
    "launch.py local dist_sync_device": local_job("dist_sync_device", "1"),
    "launch.py local dist_nccl": local_job("dist_nccl", "0"),
    "measure.py nccl ranks": [sys.executable, "bandwidth/measure.py", "--kv-store", "nccl",
                              "--cpus", "2", *SMALL, "--num-batches", "100000"],
}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", sorted(JOBS))
def test_a_one_host_job_listens_on_loopback_only_and_serves_no_stranger(kind):
    listeners = audit_one_host_job(JOBS[kind], kind)
    assert len(listeners) >= 3, listeners   # the gate, the store and the ranks' listeners
