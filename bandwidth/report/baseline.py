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
(bandwidth.gates).
"""

from __future__ import annotations
import json
from dataclasses import dataclass, replace
from pathlib import Path

from bandwidth.errors import ConfigError
from bandwidth.files import write_atomic
from bandwidth.gates import GateRecord, write_reports
from bandwidth.report import stats
from bandwidth.report.difftable import diff_table, verdict_line  # noqa: F401
from bandwidth.report.fingerprints import (  # noqa: F401
    check_fingerprint, describe_hardware, document_fingerprint, fingerprint_differences,
    link_changes, link_differences, link_gates)
from bandwidth.report.rowcompare import (  # noqa: F401
    check_ceiling, check_floor, compare, exit_code, pooled, usable_samples)
from bandwidth.report.verdicts import (  # noqa: F401
    BELOW_CEILING, BELOW_FLOOR, CONFIRMED_GATES, FAILING, FASTER, LINK_LOST, MISSING,
    MISSING_ALLOWED, NEW, NO_CEILING, NOT_CONFIRMED, NOT_SIGNIFICANT, ONE_DEVICE, PASS,
    REGRESSION, ROW_VERDICTS, SIZE_DIFFERS, BaselineMismatchError, Diff)
from bandwidth.results.document import Row, fingerprint, load_document, rows_from_document

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
    """The check's verdicts as bandwidth.gates records."""
    return records_from_diffs(result.diffs, gates.tolerance_pct if baseline_given else None,
                              gates.min_gbps, gates.min_pct_of_ceiling, gates.significance)


def with_stragglers(records: list[GateRecord], result: Check, rows: list) -> list[GateRecord]:
    """``records`` with each row's straggler line (bandwidth.results.stragglers) in the detail
    of the gates of that row."""
    lines = {row.key: row.straggler for row in rows if getattr(row, "straggler", None)}
    out = []
    for record, d in zip(records, result.diffs):
        key = d.key[1:] if d.key and d.key[0] == "ceiling" else d.key
        line = lines.get(key)
        out.append(record if line is None else
                   replace(record, detail="; ".join(x for x in (record.detail, line) if x)))
    return out


def records_from_diffs(diffs, tolerance_pct: float | None, min_gbps: float | None,
                       min_pct: float | None, significance: float) -> list[GateRecord]:
    """The regression check's Diffs as bandwidth.gates records."""
    out = []
    for d in diffs:
        if d.gate == "baseline":
            margin = f"tolerance {tolerance_pct:g} %, Mann-Whitney U p < {significance:g}" \
                if tolerance_pct is not None else "no baseline"
            if min_gbps is not None:
                margin += f", floor {min_gbps:g} GB/s"
        elif d.gate == "floor":
            margin = f"floor {min_gbps:g} GB/s"
        elif d.gate == "ceiling":
            margin = f"at least {min_pct:g} % of the ceiling measured in the same run"
        else:
            margin = "no fewer NVLinks, PCIe lanes or generations than the baseline"
        detail = []
        if d.change_pct is not None and d.gate == "baseline":
            detail.append(f"change {d.change_pct:+.1f} %")
        if d.p_value is not None:
            detail.append(f"p {d.p_value:.2g}")
        if d.spread is not None:
            detail.append(f"p50 {d.spread.p50_gbps:.3f}, p95 {d.spread.p95_gbps:.3f}, "
                          f"cv {100 * d.spread.cv:.1f} % over {d.spread.samples} iterations")
        if d.note:
            detail.append(d.note)
        out.append(GateRecord(d.gate, d.label, d.verdict, d.failed, d.now_gbps,
                              d.baseline_gbps, margin, "; ".join(detail)))
    return out


def write_gate_reports(result: Check, gates: Gates, *, tool: str, junit_path: str | None,
                       summary_md: str | None, json_path: str | None = None,
                       baseline_given: bool = True, seconds: float = 0.0,
                       rows: list | None = None) -> list[str]:
    """--junit, --summary-md and --json of the regression check; returns ``# wrote`` lines.
    ``rows``: the rows judged; a distributed row that named a straggler adds that line to its
    gates' detail, so that JUnit and the markdown summary name the rank and its host."""
    records = with_stragglers(gate_records(result, gates, baseline_given), result, rows or [])
    verdict = result.lines[-1]
    wrote = write_reports(records, tool=tool, title=f"bandwidth: {tool}", verdict_line=verdict,
                          junit_path=junit_path, summary_md=summary_md, seconds=seconds)
    if json_path:
        write_atomic(json_path, json.dumps(
            {"gates": [r.to_dict() for r in records], "verdict": verdict,
             "exit_status": result.exit_code}, indent=1) + "\n", "the gates' JSON")
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
    write_atomic(path, json.dumps(doc, indent=1) + "\n", "the baseline")
