"""One measured run on a lab (``bandwidth.netlab``): launch.py over a chosen set of the lab's hosts,
measure.py's JSON read back. Shared by the calibration and benchmarks/predict_check.py.

Hosts are picked by index, each with an optional ``slots`` limit, in the order the launcher deals
to them (workers first, then servers: ``bandwidth.launch.planning.plan.deal``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bandwidth.errors import BandwidthError

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Measured:
    seconds: float                   # the median step (the slowest worker of each step)
    worker_hosts: tuple
    server_hosts: tuple
    shares: tuple                    # bytes per server
    nbytes: int
    wall_s: float
    load: tuple                      # /proc/loadavg's three figures after the run


def loadavg() -> tuple:
    return tuple(float(x) for x in Path("/proc/loadavg").read_text().split()[:3])


def run(lab, hosts: list[tuple[int, int | None]], workers: int, servers: int, mode: str,
        network: str, extra: tuple = (), batches: int = 3, timeout_s: float = 400) -> Measured:
    """Measure one configuration; ``hosts``: (lab host index, slots or None) in dealing order."""
    state = Path(lab.state_dir)
    with tempfile.TemporaryDirectory(prefix="h7-predict-") as tmp:
        hostfile = Path(tmp) / "hosts"
        lines = []
        for index, slots in hosts:
            address = lab.host(index).address
            lines.append(address + (f" slots={slots}" if slots else ""))
        hostfile.write_text("\n".join(lines) + "\n")
        out = Path(tmp) / "run.json"
        cmd = [sys.executable, "launch.py", "-H", str(hostfile), "--ssh-config",
               str(state / "ssh_config"), "-n", str(workers), "-s", str(servers),
               sys.executable, "bandwidth/measure.py", "--kv-store", mode, "--network", network,
               "--cpus", "1", "--no-reference", "--num-batches", str(batches), "--timeout", "240",
               "--json", str(out), *extra]
        started = time.monotonic()
        done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout_s,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
        wall = time.monotonic() - started
        if done.returncode != 0 or not out.exists():
            tail = (done.stdout + done.stderr).strip().splitlines()[-3:]
            raise BandwidthError(f"lab run {workers}x{servers} {mode} {network} failed "
                                 f"(exit {done.returncode}): {' | '.join(tail)}")
        result = json.loads(out.read_text())["results"][0]
    shares = tuple(result["workers"][0].get("server_nbytes") or ()) if result["workers"] else ()
    placed = dealt(hosts, workers + (0 if mode == "dist_nccl" else servers))
    return Measured(result["summary"]["seconds_median"], tuple(placed[:workers]),
                    tuple(placed[workers:]), shares, int(result["summary"]["nbytes"]), wall,
                    loadavg())


def dealt(hosts: list[tuple[int, int | None]], count: int) -> list[str]:
    """The lab host ("h<index>") of each process, by the launcher's own rule."""
    from bandwidth.launch.planning.hostfile import Host
    from bandwidth.launch.planning.plan import deal

    placed = deal([Host(f"h{index}", None, slots) for index, slots in hosts], count)
    return [host.name for host in placed]
