"""Counters of a host's links, from its own kernel: bytes and drops per interface
(``/proc/net/dev``), drops of its queueing disciplines (``tc -s qdisc``, where ``tc`` exists),
TCP's segments sent and retransmitted (``/proc/net/snmp``) and its retransmission timeouts
(``/proc/net/netstat``'s TcpExt TCPTimeouts, with the routes' ``rto_min``). Every process of a
distributed run takes a snapshot before and after its steps; the first worker gathers one
difference per host (``difference``), and the summary names the hosts where packets were
dropped or retransmitted (bandwidth.hardware.linksummary writes its lines).

On a network namespace (a netlab host) these are the namespace's own counters. A host's drops are
those of its own interfaces and queues: its outgoing queue is where it drops what it sends (a
server's answers to every worker at once, and its acknowledgements behind them): a sign that its
way out was full, but no loss, for TCP sends such a segment again from its socket at once (50
connections out of one lab host at 1 Gbit/s: 1,494 drops in its own queue, no retransmission, no
timeout; 1 and 8 connections: no drop). What its link loses on the way in is dropped by the
switch (a netlab's bridge port), which no host counts; the senders see it as retransmissions. On
the netlab at 1 Gbit/s (50 x 5, 2026-11-26) the server hosts' own queues dropped 1,000-1,500
packets per step, and the bridge ports toward them 2,000-5,500 over a launch of five exchanges
(benchmarks/scale.py reads those).

A retransmission timeout is a loss that no later segment revealed (a whole window dropped, the
tail of a message): the connection sends nothing more until its timer fires, at least the
route's ``rto_min`` (Linux: 200 ms unless a route sets it), however fast the link. Many workers
sending into one server's link at once lose whole windows there (incast), and the stall is
counted at the sender, once per timeout. On the netlab at 1 Gbit/s (50 x 5, mobilenet,
2026-11-27) the 5 server hosts waited out 2.2-4.0 per step and 9 of the 20 others 0.2-1.0, 19 in
all; with every host's ``rto_min`` at 20 ms (``python -m bandwidth.netlab up --rto-min 20``) the
step went from 4.72 to 4.25 s.

Beside them, the host's cores: the share of the machine's CPU time that was busy (``/proc/stat``:
everything but idle and iowait) during the timed steps, its core count and the machine it ran on
(the kernel's boot id, which every namespace of one machine shares).

"During the timed steps": a process that runs the measurement protocol adds up the machine's CPU
time between each timed step's start and end (``step_began``, ``step_ended``), from the first
snapshot on. The whole window between the snapshots also holds each iteration's untimed work:
every worker's refill of its gradients and its error check, about 0.13 CPU-s per worker and step
for mobilenet, which on 50 workers sharing 2 cores made the machine read 96 % busy; inside the
steps it was at most 80 % busy (50 x 5 at 1 Gbit/s, whose same job unshaped took 1.4 s a step
against 4.7 s shaped: its cores were not what bound it). A process with no timed step
(a server) reports the whole window, and the summary takes a machine's figure from the processes
that timed steps wherever one did.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

_QDISC_DEV = re.compile(r"^qdisc \S+ \S+ dev (\S+)")
_DROPPED = re.compile(r"dropped (\d+)")
RTO_MIN_MS = 200        # Linux's least retransmission timeout where no route sets rto_min
_RTO_MIN = re.compile(r"\brto_min (?:lock )?([0-9.]+)(ms|s)\b")


# The machine's CPU time inside timed steps since the last snapshot (``step_began`` and
# ``step_ended``): jiffies busy and in all, and how many steps; "on" once a snapshot has been
# taken (no cost before).
_steps = {"on": False, "busy": 0, "total": 0, "count": 0}


def step_began() -> tuple[int, int] | None:
    """The machine's CPU time (busy, total) at a timed step's start (None: not counting)."""
    return _jiffies() if _steps["on"] else None


def step_ended(began: tuple[int, int] | None) -> None:
    """Add the CPU time since ``began`` (``step_began``'s) to the steps' total."""
    now = _jiffies() if began else None
    if now:
        _steps["busy"] += now[0] - began[0]
        _steps["total"] += now[1] - began[1]
        _steps["count"] += 1


def snapshot() -> dict:
    """This host's counters now (missing sources are left out, never guessed), with the timed
    steps' CPU time since the last snapshot (``cpu_steps``, where there were any); from here on
    that is counted afresh."""
    snap: dict = {"interfaces": {}, "tcp": {}, "qdisc_drops": {}}
    if _steps["count"]:
        snap["cpu_steps"] = {k: _steps[k] for k in ("busy", "total", "count")}
    _steps.update(on=True, busy=0, total=0, count=0)
    try:
        for line in Path("/proc/net/dev").read_text().splitlines()[2:]:
            name, _, rest = line.partition(":")
            fields = [int(x) for x in rest.split()]
            if name.strip() != "lo" and len(fields) >= 12:
                snap["interfaces"][name.strip()] = {"rx_bytes": fields[0], "rx_dropped": fields[3],
                                                    "tx_bytes": fields[8], "tx_dropped": fields[11]}
    except (OSError, ValueError):
        pass
    snap["tcp"] = _tcp()
    snap["qdisc_drops"] = _qdisc_drops()
    snap["cpu"] = _cpu()
    return snap


def _jiffies() -> tuple[int, int] | None:
    """The machine's CPU time so far in jiffies, (busy, in all), from /proc/stat's first line
    alone (read around every timed step: the rest of the file grows with the cores)."""
    try:
        with open("/proc/stat") as stat:
            fields = [int(x) for x in stat.readline().split()[1:]]
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)        # idle + iowait
        total = sum(fields[:8])                  # guest time is inside user already
    except (OSError, ValueError, IndexError):
        return None
    return total - idle, total


def _cpu() -> dict:
    """The machine's CPU time so far (jiffies, busy and in all), cores and boot id."""
    jiffies = _jiffies()
    try:
        machine = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return {}
    if jiffies is None:
        return {}
    return {"busy": jiffies[0], "total": jiffies[1], "cores": os.cpu_count() or 1,
            "machine": machine}


def _tcp() -> dict:
    """TCP's segments sent and retransmitted, and (where the kernel counts them) its
    retransmission timeouts with the smallest ``rto_min`` a route sets (left out: the default)."""
    try:
        table = _table("/proc/net/snmp", "Tcp:")
        counts = {"out_segs": table["OutSegs"], "retrans_segs": table["RetransSegs"]}
    except (OSError, ValueError, IndexError, KeyError):
        return {}
    try:
        counts["timeouts"] = _table("/proc/net/netstat", "TcpExt:")["TCPTimeouts"]
    except (OSError, ValueError, IndexError, KeyError):
        return counts
    rto_min = _rto_min_ms()
    if rto_min is not None:
        counts["rto_min_ms"] = rto_min
    return counts


def _table(path: str, head: str) -> dict:
    """One table of /proc/net/snmp or /proc/net/netstat: a line of names, then their values."""
    rows = [line.split() for line in Path(path).read_text().splitlines()
            if line.startswith(head)]
    return dict(zip(rows[0][1:], (int(x) for x in rows[1][1:])))


def _rto_min_ms() -> int | None:
    """The smallest ``rto_min`` a route of this host sets (``ip route``), None where none does
    (or ``ip`` is missing): TCP then waits at least ``RTO_MIN_MS``."""
    if not shutil.which("ip"):
        return None
    try:
        text = subprocess.run(["ip", "-o", "route", "show"], capture_output=True, text=True,
                              timeout=5).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    found = [float(n) * (1000 if unit == "s" else 1)
             for n, unit in _RTO_MIN.findall(text)]
    return round(min(found)) if found else None


def _qdisc_drops() -> dict:
    if not shutil.which("tc"):
        return {}
    try:
        text = subprocess.run(["tc", "-s", "qdisc", "show"], capture_output=True, text=True,
                              timeout=5).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    drops: dict = {}
    device = None
    for line in text.splitlines():
        head = _QDISC_DEV.match(line)
        if head:
            device = head.group(1)
            continue
        found = _DROPPED.search(line)
        if found and device and device != "lo":
            drops[device] = drops.get(device, 0) + int(found.group(1))
            device = None
    return drops


def difference(before: dict, after: dict, steps: int) -> dict:
    """Per step between two snapshots: bytes out and in, drops, segments and retransmissions."""
    def total(snap, key):
        return sum(i.get(key, 0) for i in snap["interfaces"].values())

    def counted(snap):
        return (total(snap, "rx_dropped") + total(snap, "tx_dropped")
                + sum(snap["qdisc_drops"].values()))

    steps = max(1, steps)
    tcp = {k: (after["tcp"].get(k, 0) - before["tcp"].get(k, 0)) / steps
           for k in ("out_segs", "retrans_segs", "timeouts") if k in after["tcp"]}
    if "timeouts" in tcp:
        tcp["rto_min_ms"] = after["tcp"].get("rto_min_ms", RTO_MIN_MS)
    cpu = {}
    first, last = before.get("cpu") or {}, after.get("cpu") or {}
    if first and last and last["total"] > first["total"]:
        cpu = {"cpu_busy": (last["busy"] - first["busy"]) / (last["total"] - first["total"]),
               "cores": last["cores"], "machine": last["machine"], "cpu_window": "run"}
        steps_cpu = after.get("cpu_steps") or {}
        if steps_cpu.get("total", 0) > 0:
            cpu.update(cpu_busy=steps_cpu["busy"] / steps_cpu["total"], cpu_window="steps")
    return {"bytes_out": (total(after, "tx_bytes") - total(before, "tx_bytes")) / steps,
            "bytes_in": (total(after, "rx_bytes") - total(before, "rx_bytes")) / steps,
            "drops": (counted(after) - counted(before)) / steps, **tcp, "steps": steps, **cpu}
