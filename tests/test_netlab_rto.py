"""A lab with a lowered TCP rto_min (``netlab up --rto-min``) and the retransmission timeouts
the link counters read: a real TCP stream between two namespace hosts whose link into the
receiver goes down for a moment, so that the sender waits out timeouts, counted in its own
namespace's kernel counters.

Needs root, ip, tc and sshd; skipped with the reason otherwise. The lab is removed on every
exit path.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from launch_support import netlab_for_tests

from bandwidth.netlab import lab as labmod

ROOT = Path(__file__).resolve().parent.parent
NAME = "bwrto"
SUBNET = "198.18.117.0/24"

pytestmark = pytest.mark.timeout(120)

RECEIVE = """
import socket, sys
server = socket.create_server((sys.argv[1], 45117))
print("ready", flush=True)
conn, _ = server.accept()
total = 0
while True:
    data = conn.recv(1 << 20)
    if not data:
        break
    total += len(data)
print(total, flush=True)
"""

SEND = """
import json, socket, sys, time
from bandwidth.hardware.linkcounters import difference, snapshot
before = snapshot()
conn = socket.create_connection((sys.argv[1], 45117))
block, sent, end = b"x" * 65536, 0, time.monotonic() + float(sys.argv[2])
while time.monotonic() < end:
    conn.sendall(block)
    sent += len(block)
conn.shutdown(socket.SHUT_WR)
conn.recv(1)                      # the receiver's close: everything was acknowledged
print(json.dumps({"sent": sent, "counters": difference(before, snapshot(), 1)}), flush=True)
"""


@pytest.fixture(scope="module")
def lab():
    with netlab_for_tests(NAME, 2, "100mbit", subnet=SUBNET, rto_min_ms=20) as made:
        yield made


def test_every_host_route_carries_the_rto_min(lab):
    for host in lab.hosts:
        routes = subprocess.run(["ip", "-n", host.namespace, "-o", "route", "show"],
                                capture_output=True, text=True, check=True).stdout
        assert f"{SUBNET} dev {host.interface}" in routes and "rto_min lock 20ms" in routes
    status = subprocess.run([sys.executable, "-m", "bandwidth.netlab", "status", "--name", NAME],
                            cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert "TCP's rto_min 20 ms" in status.stdout.splitlines()[0]


def test_a_stalled_link_shows_as_the_senders_timeouts(lab):
    sender, receiver = lab.hosts
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    recv = subprocess.Popen(["ip", "netns", "exec", receiver.namespace, sys.executable, "-c",
                             RECEIVE, receiver.address], stdout=subprocess.PIPE, text=True,
                            env=env)
    try:
        assert recv.stdout.readline().strip() == "ready"
        send = subprocess.Popen(["ip", "netns", "exec", sender.namespace, sys.executable, "-c",
                                 SEND, receiver.address, "2.5"], stdout=subprocess.PIPE,
                                text=True, env=env, cwd=ROOT)
        try:
            time.sleep(1.0)
            # The receiver's link goes down for 0.4 s: whatever was in flight is lost with no
            # later segment to reveal it, and the sender's timer fires, again and again.
            labmod.sh("ip", "link", "set", receiver.port, "down")
            time.sleep(0.4)
        finally:
            labmod.sh("ip", "link", "set", receiver.port, "up")
        out, _ = send.communicate(timeout=60)
        received = int(recv.communicate(timeout=30)[0].strip())
    finally:
        for proc in (recv, locals().get("send")):
            if proc is not None and proc.poll() is None:
                proc.kill()
    done = json.loads(out)
    assert received == done["sent"] > 0          # nothing lost in the end
    counters = done["counters"]
    assert counters["rto_min_ms"] == 20
    assert counters["timeouts"] >= 1 and counters["retrans_segs"] >= counters["timeouts"]
