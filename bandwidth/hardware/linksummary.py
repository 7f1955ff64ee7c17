"""What the link counters of a run's hosts say (bandwidth.hardware.linkcounters gathers one
difference per host): the summary's lines naming the hosts where packets were dropped or
retransmitted,

    #   link counters: 1,080 drops per step at h3 (server 0); h5 (worker 4) retransmits 3.1 %
    #   of its segments (412 per step)

and, where several hosts share a finding, one clause for them all:

    #   link counters: 1,054-1,566 drops per step at each of 5 server hosts (h1-h5); 20
    #   worker-only hosts (h6-h25) retransmit 9.0-19.2 % of their segments

with the retransmission timeouts they waited out, counted at the sender, once per timeout:

    #   link counters: ...; 5 server hosts (h1-h5) waited out 2.0-5.8 retransmission timeouts
    #   per step (200 ms or more each)

Where a machine's cores were busy (``CPU_BUSY``, during the timed steps) the links were not what
bound the step, and the summary says so, naming the machine once for the hosts that share it (a
netlab's hosts share the one machine they run on):

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

import re

from bandwidth.hardware.linkcounters import RTO_MIN_MS

CPU_BUSY = 0.9          # a host's cores this busy bound the steps (the summary says so)
LINK_FULL = 85.0        # % of the link bound at which the links, busy cores or not, were full


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
