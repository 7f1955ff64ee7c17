"""The document of the GPU check in rounds (bandwidth.links.gpurounds): what ``python -m
bandwidth.ceiling --gpus-check --json FILE`` writes under ``"gpu_rounds"`` and ``python -m
bandwidth.hostgate FILE`` reads back. It holds every measurement, each GPU's host link and NVML's
figures, so a reader judges them again by the same rules (``verdict_of``) at its own threshold;
``"verdict"`` is what the check decided at the time.
"""

from __future__ import annotations

from dataclasses import dataclass

from bandwidth.errors import ConfigError
from bandwidth.links.gpurounds import GpuRounds, GpuVerdict, HostLink, pair_key, verdict_of
from bandwidth.links.roundbook import (Measurement, known_pair, percent, positive,
                                       read_measurement)
from bandwidth.textformat import gbps_3

SCHEMA = 1
HOW = "write one with: python -m bandwidth.ceiling --gpus-check --json FILE"


def verdict_line(v: GpuVerdict) -> str:
    """``# FAILED (...): ...`` naming what is slow, or ``# PASSED (...)``."""
    named = [f"{s.host} (slow with every peer)" for s in v.slow_gpus]
    named += [f"{s.gpu}'s host link" for s in v.slow_host_links]
    named += [f"pair {p.path.name}" for p in v.slow_pairs]
    named += [f"{name} unresolved" for name, _ in v.unresolved]
    n = len(v.gpus)
    where = ("1 GPU, no pair to measure" if n == 1 else
             f"{n} GPUs, {v.rounds} rounds, {v.pairs_measured} of {v.pairs_total} pairs")
    if named:
        return f"# FAILED ({where}): {', '.join(named)}"
    return f"# PASSED ({where}): no slow GPU, GPU pair or host link"


def named_lines(v: GpuVerdict) -> list[str]:
    """One ``# SLOW GPU``, ``# SLOW HOST LINK``, ``# SLOW PAIR`` or ``# UNRESOLVED`` line for each
    thing the verdict names, then the transient pairs' count: the check's output and the gate's."""
    out = [f"# SLOW GPU {s.host}: slow with {s.partners} GPUs that reach the rate with others "
           f"(sends {gbps_3(s.out_gbps)}, receives {gbps_3(s.in_gbps)} GB/s)" for s in v.slow_gpus]
    out += [f"# SLOW HOST LINK {s.gpu}: {s.why}" for s in v.slow_host_links]
    out += [f"# SLOW PAIR {p.path.name}: {p.path.direction} {gbps_3(p.path.gbps)} GB/s (the other "
            f"way {gbps_3(p.path.reverse_gbps)}; slow below {gbps_3(p.threshold_gbps)}): "
            f"{p.conclusion}" for p in v.slow_pairs]
    out += [f"# UNRESOLVED {name}: {reason}" for name, reason in v.unresolved]
    if v.transient:
        out.append(f"# {len(v.transient)} pairs slow once and fast again (transient, not named)")
    return out


def verdict_dict(v: GpuVerdict) -> dict:
    return {"rule": v.rule, "min_percent": v.min_percent, "expect_percent": v.expect_percent,
            "rounds": v.rounds, "pair_reference_gbps": v.pair_reference_gbps,
            "host_reference_gbps": v.host_reference_gbps,
            "slow_gpus": [{"gpu": s.host, "out_gbps": s.out_gbps, "in_gbps": s.in_gbps,
                           "partners": s.partners} for s in v.slow_gpus],
            "slow_host_links": [{"gpu": s.gpu, "gbps": s.gbps, "threshold_gbps":
                                 s.threshold_gbps, "why": s.why} for s in v.slow_host_links],
            "slow_pairs": [{"name": p.path.name, "src": p.path.src, "dst": p.path.dst,
                            "gbps": p.path.gbps, "reverse_gbps": p.path.reverse_gbps,
                            "both": p.path.both, "threshold_gbps": p.threshold_gbps,
                            "conclusion": p.conclusion} for p in v.slow_pairs],
            "unresolved": [{"name": name, "why": why} for name, why in v.unresolved],
            "transient": [list(pair) for pair in v.transient],
            "pairs_measured": v.pairs_measured, "pairs_total": v.pairs_total,
            "notes": list(v.notes), "failed": v.failed, "line": verdict_line(v)}


def gpu_document(check: GpuRounds, *, devices: list[int], names: list[str],
                 expected_basis: dict, round_seconds: list[float], no_peer: list,
                 nbytes: int, repeats: int, method: str) -> dict:
    """What ``--json`` holds under ``"gpu_rounds"``."""
    v = check.verdict()
    return {"schema": SCHEMA, "gpus": list(check.gpus), "devices": list(devices),
            "names": list(names), "min_percent": check.min_percent,
            "expect_percent": check.expect_percent, "rule": check.rule,
            "expected_pairs": [{"pair": list(k), "gbps": g, "basis": expected_basis.get(k, "")}
                               for k, g in sorted(check.expected.items())],
            "host_links": [{"gpu": h.gpu, "h2d_gbps": h.h2d_gbps, "d2h_gbps": h.d2h_gbps,
                            "expected_gbps": h.expected_gbps, "basis": h.basis}
                           for h in check.host_links],
            "rounds": v.rounds, "round_pairs": list(v.round_pairs),
            "round_seconds": list(round_seconds), "seconds": sum(round_seconds),
            "no_peer": [list(p) for p in no_peer], "nbytes": nbytes, "repeats": repeats,
            "method": method, "measurements": [m.to_dict() for m in check.measurements],
            "verdict": verdict_dict(v)}


