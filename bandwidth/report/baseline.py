"""Regression checks: this run against a saved baseline, an absolute floor, and the ceiling
measured in the same run (the CI gate; docs/reporting.md describes every rule).

A baseline is an ordinary result document (``--save-baseline FILE`` writes the same document as
``--json``), read through bandwidth.results.validate (a malformed file, or a figure that could
never fail
or never pass, is bad input). Checking works in these steps:

1. ``check_fingerprint``: the baseline must come from the same hardware (device model and count,
   driver, peer access; bandwidth.results.document.fingerprint). Otherwise the check is refused
   with exit
   status 2 and a message naming what differs, unless forced. A link that lost NVLinks, PCIe
   lanes or generation is not other hardware but a failing gate naming it (``link_gates``).
2. ``compare``: rows are matched by Row.key (mode, network, devices, dtype, optimizer and
   backend). A repeat regresses when its median is more than the tolerance below the baseline's
   (the median of the baseline's repeats) AND the one-sided Mann-Whitney U test of its
   iterations against the baseline's finds the drop significant (p < stats.SIGNIFICANCE); where
   the samples cannot reach that level, the tolerance alone decides. A row passes if ANY repeat
   passes (fleet health checks re-run a flapping check); with ``pool`` (``--repeat auto``) the
   repeats are judged as one sample. With ``confirmations`` (--repeat auto's confirmation
   passes: a row that failed a measured gate measured again, see ``CONFIRMED_GATES``) each pass
   is one more pooled sample judged alone, and the row fails only if every pass fails; a row
   that failed its first pass and passed a later one reads NOT_CONFIRMED (a pass). A baseline
   row missing from the run fails (MISSING) unless ``allow_missing``. With ``min_gbps`` every
   row whose best repeat (or pass) is below it fails (nccl-tests' NCCL_TESTS_MIN_BW, on each
   row and without its 0.9 factor).
3. ``check_ceiling``: with ``--min-percent-of-ceiling P`` each row against P % of its ceiling.
4. ``exit_code``: 0 pass, 1 a failed gate, 2 bad input (no row in common with the baseline).

The figure compared is GB/s per GPU (busbw, median over iterations). ``check`` runs all of it;
``write_gate_reports`` writes the verdicts as JUnit, markdown and JSON
(bandwidth.report.gatereport).
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from dataclasses import dataclass, replace
from pathlib import Path

from bandwidth.errors import ConfigError
from bandwidth.hardware.topology import pcie_text
from bandwidth.report import stats
from bandwidth.report.stats import Spread
from bandwidth.report.table import render
from bandwidth.results.document import Row, fingerprint, load_document, rows_from_document

PASS, FASTER, REGRESSION, BELOW_FLOOR, NEW, ONE_DEVICE, SIZE_DIFFERS = (
    "ok", "faster", "REGRESSION", "BELOW FLOOR", "new", "one device", "bytes differ")
MISSING, MISSING_ALLOWED = "MISSING", "missing"      # fails closed; "missing" with --allow-missing
NOT_SIGNIFICANT = "ok (drop not significant)"        # beyond the tolerance, but within the noise
NOT_CONFIRMED = "ok (not confirmed)"                 # failed, but its confirmation pass passed
LINK_LOST, BELOW_CEILING, NO_CEILING = "LINK LOST", "BELOW CEILING", "NO CEILING"
FAILING = (REGRESSION, BELOW_FLOOR, MISSING, LINK_LOST, BELOW_CEILING, NO_CEILING)
# The verdicts on a measured figure: with --repeat auto such a row is measured again (the
# confirmation pass) before it fails. Missing rows, lost links and missing ceilings are not noise.
CONFIRMED_GATES = (REGRESSION, BELOW_FLOOR, BELOW_CEILING)


class BaselineMismatchError(ConfigError):
    """The baseline was measured on other hardware (exit status 2, as any bad input)."""


# ---------------------------------------------------------------------------------------------
# parsing the flags' values


def _percent(text: str | float) -> tuple[str, float]:
    """(the text as given, its number): ``10%`` and ``10`` are both 10; NaN where not a number."""
    raw = str(text).strip()
    body = raw[:-1].strip() if raw.endswith("%") else raw
    try:
        return raw, float(body)
    except ValueError:
        return raw, float("nan")


def parse_tolerance(text: str | float) -> float:
    """``--tolerance``: a percentage, ``10%`` or ``10`` (both 10 %); from 0 up to, not including,
    100. Returns the percentage."""
    raw, value = _percent(text)
    if not 0 <= value < 100:
        raise ConfigError(f"--tolerance must be a percentage from 0 up to 100, written 10% or 10 "
                          f"(both mean 10 %); got {raw!r}")
    return value


def parse_min_gbps(text: str | float) -> float:
    """``--min-gbps``: a floor in GB/s per GPU (busbw), a positive number."""
    try:
        value = float(str(text).strip())
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise ConfigError(f"--min-gbps must be a positive number of GB/s per GPU (busbw), such as "
                          f"431; got {str(text)!r}")
    return value


def parse_min_percent(text: str | float) -> float:
    """``--min-percent-of-ceiling``: a percentage above 0 and at most 100 (``60`` or ``60%``)."""
    raw, value = _percent(text)
    if not 0 < value <= 100:
        raise ConfigError(f"--min-percent-of-ceiling must be a percentage above 0 and at most "
                          f"100, such as 60; got {raw!r}")
    return value


def parse_repeat(text: str | int) -> int:
    """``--repeat``: how many times a measurement may run before the check fails; 1 or more."""
    try:
        value = int(str(text).strip())
    except ValueError:
        value = 0
    if value < 1:
        raise ConfigError(f"--repeat must be a whole number of runs, 1 or more, or auto; got "
                          f"{str(text)[:40]!r}")
    return value


# ---------------------------------------------------------------------------------------------
# the hardware fingerprint


def document_fingerprint(doc: dict) -> dict:
    """The document's own fingerprint, or one computed from its environment (older files)."""
    return doc.get("fingerprint") or fingerprint(doc.get("environment", {}))


