"""A one-off probe (issue 27): do a host's own egress-queue drops cost TCP retransmissions or
timeouts? N = 1, 8, 50 connections from h1 to h2 of a 2-host lab, 200 MB in all at once; h1's own
counters (bandwidth.hardware.linkcounters) and the bridge port's drops into h2. Root.

    flock /tmp/heavy.lock python3 benchmarks/probes/local_drops.py 1gbit
"""
import json, subprocess, sys, time
from pathlib import Path
ROOT = str(Path(__file__).resolve().parents[2])
sys.path.insert(0, ROOT)
from bandwidth.netlab import lab as labmod
from bandwidth.netlab.cli import up

RECV = r'''
import socket, sys, threading
n = int(sys.argv[2]); srv = socket.create_server((sys.argv[1], 45116), backlog=256)
print("ready", flush=True)
def drain(c):
    while c.recv(1 << 20): pass
    c.close()
ts = []
for _ in range(n):
    c, _ = srv.accept(); t = threading.Thread(target=drain, args=(c,)); t.start(); ts.append(t)
for t in ts: t.join()
print("done", flush=True)
'''
SEND = r'''
import json, socket, sys, threading, time
sys.path.insert(0, sys.argv[4])
from bandwidth.hardware.linkcounters import snapshot, difference
n, mb = int(sys.argv[2]), float(sys.argv[3])
conns = [socket.create_connection((sys.argv[1], 45116)) for _ in range(n)]
block = b"x" * int(mb * 1e6)
before = snapshot(); t0 = time.perf_counter()
def go(c):
    c.sendall(block); c.shutdown(socket.SHUT_WR); c.recv(1)
ts = [threading.Thread(target=go, args=(c,)) for c in conns]
for t in ts: t.start()
for t in ts: t.join()
dt = time.perf_counter() - t0
d = difference(before, snapshot(), 1)
print(json.dumps({"n": n, "s": dt, "gbit": n * mb * 8e6 / dt / 1e9, **{k: d.get(k) for k in ("drops", "retrans_segs", "timeouts", "out_segs")}}))
'''
name, rate = "ldx", sys.argv[1] if len(sys.argv) > 1 else "1gbit"
labmod.remove(name)
lab = up(name, 2, rate, subnet="198.18.116.0/24")
try:
    h1, h2 = lab.hosts
    for n in (1, 8, 50):
        port0 = labmod.inbound_drops(lab)
        r = subprocess.Popen(["ip", "netns", "exec", h2.namespace, sys.executable, "-c", RECV, h2.address, str(n)], stdout=subprocess.PIPE, text=True)
        assert r.stdout.readline().strip() == "ready"
        out = subprocess.run(["ip", "netns", "exec", h1.namespace, sys.executable, "-c", SEND, h2.address, str(n), str(200 / n), ROOT], capture_output=True, text=True, timeout=300)
        r.wait(timeout=60)
        port1 = labmod.inbound_drops(lab)
        print(out.stdout.strip() or out.stderr[-500:], "bridge drops into h2:", port1[h2.address] - port0[h2.address], flush=True)
finally:
    labmod.remove(name)
