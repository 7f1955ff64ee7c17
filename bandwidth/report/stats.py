"""The statistics of the regression gate, on per-iteration samples of GB/s per GPU (numpy only).

- ``mann_whitney_less(now, before)``: the one-sided Mann-Whitney U test (Wilcoxon rank-sum) that
  ``now`` is stochastically smaller than ``before``, as asv decides whether a benchmark changed.
  Exact (the null distribution of U counted by recurrence) for samples of up to 10,000 pairs
  without ties; otherwise the normal approximation with the tie correction and a continuity
  correction of 1/2. ``smallest_p(n, m)`` is the least p any outcome can reach: where it is above
  the level, the test can never find a drop and the gate says so.
- ``median_ci(samples)`` (bandwidth.formulas'): the distribution-free confidence interval of the
  median from order statistics (binomial with p = 1/2); None below 6 samples (no 95 % interval
  exists).
- ``spread(samples)``: p50, p95 and the coefficient of variation of one row. The percentiles are
  of the iteration times, shown as GB/s: p95 is the figure of the 95th-percentile (slow) iteration.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass

import numpy as np

from bandwidth.formulas import log_comb, median_ci

SIGNIFICANCE = 0.002        # asv's level: a drop must have p below this (one-sided)
EXACT_PAIRS = 10_000        # n x m up to which the exact distribution is counted


@dataclass(frozen=True)
class Spread:
    p50_gbps: float
    p95_gbps: float         # the 95th-percentile iteration time's GB/s (the slow tail)
    cv: float               # standard deviation / mean of the per-iteration GB/s
    samples: int


def spread(samples) -> Spread | None:
    x = np.asarray(samples, dtype=float)
    if x.size == 0:
        return None
    mean = float(x.mean())
    cv = float(x.std(ddof=1) / mean) if x.size > 1 and mean > 0 else 0.0
    return Spread(float(np.median(x)), float(np.percentile(x, 5)), cv, int(x.size))


def _u_counts(n: int, m: int) -> np.ndarray:
    """How many of the C(n+m, n) orderings give each U from 0 to n*m (no ties)."""
    # f[j][u] for the current i: orderings of i values of one sample and j of the other.
    prev = [np.ones(1, dtype=float) for _ in range(m + 1)]        # i = 0: U = 0 only
    for i in range(1, n + 1):
        cur = [np.ones(1, dtype=float)]                           # j = 0: U = 0 only
        for j in range(1, m + 1):
            # The largest value belongs to the first sample (it beats all j: U += j) or not.
            size = i * j + 1
            counts = np.zeros(size)
            a = prev[j]
            counts[j:j + a.size] += a
            b = cur[j - 1]
            counts[:b.size] += b
            cur.append(counts)
        prev = cur
    return prev[m]


def smallest_p(n: int, m: int) -> float:
    """The least one-sided p-value the test can give with samples of n and m values: 1 / C(n+m,
    n), in logarithms (the count does not fit a float from about 1,030 values on)."""
    if n == 0 or m == 0:
        return 1.0
    return math.exp(-log_comb(n + m, n))


def mann_whitney_less(now, before) -> float:
    """One-sided p-value that ``now`` tends to be smaller than ``before``."""
    x, y = np.asarray(now, dtype=float), np.asarray(before, dtype=float)
    n, m = x.size, y.size
    if n == 0 or m == 0:
        return 1.0
    pooled = np.concatenate([x, y])
    ranks = _ranks(pooled)
    u = float(ranks[:n].sum() - n * (n + 1) / 2)   # pairs where now > before (ties count 1/2)
    ties = np.unique(pooled).size != pooled.size
    if not ties and n * m <= EXACT_PAIRS:
        counts = _u_counts(n, m)
        return float(counts[:int(round(u)) + 1].sum() / counts.sum())
    _, tie_sizes = np.unique(pooled, return_counts=True)
    total = n + m
    variance = n * m / 12.0 * ((total + 1) - float((tie_sizes ** 3 - tie_sizes).sum())
                               / (total * (total - 1)))
    if variance <= 0:
        return 1.0                                 # every value equal: no evidence of a drop
    z = (u - n * m / 2.0 + 0.5) / math.sqrt(variance)
    # Far in the tail the normal approximation underflows to 0, which no rank test can give: the
    # least p of n and m values is 1 / C(n+m, n) (and a float's least normal number where that
    # underflows too, from about 2,000 values), so a p is never shown as 0.
    floor = max(smallest_p(n, m), sys.float_info.min)
    return max(0.5 * math.erfc(-z / math.sqrt(2.0)), floor)


def _ranks(values: np.ndarray) -> np.ndarray:
    """Ranks from 1, ties getting the mean of their ranks."""
    order = np.argsort(values, kind="mergesort")
    ranks = np.empty(values.size)
    sorted_values = values[order]
    i = 0
    while i < values.size:
        j = i
        while j + 1 < values.size and sorted_values[j + 1] == sorted_values[i]:
            j += 1
        ranks[order[i:j + 1]] = (i + j) / 2.0 + 1.0
        i = j + 1
    return ranks


def ci_width_pct(samples, confidence: float = 0.95) -> float:
    """The median's confidence interval as a percentage of the median (inf when none exists)."""
    ci = median_ci(samples, confidence)
    median = float(np.median(samples)) if len(samples) else 0.0
    if ci is None or median <= 0:
        return math.inf
    return 100.0 * (ci[1] - ci[0]) / median