def describe_hardware(fp: dict) -> str:
    """``8 x NVIDIA H100 80GB HBM3 (driver 550.54)``."""
    text = f"{fp.get('device_count', 0)} x {fp.get('device_model') or 'unknown device'}"
    return text + (f" (driver {fp['driver']})" if fp.get("driver") else "")


def _peer_text(matrix) -> str:
    if not matrix:
        return "none recorded"
    pairs = [(i, j) for i in range(len(matrix)) for j in range(len(matrix)) if i < j]
    both = sum(1 for i, j in pairs if matrix[i][j] and matrix[j][i])
    return f"{both} of {len(pairs)} GPU pairs"


def link_changes(baseline_links: dict | None, current_links: dict | None
                 ) -> list[tuple[str, str, bool]]:
    """What differs between two link descriptions (topology.compact_links), per link:
    ``("GPU 0<->1", "18 NVLinks in the baseline, 12 now", True)``, the last item True where the
    link lost NVLinks, PCIe lanes or generation (a fault: the check fails, naming it) and False
    where it gained. A value unknown on either side (None: NVML could not tell; or a side
    without NVML at all) is not compared: it proves no difference."""
    if not baseline_links or not current_links:
        return []
    out = []
    base_nv, now_nv = baseline_links.get("nvlinks") or {}, current_links.get("nvlinks") or {}
    for pair, before in base_nv.items():
        after = now_nv.get(pair)
        if before is not None and after is not None and before != after:
            a, b = pair.split("-")
            out.append((f"GPU {a}<->{b}", f"{before} NVLink{'' if before == 1 else 's'} in the "
                        f"baseline, {after} now", after < before))
    base_pcie, now_pcie = baseline_links.get("pcie") or {}, current_links.get("pcie") or {}
    for gpu, before in base_pcie.items():
        after = now_pcie.get(gpu) or {}
        known = [k for k in ("gen", "width")
                 if before.get(k) is not None and after.get(k) is not None]
        if any(before[k] != after[k] for k in known):
            out.append((f"GPU {gpu}", f"PCIe {pcie_text(before)} in the baseline, "
                        f"{pcie_text(after)} now", any(after[k] < before[k] for k in known)))
    return out


