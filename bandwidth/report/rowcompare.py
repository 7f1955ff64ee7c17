"""Comparing rows (steps 2 to 4 of the regression check, bandwidth.report.baseline): this run's
rows against the baseline's, the floor (--min-gbps) and the ceiling's share
(--min-percent-of-ceiling), and the exit status of the verdicts."""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass, replace

from bandwidth.report import stats
from bandwidth.report.verdicts import (BELOW_CEILING, BELOW_FLOOR, FAILING, FASTER, MISSING,
                                       MISSING_ALLOWED, NEW, NO_CEILING, NOT_CONFIRMED,
                                       NOT_SIGNIFICANT, ONE_DEVICE, PASS, REGRESSION,
                                       ROW_VERDICTS, SIZE_DIFFERS, Diff)
from bandwidth.results.document import Row

def _label(row: Row) -> str:
    extra = "" if (row.dtype, row.optimizer) == ("float32", "none") else \
        f" {row.dtype}" + ("" if row.optimizer == "none" else f" {row.optimizer}")
    return row.label + extra


def _group(rows: list[Row]) -> dict[tuple, list[Row]]:
    groups: dict[tuple, list[Row]] = defaultdict(list)
    for r in rows:
        groups[r.key].append(r)
    return groups


def usable_samples(row: Row) -> tuple[float, ...]:
    """The row's per-iteration figures, or () where they do not describe its median (a document
    edited by hand, or written before iterations kept busbw_gbps and without a bus factor)."""
    if not row.samples or not row.busbw_gbps:
        return ()
    # The summary's median is busbw of the median time: with an even count, of the mean of the
    # two middle times, which lies between the two middle figures.
    ordered = sorted(row.samples)
    low, high = ordered[(len(ordered) - 1) // 2], ordered[len(ordered) // 2]
    return row.samples if 0.99 * low <= row.busbw_gbps <= 1.01 * high else ()


def pooled(rows: list[Row]) -> Row:
    """The repeats of one row as one measurement (--repeat auto): every iteration together,
    the median of all of them."""
    samples = tuple(x for r in rows for x in usable_samples(r))
    if not samples:
        return max(rows, key=lambda r: r.busbw_gbps)
    return replace(rows[0], busbw_gbps=statistics.median(samples), busbw_min=min(samples),
                   busbw_max=max(samples), samples=samples, source="pooled")


@dataclass(frozen=True)
class _Judged:
    row: Row
    change_pct: float | None
    p_value: float | None
    note: str | None
    regressed: bool


def _judge(row: Row, b_gbps: float | None, b_samples: tuple, tolerance_pct: float,
           significance: float) -> _Judged:
    """One repeat against the baseline: a drop beyond the tolerance that the rank test finds
    significant (or, where the samples cannot show significance, the drop alone)."""
    if not b_gbps:
        return _Judged(row, None, None, None, False)
    change = 100.0 * (row.busbw_gbps - b_gbps) / b_gbps
    now_samples = usable_samples(row)
    p_value, note = None, None
    if not b_samples or not now_samples:
        note = "no per-iteration figures on both sides: tolerance alone"
    elif stats.smallest_p(len(now_samples), len(b_samples)) >= significance:
        note = (f"{len(now_samples)} and {len(b_samples)} iterations cannot reach p < "
                f"{significance:g}: tolerance alone")
    else:
        p_value = stats.mann_whitney_less(now_samples, b_samples)
    beyond = change < -tolerance_pct
    return _Judged(row, change, p_value, note,
                   beyond and (p_value is None or p_value < significance))


def _units(key: tuple, n_rows: list[Row], pool: bool, confirmations: list[dict]
           ) -> tuple[list[Row], list[Row]]:
    """What is judged of one key: the first pass's units (its repeats, or their pooled sample
    with ``pool``) and one pooled unit per confirmation pass that measured the key again."""
    first = ([pooled(n_rows)] if pool else list(n_rows)) if n_rows else []
    return first, [pooled(g[key]) for g in confirmations if g.get(key)]


def _pass_text(label: str, first: str, again: list[str], confirmed: bool) -> str:
    """``local mlp cpu x2: first pass -22.2 % (p 8e-13), confirmation pass 1 -1.0 % (p 0.6):
    not confirmed``: what each pass measured, for the note of a row measured again."""
    passes = [f"first pass {first}"] + [f"confirmation pass {i + 1} {t}"
                                        for i, t in enumerate(again)]
    return f"{label}: " + ", ".join(passes) + (": confirmed" if confirmed else ": not confirmed")


def _change_text(j: _Judged) -> str:
    text = "-" if j.change_pct is None else f"{j.change_pct:+.1f} %"
    return text + ("" if j.p_value is None else f" (p {j.p_value:.2g})")


def compare(baseline_rows: list[Row], current_rows: list[Row], tolerance_pct: float,
            min_gbps: float | None = None, *, allow_missing: bool = False, pool: bool = False,
            significance: float = stats.SIGNIFICANCE,
            confirmations: list[list[Row]] = ()) -> list[Diff]:
    """One Diff per key found on either side: the baseline's rows first, in their order, then the
    rows new in this run. ``confirmations``: the rows of each confirmation pass (--repeat auto),
    each pass pooled and judged alone. See the module docstring for the rules."""
    base, now = _group(baseline_rows), _group(current_rows)
    again_groups = [_group(rows) for rows in confirmations]
    diffs = []
    for key in list(base) + [k for k in now if k not in base]:
        b_rows, n_rows = base.get(key, []), now.get(key, [])
        sample = (b_rows or n_rows)[0]
        b_gbps = statistics.median(r.busbw_gbps for r in b_rows) if b_rows else None
        b_samples = tuple(x for r in b_rows for x in usable_samples(r))
        first, again = _units(key, n_rows, pool, again_groups)
        judge = lambda r: _judge(r, b_gbps, b_samples, tolerance_pct, significance)  # noqa: E731
        judged_first, judged_again = [judge(r) for r in first], [judge(r) for r in again]
        judged = judged_first + judged_again
        # As fleet health checks: a row passes if any repeat (or pass) passes; the best such one
        # is shown (the best of all where none passes).
        passing = [j for j in judged if not j.regressed and not _below(j.row, min_gbps)]
        chosen = max(passing or judged, key=lambda j: j.row.busbw_gbps, default=None)
        verdict = _verdict(b_rows, n_rows, chosen, tolerance_pct, min_gbps, allow_missing,
                           first + again)
        note = chosen.note if chosen and b_rows and verdict not in (SIZE_DIFFERS, ONE_DEVICE) \
            else None
        first_failed = bool(judged_first) and all(
            j.regressed or _below(j.row, min_gbps) for j in judged_first)
        if judged_again and first_failed and verdict not in (SIZE_DIFFERS, ONE_DEVICE):
            confirmed = verdict in FAILING
            if not confirmed:
                verdict = NOT_CONFIRMED
            first_best = max(judged_first, key=lambda j: j.row.busbw_gbps)
            note = _pass_text(_label(sample), _change_text(first_best),
                              [_change_text(j) for j in judged_again], confirmed)
        row = chosen.row if chosen else None
        diffs.append(Diff(
            _label(sample), key, b_gbps, row.busbw_gbps if row else None,
            len(n_rows) + sum(len(g.get(key, ())) for g in again_groups),
            chosen.change_pct if chosen else None, verdict,
            chosen.p_value if chosen else None,
            stats.spread(usable_samples(row)) if row else None, note))
    return diffs


def _below(row: Row, min_gbps: float | None) -> bool:
    return min_gbps is not None and row.n >= 2 and row.busbw_gbps < min_gbps


def _verdict(b_rows, n_rows, chosen: _Judged | None, tolerance_pct, min_gbps,
             allow_missing, units: list[Row]) -> str:
    if not n_rows:
        return MISSING_ALLOWED if allow_missing else MISSING
    if n_rows[0].n < 2:
        return ONE_DEVICE           # busbw 0 by definition: nothing to compare or floor
    if min_gbps is not None and max(r.busbw_gbps for r in units) < min_gbps:
        return BELOW_FLOOR
    if not b_rows:
        return NEW
    if {r.nbytes for r in b_rows} != {r.nbytes for r in n_rows}:
        return SIZE_DIFFERS         # same names, other arrays (e.g. another --image-shape)
    if chosen.change_pct is None:
        return PASS
    if chosen.regressed:
        return REGRESSION
    if chosen.change_pct < -tolerance_pct:
        return NOT_SIGNIFICANT
    return FASTER if chosen.change_pct > tolerance_pct else PASS


def check_floor(rows: list[Row], min_gbps: float, pool: bool = False,
                confirmations: list[list[Row]] = ()) -> list[Diff]:
    """The floor alone, without a baseline: each key's best repeat (the pooled repeats with
    ``pool``; or the best pass, with confirmation passes) against ``min_gbps``."""
    diffs = []
    again_groups = [_group(r) for r in confirmations]
    for key, n_rows in _group(rows).items():
        first, again = _units(key, n_rows, pool, again_groups)
        best = max(first + again, key=lambda r: r.busbw_gbps)
        verdict = ONE_DEVICE if best.n < 2 else \
            BELOW_FLOOR if best.busbw_gbps < min_gbps else PASS
        note = None
        if again and verdict != ONE_DEVICE and \
                max(r.busbw_gbps for r in first) < min_gbps:
            confirmed = verdict == BELOW_FLOOR
            verdict = verdict if confirmed else NOT_CONFIRMED
            gbps = lambda r: f"{r.busbw_gbps:.3f} GB/s"  # noqa: E731
            note = _pass_text(_label(best), gbps(max(first, key=lambda r: r.busbw_gbps)),
                              [gbps(r) for r in again], confirmed)
        diffs.append(Diff(_label(best), key, None, best.busbw_gbps,
                          len(n_rows) + sum(len(g.get(key, ())) for g in again_groups), None,
                          verdict, spread=stats.spread(usable_samples(best)), note=note,
                          gate="floor"))
    return diffs


def check_ceiling(rows: list[Row], min_pct: float, allow_missing: bool = False,
                  pool: bool = False, confirmations: list[list[Row]] = ()) -> list[Diff]:
    """``--min-percent-of-ceiling P``: each key's best repeat (or pass, with confirmation passes)
    against P % of the ceiling measured in the same run. A row of two or more devices without a
    usable ceiling (none measured, or the probe was not a bound at its size) fails closed
    (NO CEILING) unless ``allow_missing``."""
    diffs = []
    again_groups = [_group(r) for r in confirmations]
    for key, n_rows in _group(rows).items():
        first, again = _units(key, n_rows, pool, again_groups)
        share = lambda r: -1.0 if r.pct_of_ceiling is None else r.pct_of_ceiling  # noqa: E731
        best = max(first + again, key=share)
        pct = best.pct_of_ceiling
        threshold = None if pct is None else best.ceiling_gbps * min_pct / 100.0
        if best.n < 2:
            verdict, note = ONE_DEVICE, None
        elif pct is None:
            why = best.ceiling_note or "no ceiling measured in this run"
            verdict, note = (MISSING_ALLOWED if allow_missing else NO_CEILING), why
        else:
            verdict = BELOW_CEILING if pct < min_pct else PASS
            note = f"{pct:.1f} % of {best.ceiling_gbps:.3f} GB/s ({best.ceiling_name})"
            if again and max(share(r) for r in first) < min_pct:
                confirmed = verdict == BELOW_CEILING
                verdict = verdict if confirmed else NOT_CONFIRMED
                pct_text = lambda r: f"{share(r):.1f} %"  # noqa: E731
                note += "; " + _pass_text(_label(best), pct_text(max(first, key=share)),
                                          [pct_text(r) for r in again], confirmed)
        diffs.append(Diff(_label(best), ("ceiling",) + key, threshold, best.busbw_gbps,
                          len(n_rows) + sum(len(g.get(key, ())) for g in again_groups),
                          None if pct is None else pct - 100.0, verdict,
                          spread=stats.spread(usable_samples(best)), note=note, gate="ceiling"))
    return diffs


def exit_code(diffs: list[Diff], baseline_given: bool = True) -> int:
    """0 pass, 1 a failed gate (a regression, a row below the floor or the ceiling's share, a
    row missing from the run, a link that lost lanes), 2 nothing compared (no row of this run
    matches the baseline)."""
    failed = [d for d in diffs if d.failed]
    compared = [d for d in diffs if d.gate == "baseline" and d.verdict in ROW_VERDICTS]
    if baseline_given and not compared and all(d.verdict == MISSING for d in failed):
        return 2
    return 1 if failed else 0
