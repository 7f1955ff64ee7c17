"""Counters of a host's links, from its own kernel: bytes and drops per interface
(``/proc/net/dev``), drops of its queueing disciplines (``tc -s qdisc``, where ``tc`` exists),
TCP's segments sent and retransmitted (``/proc/net/snmp``) and its retransmission timeouts
(``/proc/net/netstat``'s TcpExt TCPTimeouts, with the routes' ``rto_min``). Every process of a
distributed run takes a snapshot before and after its steps; the first worker gathers one
difference per host and the summary names the hosts where packets were dropped or retransmitted:

    #   link counters: 1,080 drops per step at h3 (server 0); h5 (worker 4) retransmits 3.1 %
    #   of its segments (412 per step)

and, where several hosts share a finding, one clause for them all:

    #   link counters: 1,054-1,566 drops per step at each of 5 server hosts (h1-h5); 20
    #   worker-only hosts (h6-h25) retransmit 9.0-19.2 % of their segments

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
counted at the sender, once per timeout:

    #   link counters: ...; 5 server hosts (h1-h5) waited out 2.0-5.8 retransmission timeouts
    #   per step (200 ms or more each)

On the netlab at 1 Gbit/s (50 x 5, mobilenet, 2026-11-27) the 5 server hosts waited out 2.2-4.0
per step and 9 of the 20 others 0.2-1.0, 19 in all; with every host's ``rto_min`` at 20 ms
(``python -m bandwidth.netlab up --rto-min 20``) the step went from 4.72 to 4.25 s.

Beside them, the host's cores: the share of the machine's CPU time that was busy (``/proc/stat``:
everything but idle and iowait) during the timed steps, its core count and the machine it ran on
(the kernel's boot id, which every namespace of one machine shares). Where the cores were busy
(``CPU_BUSY``) the links were not what bound the step, and the summary says so, naming the machine
once for the hosts that share it (a netlab's hosts share the one machine they run on).

"During the timed steps": a process that runs the measurement protocol adds up the machine's CPU
time between each timed step's start and end (``step_began``, ``step_ended``), from the first
snapshot on. The whole window between the snapshots also holds each iteration's untimed work:
every worker's refill of its gradients and its error check, about 0.13 CPU-s per worker and step
for mobilenet, which on 50 workers sharing 2 cores made the machine read 96 % busy; inside the
steps it was at most 80 % busy (50 x 5 at 1 Gbit/s, whose same job unshaped took 1.4 s a step
against 4.7 s shaped: its cores were not what bound it). A process with no timed step
(a server) reports the whole window, and the line takes a machine's figure from the processes
that timed steps wherever one did.

    #   cores: 99 % busy during the steps on the machine of h1-h25 (2 cores, shared by 25
    #   hosts): the cores, not the links, bound these steps

and where no machine was, the run fell short of its link bound and the hosts with a server
dropped packets, their congested links are named instead:

    #   bound: the links carried 42 % of their bound, with the cores at most 61 % busy during
    #   the steps: incast into the 5 server hosts' links (h1-h5), 48 workers on other hosts
    #   pushing into each at once, congested (their drops above; what they lose on the way in
    #   shows as the senders' retransmissions and 19 timeouts per step in all (200 ms or more
    #   each)), not the cores, held the steps
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

_QDISC_DEV = re.compile(r"^qdisc \S+ \S+ dev (\S+)")
_DROPPED = re.compile(r"dropped (\d+)")
CPU_BUSY = 0.9          # a host's cores this busy bound the steps (the summary says so)
LINK_FULL = 85.0        # % of the link bound at which the links, busy cores or not, were full
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


def summary_line(per_host: dict, roles: dict) -> str | None:
    """The line naming hosts that dropped or retransmitted (None: every counter was zero).
    Drops at hosts with a server and at the others are separate clauses. Where several
    hosts share a finding (drops at server hosts, drops elsewhere, retransmissions at server
    hosts, at the others) it is one clause with the range over those hosts and their names
    as a span: 25 lab hosts are four clauses, not 50."""
    drops: dict[bool, list] = {True: [], False: []}
    retrans: dict[bool, list] = {True: [], False: []}
    timeouts: dict[bool, list] = {True: [], False: []}
    for host, c in per_host.items():
        server = _serves(host, roles)
        if c["drops"] > 0:
            drops[server].append((host, c["drops"]))
        if c.get("retrans_segs", 0) > 0 and c.get("out_segs"):
            retrans[server].append((host, 100 * c["retrans_segs"] / c["out_segs"],
                                    c["retrans_segs"]))
        if c.get("timeouts", 0) > 0:
            timeouts[server].append((host, c["timeouts"], c.get("rto_min_ms", RTO_MIN_MS)))
    parts = []
    for server in (True, False):
        found = drops[server]
        if len(found) == 1:
            host, count = found[0]
            parts.append(f"{count:,.0f} drops per step at {_who(host, roles)}")
        elif found:
            parts.append(f"{_range([n for _, n in found], '{:,.0f}')} drops per step at "
                         f"each of {len(found)} {'server ' if server else ''}hosts "
                         f"({host_span([h for h, _ in found])})")
    for server in (True, False):
        found = retrans[server]
        if len(found) == 1:
            host, share, count = found[0]
            parts.append(f"{_subject(found, server, roles)} retransmits {_share(share)} % of its "
                         f"segments ({count:,.0f} per step)")
        elif found:
            parts.append(f"{_subject(found, server, roles)} retransmit "
                         f"{_range([s for _, s, _ in found], _share)} % of their segments")
    for server in (True, False):
        found = timeouts[server]
        if found:
            parts.append(f"{_subject(found, server, roles)} waited out "
                         f"{_range([n for _, n, _ in found], _count)} retransmission timeouts per "
                         f"step ({_range([ms for *_, ms in found], '{:,.0f}')} ms or more each)")
    return "#   link counters: " + "; ".join(parts) if parts else None


def _subject(found: list, server: bool, roles: dict) -> str:
    """Who a clause of the summary is about: one host with its processes, or several as
    "N server hosts (span)" ("worker-only" for the others); ``found``: (host, ...) tuples."""
    if len(found) == 1:
        return _who(found[0][0], roles)
    return (f"{len(found)} {'server' if server else 'worker-only'} hosts "
            f"({host_span([h for h, *_ in found])})")


def timeouts_in_all(per_host: dict) -> tuple[float, float] | None:
    """The retransmission timeouts per step of every host together and the least of their
    hosts' ``rto_min`` (ms); None where no host waited one out."""
    stalls = [(c["timeouts"], c.get("rto_min_ms", RTO_MIN_MS)) for c in per_host.values()
              if c.get("timeouts", 0) > 0]
    if not stalls:
        return None
    return sum(n for n, _ in stalls), min(ms for _, ms in stalls)


