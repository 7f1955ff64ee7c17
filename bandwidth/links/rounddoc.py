"""The document of a round search (bandwidth.links.rounds): what ``python -m bandwidth.ceiling
--network --rounds --json FILE`` writes under ``"rounds"`` and ``python -m bandwidth.hostgate FILE``
reads back. It holds every measurement, so a reader judges them again by the same rules
(``verdict_of``) at its own threshold, and what the search decided at the time as ``"verdict"``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from bandwidth.errors import ConfigError
from bandwidth.files import check_regular_file
from bandwidth.links.roundbook import (Measurement, full_round_robin, percent, positive,
                                       read_measurement)
from bandwidth.links.rounds import RoundSearch, RoundVerdict, verdict_of

SCHEMA = 1
HOW = ("write one with: python launch.py -H hosts -n N python -m bandwidth.ceiling --network "
       "--rounds --json FILE")


def verdict_line(v: RoundVerdict) -> str:
    """``# FAILED: ...`` naming what is slow, or ``# PASSED (...)``."""
    named = [f"host {s.host}" for s in v.slow_hosts] + [f"path {p.name}" for p in v.slow_paths]
    named += [f"{name} unresolved" for name, _ in v.unresolved]
    where = (f"{v.rounds} rounds, {v.pairs_measured} of {v.pairs_total} pairs measured")
    if named:
        return f"# FAILED ({where}): {', '.join(named)}"
    return f"# PASSED ({where}): no slow host, no slow path"


def verdict_dict(v: RoundVerdict) -> dict:
    return {"reference_gbps": v.reference_gbps, "threshold_gbps": v.threshold_gbps,
            "min_percent": v.min_percent, "rounds": v.rounds, "screen_rounds": v.screen_rounds,
            "slow_hosts": [{"host": s.host, "out_gbps": s.out_gbps, "in_gbps": s.in_gbps,
                            "partners": s.partners} for s in v.slow_hosts],
            "slow_paths": [{"name": p.name, "src": p.src, "dst": p.dst, "gbps": p.gbps,
                            "reverse_gbps": p.reverse_gbps, "both": p.both}
                           for p in v.slow_paths],
            "unresolved": [{"name": name, "why": why} for name, why in v.unresolved],
            "transient": [list(pair) for pair in v.transient],
            "pairs_measured": v.pairs_measured, "pairs_total": v.pairs_total,
            "failed": v.failed, "line": verdict_line(v)}


def rounds_document(search: RoundSearch, *, nbytes: int, repeats: int, method: str,
                    round_seconds: list[float], matrix_seconds: float | None = None) -> dict:
    """What ``--json`` holds under ``"rounds"``."""
    v = search.verdict()
    return {"schema": SCHEMA, "hosts": list(search.hosts), "min_percent": search.min_percent,
            "screen_rounds": search.screen_rounds, "rounds": v.rounds,
            "round_pairs": list(v.round_pairs), "round_seconds": round_seconds,
            "seconds": sum(round_seconds), "matrix_seconds_estimate": matrix_seconds,
            "nbytes": nbytes, "repeats": repeats, "method": method,
            "measurements": [m.to_dict() for m in search.measurements],
            "verdict": verdict_dict(v)}


@dataclass(frozen=True)
class RoundsRecord:
    """A round search's document, read back and checked."""

    file: str
    hosts: tuple[str, ...]
    min_percent: float
    screen_rounds: int
    round_pairs: tuple[int, ...]
    measurements: tuple[Measurement, ...]
    seconds: float | None

    def verdict(self, min_percent: float | None = None) -> RoundVerdict:
        return verdict_of(self.hosts, list(self.measurements),
                          self.min_percent if min_percent is None else min_percent,
                          self.screen_rounds, list(self.round_pairs))


def read_document(path: str, what: str) -> object:
    """The JSON of ``path``; any problem one ConfigError line naming the file."""
    check_regular_file(path, what)
    try:
        with open(path) as f:
            return json.load(f)
    except OSError as exc:
        raise ConfigError(f"{what} {path}: cannot read it ({exc.strerror})") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{what} {path}: not JSON ({exc})") from None
    except RecursionError:
        raise ConfigError(f"{what} {path}: nested too deeply to be a result") from None
    except ValueError as exc:           # a number of thousands of digits (int's digit limit)
        raise ConfigError(f"{what} {path}: not JSON ({str(exc).splitlines()[0]})") from None


def load_rounds(path: str, doc: object | None = None) -> RoundsRecord:
    """Read and check a round search's document (``doc``: its JSON, already read)."""
    doc = read_document(path, "host check") if doc is None else doc
    body = doc.get("rounds") if isinstance(doc, dict) else None
    body = body if isinstance(body, dict) else {}
    hosts, pct, screen = body.get("hosts"), body.get("min_percent"), body.get("screen_rounds")
    pairs, items = body.get("round_pairs"), body.get("measurements")
    bad = ""
    if not (isinstance(hosts, list) and len(hosts) >= 2
            and all(isinstance(h, str) and h for h in hosts) and len(set(hosts)) == len(hosts)):
        bad = "hosts: a list of at least two different names"
    elif not percent(pct):
        bad = "min_percent: a percentage above 0, at most 100"
    elif not (isinstance(screen, int) and not isinstance(screen, bool)
              and 1 <= screen <= full_round_robin(len(hosts))):
        bad = "screen_rounds: a whole number of rounds of the round robin"
    elif not (isinstance(pairs, list) and pairs and all(
            isinstance(k, int) and not isinstance(k, bool) and k > 0 for k in pairs)):
        bad = "round_pairs: the count of pairs of each round, at least one round"
    elif not (isinstance(items, list) and len(items) == sum(pairs)):
        bad = "measurements: one per pair of each round"
    if bad:
        raise ConfigError(f"{path}: not a round search's document ({bad}); {HOW}")
    known = set(hosts)
    measurements = [read_measurement(item, known, len(pairs)) for item in items]
    if None in measurements:
        k = measurements.index(None)
        raise ConfigError(f"{path}: measurement {k} is not {{\"round\": R, \"pair\": [host, "
                          f"other host], \"gbps\": [positive, positive]}} of a listed host; {HOW}")
    seconds = body.get("seconds")
    return RoundsRecord(path, tuple(hosts), float(pct), screen, tuple(pairs),
                        tuple(measurements), float(seconds) if positive(seconds) else None)
