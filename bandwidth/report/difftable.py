"""The regression check's diff table and verdict line (bandwidth.report.baseline)."""

from __future__ import annotations

from collections import defaultdict

from bandwidth.report import stats
from bandwidth.report.rowcompare import exit_code
from bandwidth.report.verdicts import Diff
from bandwidth.textformat import render

def _num(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def _p_text(d: Diff) -> str:
    return "-" if d.p_value is None else f"{d.p_value:.2g}"


def diff_table(diffs: list[Diff], tolerance_pct: float | None,
               min_gbps: float | None = None, baseline_name: str = "the baseline",
               min_pct: float | None = None, significance: float = stats.SIGNIFICANCE
               ) -> list[str]:
    """The diff table with a ``#`` header and a verdict line: row, baseline, now, change %,
    the rank test's p, p50 / p95 / cv of the iterations, verdict (and repeats, when there were
    several); then the ceiling gate's table and the links, where there are such gates."""
    rules = []
    if tolerance_pct is not None:
        rules.append(f"a row fails below {baseline_name} by more than {tolerance_pct:g} % "
                     f"where the drop is significant (Mann-Whitney U, one-sided p < "
                     f"{significance:g})")
    if min_gbps is not None:
        rules.append(f"a row fails below {min_gbps:g} GB/s")
    if min_pct is not None:
        rules.append(f"a row fails below {min_pct:g} % of its ceiling")
    rows = [d for d in diffs if d.gate in ("baseline", "floor")]
    lines = ["# regression check of GB/s per GPU (busbw, median over iterations; the best of this "
             "run's repeats): " + "; ".join(rules)]
    if rows:
        lines += _row_table(rows, tolerance_pct is not None)
    ceiling = [d for d in diffs if d.gate == "ceiling"]
    if ceiling:
        lines.append(f"# share of the ceiling measured in the same run (at least {min_pct:g} %)")
        cells = [[d.label, _num(d.baseline_gbps, ".3f"), _num(d.now_gbps, ".3f"), d.verdict,
                  d.note or ""] for d in ceiling]
        lines += render(["row", f"{min_pct:g} % of ceiling GB/s", "now GB/s", "verdict",
                         "detail"], cells, right={1, 2})
    lines += [f"# {d.label}: {d.note}: {d.verdict}" for d in diffs if d.gate == "link"]
    notes = sorted({d.note for d in rows if d.note})
    lines += [f"# note: {n}" for n in notes]
    lines.append(verdict_line(diffs, tolerance_pct is not None))
    return lines


def _row_table(diffs: list[Diff], with_baseline: bool) -> list[str]:
    show_repeats = any(d.repeats > 1 for d in diffs)
    show_p = any(d.p_value is not None for d in diffs)
    show_spread = any(d.spread is not None for d in diffs)
    headers = ["row"] + (["baseline GB/s"] if with_baseline else []) + ["now GB/s"] \
        + (["change %"] if with_baseline else []) + (["p"] if show_p else []) \
        + (["p50", "p95", "cv %"] if show_spread else []) + ["verdict"] \
        + (["repeats"] if show_repeats else [])
    cells = []
    for d in diffs:
        change = "-" if d.change_pct is None else f"{d.change_pct:+.1f}"
        spread = [] if not show_spread else ["-", "-", "-"] if d.spread is None else [
            f"{d.spread.p50_gbps:.3f}", f"{d.spread.p95_gbps:.3f}", f"{100 * d.spread.cv:.1f}"]
        cells.append([d.label] + ([_num(d.baseline_gbps, ".3f")] if with_baseline else [])
                     + [_num(d.now_gbps, ".3f")] + ([change] if with_baseline else [])
                     + ([_p_text(d)] if show_p else []) + spread
                     + [d.verdict] + ([str(d.repeats)] if show_repeats else []))
    numeric = {i for i, h in enumerate(headers) if h not in ("row", "verdict")}
    return render(headers, cells, right=numeric)


def verdict_line(diffs: list[Diff], baseline_given: bool = True) -> str:
    failed = [d for d in diffs if d.failed]
    counts = defaultdict(int)
    for d in diffs:
        counts[d.verdict] += 1
    tally = ", ".join(f"{n} {v.lower()}" for v, n in counts.items())
    code = exit_code(diffs, baseline_given)
    if code == 1:
        return f"# FAILED: {len(failed)} of {len(diffs)} gates ({tally})"
    if code == 2:
        return f"# NOTHING COMPARED: no row of this run matches the baseline ({tally})"
    return f"# PASSED ({tally})"

