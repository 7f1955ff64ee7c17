"""The host gate on a round search's document (``python -m bandwidth.ceiling --network --rounds
--json``): its measurements judged again by the search's own rules (bandwidth.links.rounds) at the
gate's ``--min-percent``, as text lines and one record per host, slow path and unresolved pair.

A host is ``SLOW HOST`` when it was slow with at least two hosts that reach the rate with others;
a path ``SLOW PATH`` when its pair was slow three times in the same direction while both hosts
were fast with others; ``UNRESOLVED`` what the rounds could not decide (a slow pair not measured
again, a host with too few healthy hosts to be held against). Any of the three fails the gate.
"""

from __future__ import annotations

import statistics

from bandwidth.gates import GateRecord
from bandwidth.links.rounddoc import RoundsRecord, verdict_line
from bandwidth.links.rounds import RoundVerdict
from bandwidth.textformat import gbps_3


def sent_gbps(record: RoundsRecord) -> dict[str, float]:
    """Each host's median rate as a sender, over every round it took part in."""
    sent: dict[str, list[float]] = {h: [] for h in record.hosts}
    for m in record.measurements:
        sent[m.a].append(m.gbps_ab)
        sent[m.b].append(m.gbps_ba)
    return {h: statistics.median(v) for h, v in sent.items() if v}


def round_records(record: RoundsRecord, v: RoundVerdict) -> list[GateRecord]:
    """One record per host, one per slow path and per unresolved pair (gate "host")."""
    margin = (f"slow below {v.min_percent:g} % of the reference ({gbps_3(v.reference_gbps)} GB/s), "
              f"with 2 hosts that reach it with others")
    slow = {s.host: s for s in v.slow_hosts}
    why = dict(v.unresolved)
    rates = sent_gbps(record)
    out = []
    for host in record.hosts:
        if host in slow:
            s = slow[host]
            verdict, note = "SLOW HOST", (f"sends {s.out_gbps:.3f}, receives {s.in_gbps:.3f} GB/s "
                                          f"with {s.partners} healthy hosts")
        elif host in why:
            verdict, note = "UNRESOLVED", why[host]
        else:
            verdict, note = "ok", ""
        out.append(GateRecord("host", f"host {host}", verdict, verdict != "ok", rates.get(host),
                              v.threshold_gbps, margin + "; median of what it sent", note))
    for p in v.slow_paths:
        out.append(GateRecord("host", f"path {p.name}", "SLOW PATH", True, p.gbps,
                              v.threshold_gbps, margin,
                              f"the other way {p.reverse_gbps:.3f} GB/s; both hosts fast with "
                              "others"))
    for name, reason in v.unresolved:
        if "<->" in name:
            out.append(GateRecord("host", f"pair {name}", "UNRESOLVED", True, None,
                                  v.threshold_gbps, margin, reason))
    return out


def round_lines(record: RoundsRecord, v: RoundVerdict) -> list[str]:
    seconds = f" in {record.seconds:.1f} s" if record.seconds else ""
    out = [f"# host gate on rounds: {len(record.hosts)} hosts, {v.rounds} rounds{seconds} "
           f"({v.screen_rounds} of screening), {v.pairs_measured} of {v.pairs_total} pairs "
           f"measured",
           f"# a pair is slow below {v.min_percent:g} % of the reference, the median host's "
           f"best cell ({gbps_3(v.reference_gbps)} GB/s): {gbps_3(v.threshold_gbps)} GB/s"]
    for s in v.slow_hosts:
        out.append(f"# SLOW HOST {s.host}: slow with {s.partners} hosts that reach the rate with "
                   f"others (sends {gbps_3(s.out_gbps)}, receives {gbps_3(s.in_gbps)} GB/s)")
    for p in v.slow_paths:
        out.append(f"# SLOW PATH {p.name}: {gbps_3(p.gbps)} GB/s (the other way "
                   f"{gbps_3(p.reverse_gbps)}); both hosts fast with others")
    for name, reason in v.unresolved:
        out.append(f"# UNRESOLVED {name}: {reason}")
    if v.transient:
        out.append(f"# {len(v.transient)} pairs slow once and fast again (transient, not named)")
    out.append(verdict_line(v))
    return out