@dataclass(frozen=True)
class GpuRecord:
    """A GPU check's document, read back and checked."""

    file: str
    gpus: tuple[str, ...]
    min_percent: float
    expect_percent: float
    host_links: tuple[HostLink, ...]
    expected: dict
    round_pairs: tuple[int, ...]
    measurements: tuple[Measurement, ...]
    no_peer: tuple[tuple[str, str], ...]
    seconds: float | None

    def verdict(self, min_percent: float | None = None) -> GpuVerdict:
        return verdict_of(self.gpus, list(self.host_links), self.expected,
                          list(self.measurements), list(self.round_pairs),
                          self.min_percent if min_percent is None else min_percent,
                          self.expect_percent)


def _count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _host_link(item, known: set) -> HostLink | None:
    if not (isinstance(item, dict) and item.get("gpu") in known
            and positive(item.get("h2d_gbps")) and positive(item.get("d2h_gbps"))):
        return None
    expected = item.get("expected_gbps")
    if expected is not None and not positive(expected):
        return None
    basis = item.get("basis") if isinstance(item.get("basis"), str) else ""
    return HostLink(item["gpu"], float(item["h2d_gbps"]), float(item["d2h_gbps"]),
                    None if expected is None else float(expected), basis)


def _body_problem(body: dict) -> str:
    """What is wrong with the document's top fields, or ""."""
    gpus, pairs, items = body.get("gpus"), body.get("round_pairs"), body.get("measurements")
    if not (isinstance(gpus, list) and gpus and all(isinstance(g, str) and g for g in gpus)
            and len(set(gpus)) == len(gpus)):
        return "gpus: a list of different names, at least one"
    for key in ("min_percent", "expect_percent"):
        if not percent(body.get(key)):
            return f"{key}: a percentage above 0, at most 100"
    if not (isinstance(pairs, list) and all(_count(k) for k in pairs)
            and (pairs or len(gpus) == 1)):
        return "round_pairs: the count of pairs of each round (none only with one GPU)"
    if not (isinstance(items, list) and len(items) == sum(pairs)):
        return "measurements: one per pair of each round"
    for key in ("host_links", "expected_pairs", "no_peer"):
        if not isinstance(body.get(key, []), list):
            return f"{key}: a list"
    return ""


def load_gpu_rounds(path: str, doc: object) -> GpuRecord:
    """Check a GPU check's document (``doc``: the JSON of ``path``)."""
    body = doc.get("gpu_rounds") if isinstance(doc, dict) else None
    body = body if isinstance(body, dict) else {}
    bad = _body_problem(body)
    if bad:
        raise ConfigError(f"{path}: not a GPU check's document ({bad}); {HOW}")
    known = set(body["gpus"])
    links = [_host_link(item, known) for item in body.get("host_links", [])]
    if None in links or len({h.gpu for h in links}) < len(links):
        raise ConfigError(f"{path}: host_links[{links.index(None) if None in links else 0}] is "
                          f"not {{\"gpu\": a listed GPU (once), \"h2d_gbps\": positive, "
                          f"\"d2h_gbps\": positive}}; {HOW}")
    expected = {}
    for k, item in enumerate(body.get("expected_pairs", [])):
        if not (isinstance(item, dict) and known_pair(item.get("pair"), known)
                and positive(item.get("gbps"))):
            raise ConfigError(f"{path}: expected_pairs[{k}] is not {{\"pair\": [GPU, other GPU],"
                              f" \"gbps\": positive}}; {HOW}")
        expected[pair_key(*item["pair"])] = float(item["gbps"])
    measurements = [read_measurement(item, known, len(body["round_pairs"]))
                    for item in body["measurements"]]
    if None in measurements:
        raise ConfigError(f"{path}: measurement {measurements.index(None)} is not {{\"round\": "
                          f"R, \"pair\": [GPU, other GPU], \"gbps\": [positive, positive]}} of "
                          f"listed GPUs; {HOW}")
    no_peer = tuple(pair_key(*p) for p in body.get("no_peer", []) if known_pair(p, known))
    seconds = body.get("seconds")
    return GpuRecord(path, tuple(body["gpus"]), float(body["min_percent"]),
                     float(body["expect_percent"]), tuple(links), expected,
                     tuple(body["round_pairs"]), tuple(measurements), no_peer,
                     float(seconds) if positive(seconds) else None)
