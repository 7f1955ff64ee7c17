"""The one rule by which a distributed run names what held it back (``judge``), on any figure in
seconds (or seconds per byte) per rank, or per path, and measured round: with m_r each one's
median over the rounds, M the median of the m_r and D the median over them of each one's median
absolute deviation from its own m_r (the spread between rounds), r stands out when

    m_r >= K x M   and   m_r - M > NOISE x D.

bandwidth.results.stragglers applies it to the ranks' step and push times, and
bandwidth.results.probepaths to the probe's paths; docs/formulas.md, "Stragglers", derives it.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

K = 1.25          # a rank's median at least K x the median of the ranks' medians ...
NOISE = 3.0       # ... and above it by more than NOISE x the ranks' spread between rounds


@dataclass(frozen=True)
class Verdict:
    named: str | None                 # the straggler, or None
    ratio: float | None               # its median over the median of the ranks' medians
    slowest: str | None               # the slowest rank, standing out or not
    slowest_ratio: float | None
    median: float | None              # M
    spread: float | None              # D
    also: tuple[str, ...] = ()        # other ranks that stand out, slowest first
    alone: str = ""                   # why nothing was compared ("1 worker")


def judge(figures: dict, k: float = K, noise: float = NOISE, centre=statistics.median,
          floor: float = 0.0) -> Verdict:
    """The rule (module docstring) on ``figures``: each rank's (or path's) figure per round,
    in rank order (ties: the first named). ``centre``: what stands for one's rounds, the median
    (the probe's paths: ``min``, their best exchange), and D's deviations are taken from it.
    ``floor``: what m_r - M must exceed besides (a figure that is near zero for every healthy
    rank, as the servers' wait, has a ratio to M that means nothing below it)."""
    medians = {r: centre(xs) for r, xs in figures.items() if xs}
    if len(medians) < 2:
        return Verdict(None, None, None, None, None, None,
                       alone=f"{len(medians)} rank{'s' if len(medians) != 1 else ''}")
    big = statistics.median(medians.values())
    spread = statistics.median(statistics.median(abs(x - medians[r]) for x in figures[r])
                               for r in medians)
    order = sorted(medians, key=lambda r: -medians[r])     # stable: ties keep rank order
    slowest = order[0]

    def ratio(r: str) -> float:
        return medians[r] / big if big > 0 else float("inf")

    out = [r for r in order if medians[r] >= k * big and medians[r] - big > noise * spread
           and medians[r] > big and medians[r] - big > floor]
    return Verdict(out[0] if out else None, ratio(out[0]) if out else None, slowest,
                   ratio(slowest), big, spread, tuple(out[1:]))