def link_differences(baseline_links: dict | None, current_links: dict | None) -> list[str]:
    """link_changes in words: ``GPU 0<->1: 18 NVLinks in the baseline, 12 now``."""
    return [f"{name}: {text}" for name, text, _ in link_changes(baseline_links, current_links)]


def link_gates(baseline_fp: dict, current_fp: dict, source: str = "this machine") -> list[Diff]:
    """One failing Diff (LINK LOST) per link that lost NVLinks, lanes or PCIe generation since
    the baseline: the fault a health check exists to catch is a failure naming the link (exit
    1), not other hardware."""
    return [Diff(f"link {name}", ("link", name, source), None, None, 1, None, LINK_LOST,
                 note=text + ("" if source == "this machine" else f" ({source})"), gate="link")
            for name, text, lost in link_changes(baseline_fp.get("links"),
                                                 current_fp.get("links")) if lost]


def fingerprint_differences(baseline_fp: dict, current_fp: dict) -> list[str]:
    """The fields that differ, in words: ``['device model', 'driver']``. Links are not among
    them: a link that lost NVLinks or lanes is a failure of the check (link_gates), and one that
    gained is a note."""
    names = {"device_model": "device model", "device_count": "device count", "driver": "driver",
             "peer_access": "peer access"}
    keys = list(names) + sorted((set(baseline_fp) | set(current_fp)) - set(names) - {"links"})
    return [names.get(k, k) for k in keys if baseline_fp.get(k) != current_fp.get(k)]


def check_fingerprint(baseline_fp: dict, current_fp: dict, force: bool = False,
                      current_name: str = "this machine") -> str | None:
    """Refuse (BaselineMismatchError, exit 2) a baseline from other hardware; with ``force``
    return a warning line instead. Where the hardware is the same: None, or a note when only one
    side recorded its links (they could not be compared). ``current_name`` is what the message
    calls the other side: "this machine", or a file name."""
    differs = fingerprint_differences(baseline_fp, current_fp)
    if not differs:
        return _unknown_links_note(baseline_fp, current_fp, current_name)
    base, now = describe_hardware(baseline_fp), describe_hardware(current_fp)
    # What the two descriptions do not already show: links and peer access (of equal counts).
    detail = []
    if "peer access" in differs and "device count" not in differs:
        detail.append(f"peer access: {_peer_text(baseline_fp.get('peer_access'))} then, "
                      f"{_peer_text(current_fp.get('peer_access'))} now")
    known = ("device model", "device count", "driver", "peer access")
    detail += [f"{name}: {baseline_fp.get(name)!r} then, {current_fp.get(name)!r} now"
               for name in differs if name not in known]
    if base != now:
        message = f"baseline was measured on {base} but {current_name} has {now}"
        if detail:
            message += f" (other {'; '.join(detail)})"
    else:
        message = (f"baseline was measured on {base} as {current_name} has, but with other "
                   + "; other ".join(detail))
    if force:
        return f"warning: {message}; compared anyway (--force)"
    raise BaselineMismatchError(f"{message}; use --force to compare anyway")


def _unknown_links_note(baseline_fp: dict, current_fp: dict, current_name: str) -> str | None:
    known = [bool(baseline_fp.get("links")), bool(current_fp.get("links"))]
    if known[0] == known[1]:
        return None
    missing = "the baseline" if not known[0] else current_name
    return (f"note: links not compared: {missing} recorded none (no NVML there; "
            "pip install '.[topology]')")


# ---------------------------------------------------------------------------------------------
# comparing rows


