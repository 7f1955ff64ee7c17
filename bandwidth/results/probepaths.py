"""``dist_nccl``'s neighbour probe judged (bandwidth.measurement.probe): which worker's link, or
which path between two workers, is slow (``judge_probe``), and the words of the straggler line
that names it; docs/formulas.md, "Stragglers", derives the rule.

The figure of a directed path a -> b and exchange i is its seconds per byte: worker a's bytes
into worker b, timed by b (``path_figures``, from the records' NeighbourRates). The rule of
bandwidth.results.rule on these figures, with each path's best exchange as its m_p (a delay
only adds time, and a slow link is slow in every exchange; 16 workers on loopback, a 2-core
host at load 9: 27 paths stood out by their median, 10 by their best), tells which paths
stand out (m_p >= K x M and m_p - M > NOISE x D, M the median path's, D the median over the
paths of their exchanges' median distance from their best). Then:

* a worker's link is named when the paths out of it, or the paths into it, to at least
  ``SHARE`` (3/4) of its neighbours, and to at least 2, stand out: a slow link is slow with
  every neighbour (3/4, not all: one exchange that a busy host delays must not hide it);
* every other path that stands out is named as a path, unless a named link explains it (a path
  out of a worker named for sending, or into one named for receiving), where its median is at
  least ``PATH_K`` (1.5) x M: one path has no neighbours to agree with it, and on a 2-core
  loopback host one exchange in a few came out 2-5 x the others' for no reason of its paths.

Fewer than 3 workers: nothing to compare (a slow path between two cannot be told from a slow
link of either).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from bandwidth.results.rule import K, NOISE, judge

SHARE = 0.75          # a link is named when at least this share of its neighbours' paths is slow
PATH_K = 1.5          # a lone path is named only at this multiple of the median path's figure
ALSO_SHOWN = 3        # the line's "also:" shows this many more links and paths


@dataclass(frozen=True)
class LinkFinding:
    worker: str                       # "worker 6"
    sending: bool                     # its paths out stand out (at least SHARE of them)
    receiving: bool                   # its paths in stand out
    send_ratio: float                 # the median over its paths out of m_p / M
    recv_ratio: float                 # and over its paths in
    slow_out: int                     # how many of its paths out stand out
    slow_in: int
    neighbours: int

    @property
    def ratio(self) -> float:
        """Its slow direction's (the slower one where both are)."""
        return max(r for r, slow in ((self.send_ratio, self.sending),
                                     (self.recv_ratio, self.receiving)) if slow)


@dataclass(frozen=True)
class ProbeVerdict:
    links: tuple[LinkFinding, ...]                 # named links, slowest first
    paths: tuple[tuple[str, str, float], ...]      # named paths (from, to, m_p / M), slowest first
    slowest: tuple[str, str] | None                # the slowest path, standing out or not
    slowest_ratio: float | None
    median: float | None                           # M, seconds per byte
    spread: float | None                           # D
    alone: str = ""                                # why nothing was compared ("2 workers")


def path_figures(records) -> dict[tuple[str, str], list[float]]:
    """Per directed path (from, to) between workers, its seconds per byte in each exchange of
    the probe, as the receiving worker timed it (empty without a probe)."""
    out = {}
    for r in records:
        for p in r.peers:
            if r.role == "worker" and p.role == "worker" and p.recv_seconds and p.nbytes > 0:
                out[(f"worker {p.index}", r.label)] = [s / p.nbytes for s in p.recv_seconds]
    return out


def judge_probe(records, k: float = K, noise: float = NOISE, share: float = SHARE,
                path_k: float = PATH_K) -> ProbeVerdict | None:
    """The rule (module docstring) on the records' probe; None where no probe ran."""
    figures = path_figures(records)
    if not figures:
        return None
    workers = sorted({w for pair in figures for w in pair}, key=lambda w: int(w.split()[-1]))
    if len(workers) < 3:
        return ProbeVerdict((), (), None, None, None, None, alone=f"{len(workers)} workers")
    verdict = judge(figures, k, noise, centre=min)
    standing = [verdict.named, *verdict.also] if verdict.named else []
    medians = {p: min(xs) for p, xs in figures.items()}
    big = verdict.median

    def ratio(path) -> float:
        return medians[path] / big if big > 0 else math.inf

    links = []
    for w in workers:
        out = [p for p in figures if p[0] == w]
        into = [p for p in figures if p[1] == w]
        slow_out = sum(p in standing for p in out)
        slow_in = sum(p in standing for p in into)
        sending = len(out) >= 2 and slow_out >= max(2, math.ceil(share * len(out)))
        receiving = len(into) >= 2 and slow_in >= max(2, math.ceil(share * len(into)))
        if sending or receiving:
            links.append(LinkFinding(w, sending, receiving,
                                     statistics.median(ratio(p) for p in out),
                                     statistics.median(ratio(p) for p in into),
                                     slow_out, slow_in,
                                     len({p[1] for p in out} | {p[0] for p in into})))
    links.sort(key=lambda f: -f.ratio)
    senders = {f.worker for f in links if f.sending}
    receivers = {f.worker for f in links if f.receiving}
    paths = tuple((a, b, ratio((a, b))) for a, b in standing
                  if a not in senders and b not in receivers and ratio((a, b)) >= path_k)
    return ProbeVerdict(tuple(links), paths, verdict.slowest, verdict.slowest_ratio, big,
                        verdict.spread)