def _count(n: float) -> str:
    """A count per step: one decimal below 10 (0.4, 5.8), whole above (12)."""
    return f"{n:.1f}" if n < 10 else f"{n:,.0f}"


def _serves(host: str, roles: dict) -> bool:
    """Whether a server runs on ``host`` (``roles``: host -> its processes)."""
    return any(r.startswith("server") for r in roles.get(host, []))


def _who(host: str, roles: dict) -> str:
    return f"{host} ({', '.join(roles[host])})" if roles.get(host) else host


def _range(values: list[float], form) -> str:
    """min-max of ``values``, each written by ``form`` (a format string or a function)."""
    write = form.format if isinstance(form, str) else form
    low, high = write(min(values)), write(max(values))
    return low if low == high else f"{low}-{high}"


def _share(pct: float) -> str:
    """A percentage to one decimal, or to two significant digits below 0.1 (not "0.0")."""
    return f"{pct:.1f}" if pct >= 0.1 else f"{pct:.2g}"


def cores_line(per_host: dict, link_pct: float | None = None,
               roles: dict | None = None, one_at_a_time: bool = False) -> str | None:
    """The line naming the machines whose cores were at least ``CPU_BUSY`` busy during the
    steps, each once with the hosts it carried. ``link_pct``: the run's share of its link bound
    (``--link-rate``); at ``LINK_FULL`` % or more the links were at their limit too, and the line
    says both, not that the cores bound the steps (100 dist_nccl ranks at 100 Mbit/s: 92 % of
    the ring's bound with the cores 100 % busy). Where no machine was that busy, the run fell
    short of ``LINK_FULL`` % and hosts with a server (``roles``) dropped packets, the line names
    their congested links as what held the steps instead (50 x 5 at 1 Gbit/s on a netlab: 42 %
    of the bound, the cores below 90 % during the steps); ``one_at_a_time``: the servers took
    one worker's share after another (``--server-takes worker``), so their links' drops are not
    incast. None otherwise."""
    machines: dict = {}
    for host, c in per_host.items():
        if "cpu_busy" in c:
            machines.setdefault(c["machine"], []).append((host, c))
    parts, quiet = [], []
    for hosts in machines.values():
        timed = [c for _, c in hosts if c.get("cpu_window") == "steps"]
        busy = max(c["cpu_busy"] for c in (timed or [c for _, c in hosts]))
        if busy < CPU_BUSY:
            quiet.append(busy)
            continue
        names = [h for h, _ in hosts]
        shared = f", shared by {len(names)} hosts" if len(names) > 1 else ""
        parts.append(f"{100 * busy:.0f} % busy during the steps on the machine of "
                     f"{host_span(names)} ({hosts[0][1]['cores']} cores{shared})")
    if not parts:
        return _congested_line(per_host, link_pct, roles or {}, quiet, one_at_a_time)
    if link_pct is not None and link_pct >= LINK_FULL:
        return ("#   cores: " + "; ".join(parts) + f", and the links carried {link_pct:.0f} % of "
                "their bound: both were at their limit")
    return ("#   cores: " + "; ".join(parts) + ": the cores, not the links, bound these steps")


