"""Probe: why does the host-memory copy rate (bounds.host_copy_gbps, the ceiling of the device
mode on CPU devices) move by 2x from one process to the next on a many-core host? Each of N fresh
processes times 102 MB torch copies in several ways; one line per process and way.

    python3 benchmarks/probes/host_copy_probe.py [N]
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

CHILD = r"""
import sys, time, torch
sys.path.insert(0, sys.argv[1])
from bandwidth.ceiling.bounds import host_copy_gbps
n = 102_015_648
def times(k, a, b):
    out = []
    for _ in range(k):
        t = time.perf_counter(); b.copy_(a); out.append(time.perf_counter() - t)
    return out
g = lambda t: n / t / 1e9
line = [f"threads={torch.get_num_threads()}", f"now={host_copy_gbps(n):.1f}"]
a = torch.ones(n // 4); b = torch.empty_like(a)
seq = times(60, a, b)
line.append("seq60: first5min=%.1f min=%.1f med=%.1f last20med=%.1f" % (
    g(min(seq[1:6])), g(min(seq)), g(sorted(seq)[30]), g(sorted(seq[40:])[10])))
t0 = time.perf_counter()
while time.perf_counter() - t0 < 0.2:
    b.copy_(a)
seq = times(20, a, b)
line.append("after0.2s-spin: min=%.1f med=%.1f" % (g(min(seq)), g(sorted(seq)[10])))
for k in (1, 2, 4, 8, 16):
    torch.set_num_threads(k)
    seq = times(15, a, b)
    line.append(f"t{k}={g(min(seq)):.1f}")
torch.set_num_threads(int(sys.argv[2]))
c = torch.ones(n // 4); d = torch.ones(n // 4)
seq = times(20, c, d)
line.append("fresh-touched-pair min=%.1f" % g(min(seq)))
print(" ".join(line), flush=True)
"""


def main() -> int:
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 8
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    for path in ("/sys/kernel/mm/transparent_hugepage/enabled",
                 "/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor"):
        try:
            print(path, open(path).read().strip())
        except OSError as exc:
            print(path, exc.strerror)
    info = subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines()
    print("\n".join(x for x in info if x.split(":")[0] in (
        "Model name", "Socket(s)", "Core(s) per socket", "Thread(s) per core", "NUMA node(s)",
        "CPU(s)", "L3", "NUMA node0 CPU(s)", "NUMA node1 CPU(s)", "Hypervisor vendor")))
    print("loadavg", open("/proc/loadavg").read().strip())
    threads = os.cpu_count() or 1
    for i in range(count):
        start = time.perf_counter()
        out = subprocess.run([sys.executable, "-c", CHILD, root, str(threads)],
                             capture_output=True, text=True, timeout=120)
        print(f"proc {i + 1} ({time.perf_counter() - start:.1f} s): "
              f"{out.stdout.strip() or out.stderr.strip()[-300:]}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