@dataclass(frozen=True)
class Diff:
    """One line of the diff table: one gated row."""

    label: str                      # MODE NETWORK GPUS (+ dtype, optimizer when not the default)
    key: tuple
    baseline_gbps: float | None     # None: the row is not in the baseline
    now_gbps: float | None          # the judged repeat's median (pooled with --repeat auto)
    repeats: int                    # rows of this run with this key
    change_pct: float | None        # (now - baseline) / baseline, of the judged repeat
    verdict: str
    p_value: float | None = None    # the rank test's one-sided p (None: not tested; see note)
    spread: Spread | None = None    # p50, p95, cv of the judged repeat's iterations
    note: str | None = None         # why the rank test was not applied, or a row's verdict detail
    gate: str = "baseline"          # "baseline" (and the floor), "floor", "ceiling" or "link"

    @property
    def failed(self) -> bool:
        return self.verdict in FAILING


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


ROW_VERDICTS = (PASS, FASTER, NOT_SIGNIFICANT, NOT_CONFIRMED, REGRESSION)


def exit_code(diffs: list[Diff], baseline_given: bool = True) -> int:
    """0 pass, 1 a failed gate (a regression, a row below the floor or the ceiling's share, a
    row missing from the run, a link that lost lanes), 2 nothing compared (no row of this run
    matches the baseline)."""
    failed = [d for d in diffs if d.failed]
    compared = [d for d in diffs if d.gate == "baseline" and d.verdict in ROW_VERDICTS]
    if baseline_given and not compared and all(d.verdict == MISSING for d in failed):
        return 2
    return 1 if failed else 0


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


# ---------------------------------------------------------------------------------------------
# one call for measure.py and compare


@dataclass(frozen=True)
class Check:
    diffs: list[Diff]
    notes: list[str]                 # warnings (a forced fingerprint mismatch)
    lines: list[str]                 # the diff table and the verdict line, ready to print
    exit_code: int


@dataclass(frozen=True)
class Gates:
    """What to check, from the command line (measure.py and python -m bandwidth.compare)."""

    tolerance_pct: float = 10.0
    min_gbps: float | None = None
    min_pct_of_ceiling: float | None = None
    allow_missing: bool = False
    pool: bool = False                   # --repeat auto: the repeats are one measurement
    significance: float = stats.SIGNIFICANCE

    @property
    def any(self) -> bool:
        return self.min_gbps is not None or self.min_pct_of_ceiling is not None


def check(current_rows: list[Row], baseline_doc: dict | None = None, tolerance_pct: float = 10.0,
          min_gbps: float | None = None, *, fingerprints: dict[str, dict] | None = None,
          force: bool = False, baseline_name: str = "the baseline",
          gates: Gates | None = None, confirmations: list[list[Row]] = ()) -> Check:
    """The whole check of this run's rows (all repeats so far): the hardware of every entry of
    ``fingerprints`` (``{"this machine": fingerprint(environment)}``, or one per file) against the
    baseline's, then ``compare`` with the floor, or the floor alone without a baseline; the
    ceiling's share with ``gates.min_pct_of_ceiling``. Raises BaselineMismatchError (exit 2) on
    other hardware unless ``force``; a link that lost NVLinks or lanes is a failing gate.

    ``--repeat N`` in measure.py: run, add the rows to ``current_rows``, call this, and stop at
    the first ``exit_code == 0`` or after N runs (health checks pass on the first good repeat).
    ``--repeat auto``: ``current_rows`` are the first pass's repeats (pooled), ``confirmations``
    the rows of each confirmation pass (``confirm_keys`` says which rows to measure again)."""
    g = gates or Gates(tolerance_pct, min_gbps)
    notes: list[str] = []
    diffs: list[Diff] = []
    if baseline_doc is not None:
        if not fingerprints:
            raise ValueError("check() with a baseline needs the fingerprints of this run")
        base_fp = document_fingerprint(baseline_doc)
        for name, fp in fingerprints.items():
            note = check_fingerprint(base_fp, fp, force, name)
            notes += [note] if note else []
            gained = [f"{link}: {text}" for link, text, lost in
                      link_changes(base_fp.get("links"), fp.get("links")) if not lost]
            notes += [f"note: links better than the baseline's ({name}): " + "; ".join(gained)] \
                if gained else []
            diffs += link_gates(base_fp, fp, name)
        baseline_rows = rows_from_document(baseline_doc, baseline_name)
        diffs = compare(baseline_rows, current_rows, g.tolerance_pct, g.min_gbps,
                        allow_missing=g.allow_missing, pool=g.pool,
                        significance=g.significance, confirmations=confirmations) + diffs
    elif g.min_gbps is not None:
        diffs = check_floor(current_rows, g.min_gbps, g.pool, confirmations)
    elif g.min_pct_of_ceiling is None:
        raise ConfigError("a regression check needs --baseline FILE, --min-gbps X or "
                          "--min-percent-of-ceiling P")
    if g.min_pct_of_ceiling is not None:
        diffs += check_ceiling(current_rows, g.min_pct_of_ceiling, g.allow_missing, g.pool,
                               confirmations)
    given = baseline_doc is not None
    lines = [f"# {n}" for n in notes] + diff_table(
        diffs, g.tolerance_pct if given else None, g.min_gbps, baseline_name,
        g.min_pct_of_ceiling, g.significance)
    return Check(diffs, notes, lines, exit_code(diffs, given))


