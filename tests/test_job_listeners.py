"""Every socket a one-host job listens on is on loopback (the launcher's gate and its private
store, measure.py's per-device ranks' store, every rank's store relay and Gloo listeners), and
none of them serves a key to another program of this host.

torch's TCPStore server binds every interface whatever host it is given, so the store behind the
gate once listened on ``*:PORT`` beside it, and on loopback it served every user of the host
(issue "Trust"). The job's processes are found as the descendants of the command this test
starts, their listening sockets through /proc.
"""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from launch_support import descendants

ROOT = Path(__file__).resolve().parent.parent
SMALL = ["--network", "mlp", "--image-shape", "1,28,28", "--num-classes", "10"]


def _socket_inodes(pids: set[int]) -> set[str]:
    inodes = set()
    for pid in pids:
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
        except OSError:
            continue
    return inodes


def _listening(inodes: set[str]) -> list[tuple[str, int]]:
    """(address, port) of every TCP socket in LISTEN (state 0A) among ``inodes``."""
    found = []
    for table, width in (("/proc/net/tcp", 8), ("/proc/net/tcp6", 32)):
        with open(table) as rows:
            next(rows)
            for row in rows:
                fields = row.split()
                if fields[3] != "0A" or fields[9] not in inodes:
                    continue
                address, port = fields[1].split(":")
                found.append((_address(address, width), int(port, 16)))
    return found


def _address(hexed: str, width: int) -> str:
    import ipaddress
    raw = bytes.fromhex(hexed)
    if width == 8:
        return str(ipaddress.IPv4Address(raw[::-1]))
    words = b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4))
    return str(ipaddress.IPv6Address(words))


def _is_loopback(address: str) -> bool:
    import ipaddress
    ip = ipaddress.ip_address(address)
    if getattr(ip, "ipv4_mapped", None):
        ip = ip.ipv4_mapped
    return ip.is_loopback


JOBS = {
    "launch.py local dist_sync": [sys.executable, "launch.py", "-n", "2", "-s", "1", "--launcher",
                                  "local", sys.executable, "bandwidth/measure.py", "--kv-store",
                                  "dist_sync", "--cpus", "2", *SMALL, "--num-batches", "100000"],
    "measure.py nccl ranks": [sys.executable, "bandwidth/measure.py", "--kv-store", "nccl",
                              "--cpus", "2", *SMALL, "--num-batches", "100000"],
}


# A stranger: torch's own store client, from a process that is not the job's, at every listener
# at once (threads), each given STRANGER_S to connect and count the keys.
STRANGER_S = 3
STRANGER = """
import sys, threading
from datetime import timedelta
from torch.distributed import TCPStore
def try_one(address, port):
    try:
        store = TCPStore(address, port, is_master=False, timeout=timedelta(seconds=%d))
        print(f"SERVED {address}:{port} {store.num_keys()} keys", flush=True)
    except Exception as err:
        print(f"refused {address}:{port}: {type(err).__name__}", flush=True)
threads = [threading.Thread(target=try_one, args=(a, int(p))) for a, p in
           (w.rsplit(":", 1) for w in sys.argv[1:])]
for t in threads: t.start()
for t in threads: t.join()
""" % STRANGER_S


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", sorted(JOBS))
def test_a_one_host_job_listens_on_loopback_only_and_serves_no_stranger(kind):
    job = subprocess.Popen(JOBS[kind], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, start_new_session=True)
    try:
        listeners: list[tuple[str, int]] = []
        for line in job.stdout:                 # mid-run: once the first iteration is printed
            if line.startswith("iter "):
                listeners = _listening(_socket_inodes({job.pid} | descendants(job.pid)))
                break
        else:
            pytest.fail(f"{kind}: no iteration printed (exit {job.wait()})")
        assert len(listeners) >= 3, listeners   # the gate, the store and the ranks' listeners
        public = [(address, port) for address, port in listeners if not _is_loopback(address)]
        assert not public, f"{kind} listens beyond loopback: {public}"
        # A listener that is not a store may take the connection and never answer: the
        # stranger is stopped after a while, and what it was not served by then, it never got.
        stranger = subprocess.Popen([sys.executable, "-c", STRANGER] +
                                    [f"{address}:{port}" for address, port in listeners],
                                    stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        try:
            answers = stranger.communicate(timeout=STRANGER_S + 12)[0]
        except subprocess.TimeoutExpired:
            stranger.kill()
            answers = stranger.communicate()[0]
        assert "refused" in answers, answers
        served = [a for a in answers.splitlines() if a.startswith("SERVED")]
        assert not served, f"{kind} served a stranger: {served}"
    finally:
        os.killpg(job.pid, signal.SIGTERM)
        try:
            job.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()
        time.sleep(0.1)
