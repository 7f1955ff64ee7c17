"""Counters of a host's links, from its own kernel: bytes and drops per interface
(``/proc/net/dev``), drops of its queueing disciplines (``tc -s qdisc``, where ``tc`` exists), and
TCP's segments sent and retransmitted (``/proc/net/snmp``). Every process of a distributed run
takes a snapshot before and after its steps; the first worker gathers one difference per host and
the summary names the hosts where packets were dropped or retransmitted:

    #   link counters: incast: 1,080 drops per step into h3 (server 0); h5 (worker 4) retransmits
    #   3.1 % of its segments

On a network namespace (a netlab host) these are the namespace's own counters.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

_QDISC_DEV = re.compile(r"^qdisc \S+ \S+ dev (\S+)")
_DROPPED = re.compile(r"dropped (\d+)")


def snapshot() -> dict:
    """This host's counters now (missing sources are left out, never guessed)."""
    snap: dict = {"interfaces": {}, "tcp": {}, "qdisc_drops": {}}
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
    return snap


def _tcp() -> dict:
    try:
        rows = [line.split() for line in Path("/proc/net/snmp").read_text().splitlines()
                if line.startswith("Tcp:")]
        table = dict(zip(rows[0][1:], (int(x) for x in rows[1][1:])))
        return {"out_segs": table["OutSegs"], "retrans_segs": table["RetransSegs"]}
    except (OSError, ValueError, IndexError, KeyError):
        return {}


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
           for k in ("out_segs", "retrans_segs")} if after["tcp"] else {}
    return {"bytes_out": (total(after, "tx_bytes") - total(before, "tx_bytes")) / steps,
            "bytes_in": (total(after, "rx_bytes") - total(before, "rx_bytes")) / steps,
            "drops": (counted(after) - counted(before)) / steps, **tcp, "steps": steps}


def summary_line(per_host: dict, roles: dict) -> str | None:
    """The line naming hosts that dropped or retransmitted (None: every counter was zero)."""
    parts = []
    for host, c in per_host.items():
        who = f"{host} ({', '.join(roles.get(host, []))})" if roles.get(host) else host
        if c["drops"] > 0:
            kind = "incast: " if any(r.startswith("server") for r in roles.get(host, [])) else ""
            parts.append(f"{kind}{c['drops']:,.0f} drops per step at {who}")
        if c.get("retrans_segs", 0) > 0 and c.get("out_segs"):
            parts.append(f"{who} retransmits {100 * c['retrans_segs'] / c['out_segs']:.1f} % of "
                         f"its segments ({c['retrans_segs']:,.0f} per step)")
    return "#   link counters: " + "; ".join(parts) if parts else None