def _congested_line(per_host: dict, link_pct: float | None, roles: dict,
                    busy: list[float], one_at_a_time: bool) -> str | None:
    """The server hosts' congested links named as what held a run below its link bound
    (cores_line says when)."""
    servers = [h for h, c in per_host.items() if c["drops"] > 0 and _serves(h, roles)]
    if link_pct is None or link_pct >= LINK_FULL or not servers:
        return None
    cores = f"the cores at most {100 * max(busy):.0f} % busy during the steps" if busy else \
        "no busy cores"
    several = len(servers) > 1
    where = f"the {len(servers)} server hosts' links" if several else "the server host's link"
    workers = {h: sum(r.startswith("worker") for r in roles.get(h, [])) for h in roles}
    remote = [sum(workers.values()) - workers.get(h, 0) for h in servers]
    if one_at_a_time:
        where = (f"{where} ({host_span(servers)}), taking one worker's share after another "
                 "(not incast),")
    elif min(remote) >= 2:      # several senders into each of those links at once: incast
        where = (f"incast into {where} ({host_span(servers)}), {_range(remote, '{:,}')} workers on "
                 f"other hosts pushing into {'each' if several else 'it'} at once,")
    else:
        where = f"{where} ({host_span(servers)}),"
    stalls = timeouts_in_all(per_host)
    timeouts = (f" and {_count(stalls[0])} timeouts per step in all ({stalls[1]:,.0f} ms or more "
                "each)") if stalls else ""
    return (f"#   bound: the links carried {link_pct:.0f} % of their bound, with {cores}: {where} "
            f"congested ({'their' if several else 'its'} drops above; what "
            f"{'they lose' if several else 'it loses'} on the way in shows as the senders' "
            f"retransmissions{timeouts}), not the cores, held the steps")


def host_span(names: list[str]) -> str:
    """Names numbered at their end, with one prefix, as runs: h1-h25; h1-h3, h7; 198.18.0.1-5,
    198.18.0.9 (an address's run repeats only its last number). Otherwise the names."""
    numbered = [re.fullmatch(r"(.*?\D|)(\d+)", n) for n in names]
    if len(names) < 2 or not all(numbered) or len({m.group(1) for m in numbered}) != 1:
        return ", ".join(names)
    prefix = numbered[0].group(1)
    numbers = sorted({int(m.group(2)) for m in numbered})
    runs, start = [], numbers[0]
    for i, number in enumerate(numbers):
        if i + 1 < len(numbers) and numbers[i + 1] == number + 1:
            continue                                    # the run goes on
        last = number if prefix.endswith(".") else f"{prefix}{number}"
        runs.append(f"{prefix}{start}" if start == number else f"{prefix}{start}-{last}")
        start = numbers[i + 1] if i + 1 < len(numbers) else None
    return ", ".join(runs)