def probe_rule_text(k: float = K, noise: float = NOISE, share: float = SHARE,
                    path_k: float = PATH_K) -> str:
    return (f"a probe path stands out where its best exchange's seconds per byte are at least "
            f"{k:g} x the median path's and above it by more than {noise:g} x their spread "
            f"between exchanges; a "
            f"worker's link named when its paths to or from {_fraction(share)} of its "
            f"neighbours (at least 2) stand out, a path alone at {path_k:g} x")


def _fraction(share: float) -> str:
    return {0.75: "3/4", 0.5: "half", 1.0: "all"}.get(share, f"{100 * share:g} %")


def _pct(ratio: float) -> str:
    return f"{100 / ratio:.0f} %" if ratio > 0 else "n/a"


def link_words(found: LinkFinding) -> str:
    """``its link: slow sending to 7 of 7 neighbours, at 49 % of the median path's probe rate
    (receiving at 98 %)``."""
    n = found.neighbours
    if found.sending and found.receiving:
        return (f"its link: slow sending to {found.slow_out} of {n} neighbours and receiving "
                f"from {found.slow_in} of {n}, at {_pct(found.send_ratio)} and "
                f"{_pct(found.recv_ratio)} of the median path's probe rate")
    if found.sending:
        return (f"its link: slow sending to {found.slow_out} of {n} neighbours, at "
                f"{_pct(found.send_ratio)} of the median path's probe rate (receiving at "
                f"{_pct(found.recv_ratio)})")
    return (f"its link: slow receiving from {found.slow_in} of {n} neighbours, at "
            f"{_pct(found.recv_ratio)} of the median path's probe rate (sending at "
            f"{_pct(found.send_ratio)})")


def path_words(path: tuple[str, str, float], host: dict) -> str:
    """``path worker 3 -> worker 4 (10.0.0.3 -> 10.0.0.4), at 48 % of the median path's probe
    rate``."""
    a, b, ratio = path
    return (f"path {a} -> {b} ({host.get(a, '?')} -> {host.get(b, '?')}), at {_pct(ratio)} of "
            "the median path's probe rate")


def also_words(verdict: ProbeVerdict, host: dict, skip_link: str | None = None,
               skip_path: int | None = None) -> str:
    """`` (also: worker 9's link; path worker 1 -> worker 2 at 60 %)``, or empty."""
    items = [f"{f.worker}'s link at {_pct(f.ratio)}" for f in verdict.links
             if f.worker != skip_link]
    items += [f"path {a} -> {b} at {_pct(r)}" for i, (a, b, r) in enumerate(verdict.paths)
              if i != skip_path]
    if len(items) > ALSO_SHOWN:            # --json's "straggler"."probe" holds them all
        items = items[:ALSO_SHOWN] + [f"{len(items) - ALSO_SHOWN} more in --json"]
    return f" (also: {'; '.join(items)})" if items else ""


def probe_json(verdict: ProbeVerdict | None, host: dict) -> dict | None:
    """The document's ``"straggler"``'s ``"probe"``: the rule and what it named."""
    if verdict is None:
        return None
    return {"rule": probe_rule_text(), "k": K, "noise": NOISE, "share": SHARE,
            "path_k": PATH_K, "alone": verdict.alone or None,
            "links": [{"named": f.worker, "host": host.get(f.worker), "sending": f.sending,
                       "receiving": f.receiving, "send_ratio": f.send_ratio,
                       "recv_ratio": f.recv_ratio, "slow_out": f.slow_out,
                       "slow_in": f.slow_in, "neighbours": f.neighbours}
                      for f in verdict.links],
            "paths": [{"from": a, "to": b, "from_host": host.get(a), "to_host": host.get(b),
                       "ratio": r} for a, b, r in verdict.paths],
            "slowest": list(verdict.slowest) if verdict.slowest else None,
            "slowest_ratio": verdict.slowest_ratio, "median": verdict.median,
            "spread": verdict.spread}


def probe_line(probe: dict) -> str:
    """The summary's line on how the probe ran (bandwidth.results.ranks.probe_summary):
    ``probe: 7 rounds (worker distance 1, -1, 2, -2, 4, -4, 8) of 3 x 2 MiB each way between
    neighbours, gloo send/recv, 0.412 s, not in the figures above (--no-probe skips it)``."""
    mib = probe["nbytes"] / (1 << 20)
    each = f"{mib:g} MiB" + (" per device" if probe.get("ranks_per_worker", 1) > 1 else "")
    distances = ", ".join(f"{s:d}" for s in probe["shifts"])
    rounds = len(probe["shifts"])
    return (f"probe: {rounds} round{'s' if rounds != 1 else ''} (worker distance {distances}) "
            f"of {probe['repeats']} x {each} each way between neighbours, "
            f"{probe['backend']} send/recv, {probe['seconds']:.3f} s, not in the figures above "
            "(--no-probe skips it)")