def confirm_keys(result: Check) -> set[tuple]:
    """The row keys (Row.key) whose verdict is a failed measured gate (CONFIRMED_GATES): the rows
    a confirmation pass measures again."""
    return {d.key[1:] if d.gate == "ceiling" else d.key for d in result.diffs
            if d.verdict in CONFIRMED_GATES}


def gate_records(result: Check, gates: Gates, baseline_given: bool):
    """The check's verdicts as bandwidth.report.gatereport records."""
    from bandwidth.report.gatereport import records_from_diffs

    return records_from_diffs(result.diffs, gates.tolerance_pct if baseline_given else None,
                              gates.min_gbps, gates.min_pct_of_ceiling, gates.significance)


def write_gate_reports(result: Check, gates: Gates, *, tool: str, junit_path: str | None,
                       summary_md: str | None, json_path: str | None = None,
                       baseline_given: bool = True, seconds: float = 0.0) -> list[str]:
    """--junit, --summary-md and --json of the regression check; returns ``# wrote`` lines."""
    from bandwidth.report import gatereport

    records = gate_records(result, gates, baseline_given)
    verdict = result.lines[-1]
    wrote = gatereport.write_reports(records, tool=tool, title=f"bandwidth: {tool}",
                                     verdict_line=verdict, junit_path=junit_path,
                                     summary_md=summary_md, seconds=seconds)
    if json_path:
        try:
            Path(json_path).write_text(json.dumps(
                {"gates": [r.to_dict() for r in records], "verdict": verdict,
                 "exit_status": result.exit_code}, indent=1) + "\n")
        except OSError as exc:
            raise ConfigError(f"cannot write {json_path!r}: {exc.strerror}") from None
        wrote.append(f"# wrote {json_path} (gates)")
    return wrote


def load_baseline(path: str | Path) -> dict:
    """A baseline file (any result document); a missing or foreign file is a ConfigError."""
    return load_document(path)


def save_baseline(document: dict, path: str | Path) -> None:
    """Write a result document as a baseline (with its fingerprint, computed if missing)."""
    if not document.get("results"):
        raise ConfigError("nothing to save as a baseline: the run produced no results")
    doc = dict(document)
    doc.setdefault("fingerprint", fingerprint(doc.get("environment", {})))
    try:
        Path(path).write_text(json.dumps(doc, indent=1) + "\n")
    except OSError as exc:
        raise ConfigError(f"cannot write the baseline {str(path)!r}: {exc.strerror}") from None
