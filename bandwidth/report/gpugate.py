"""The host gate on a GPU check's document (``python -m bandwidth.ceiling --gpus-check --json``):
its measurements judged again by the check's own rules (bandwidth.links.gpurounds) at the gate's
``--min-percent``, as text lines and one record per GPU, GPU pair and host link (gate "gpu").

``SLOW GPU``: slow with at least two GPUs that reach the rate with others. ``SLOW HOST LINK``: a
GPU's pinned copies to or from host memory below the rule's floor. ``SLOW PAIR``: slow three
times in the same direction, neither GPU a slow GPU, with what the naming rests on (on two GPUs:
both host links normal, the path and not a GPU). ``UNRESOLVED``: a slow pair measured too few
times. Any of them fails the gate.
"""

from __future__ import annotations

import statistics

from bandwidth.gates import GateRecord
from bandwidth.links.gpudoc import GpuRecord, named_lines, verdict_line
from bandwidth.links.gpurounds import GpuVerdict, pair_key, pair_name
from bandwidth.textformat import gbps_3

RULES = {"median": "slow below {pct:g} % of the upper median of the GPUs' best pair",
         "expected": "slow below {expect:g} % of NVML's figure for its link (no median: two "
                     "GPUs, or pairs of different kinds)",
         "none": "one GPU: no pair"}


def _pair_rates(record: GpuRecord) -> dict[tuple[str, str], float]:
    """Each measured pair's median of its slower direction."""
    rates: dict[tuple[str, str], list[float]] = {}
    for m in record.measurements:
        rates.setdefault(pair_key(m.a, m.b), []).append(min(m.gbps_ab, m.gbps_ba))
    return {k: statistics.median(v) for k, v in rates.items()}


def gpu_records(record: GpuRecord, v: GpuVerdict) -> list[GateRecord]:
    """One record per GPU (its host link, and whether it is slow with every peer), one per
    measured pair, one per unresolved pair."""
    rule = RULES[v.rule].format(pct=v.min_percent, expect=v.expect_percent)
    slow = {s.host: s for s in v.slow_gpus}
    links = {h.gpu: h for h in record.host_links}
    slow_links = {s.gpu: s for s in v.slow_host_links}
    out = []
    for gpu in record.gpus:
        link, notes, verdicts = links.get(gpu), [], []
        if gpu in slow:
            s = slow[gpu]
            verdicts.append("SLOW GPU")
            notes.append(f"slow with {s.partners} GPUs that reach the rate with others (sends "
                         f"{gbps_3(s.out_gbps)}, receives {gbps_3(s.in_gbps)} GB/s)")
        if gpu in slow_links:
            verdicts.append("SLOW HOST LINK")
            notes.append(slow_links[gpu].why)
        elif link is not None:
            notes.append(f"host->device {gbps_3(link.h2d_gbps)}, device->host {gbps_3(link.d2h_gbps)} "
                         "GB/s")
        reference = slow_links[gpu].threshold_gbps if gpu in slow_links else (
            v.host_reference_gbps * v.min_percent / 100 if v.host_reference_gbps else None)
        out.append(GateRecord("gpu", gpu, " and ".join(verdicts) or "ok", bool(verdicts),
                              link.gbps if link else None, reference,
                              f"host link: slow below {v.min_percent:g} % of the GPUs' upper "
                              "median (and, with fewer than 3 GPUs, below "
                              f"{v.expect_percent:g} % of NVML's PCIe figure)",
                              "; ".join(notes)))
    named = {pair_key(p.path.src, p.path.dst): p for p in v.slow_pairs}
    unresolved = dict(v.unresolved)
    for key, gbps in sorted(_pair_rates(record).items()):
        name = pair_name(*key)
        p = named.get(key)
        verdict = "SLOW PAIR" if p else "UNRESOLVED" if name in unresolved else "ok"
        detail = (f"{p.path.direction} {gbps_3(p.path.gbps)} GB/s, the other way "
                  f"{gbps_3(p.path.reverse_gbps)}; {p.conclusion}" if p else unresolved.get(name, ""))
        if set(key) & set(slow):
            detail = "; ".join(filter(None, [detail, "slow with a slow GPU (named above)"]))
        if key in record.no_peer:
            detail = "; ".join(filter(None, [detail, "peer access off by request (--no-peer)"]))
        out.append(GateRecord("gpu", f"pair {name}", verdict, verdict != "ok", gbps,
                              p.threshold_gbps if p else None, rule, detail))
    return out


def gpu_lines(record: GpuRecord, v: GpuVerdict) -> list[str]:
    seconds = f" in {record.seconds:.2f} s" if record.seconds else ""
    out = [f"# GPU gate: {len(record.gpus)} GPUs, {v.rounds} rounds{seconds}, "
           f"{v.pairs_measured} of {v.pairs_total} pairs measured; rule {v.rule}: "
           + RULES[v.rule].format(pct=v.min_percent, expect=v.expect_percent)]
    if v.pair_reference_gbps:
        out.append(f"# reference {gbps_3(v.pair_reference_gbps)} GB/s (the upper median of the "
                   "GPUs' best pair)")
    out += named_lines(v)
    out += [f"# note: {n}" for n in v.notes]
    out.append(verdict_line(v))
    return out
