"""Regression checks: this run against a saved baseline, and against an absolute floor.

A baseline is an ordinary result document (``--save-baseline FILE`` writes the same document as
``--json``). Checking works in three steps:

1. ``check_fingerprint``: the baseline must come from the same hardware (device model and count,
   driver, links, peer access; bandwidth.results.fingerprint). Otherwise the check is refused with
   exit status 2 and a message naming what differs, unless forced.
2. ``compare``: rows are matched by Row.key (mode, network, devices, dtype, optimizer and
   backend). Each baseline row's figure is the median of its repeats; the current rows with the
   same key are the repeats of this run, and the row passes if ANY of them is within the
   tolerance (a repeat at or above ``baseline x (1 - tolerance)``): fleet health checks re-run a
   flapping check and pass on the first good run. With ``min_gbps`` every row whose best repeat
   is below it fails (nccl-tests' NCCL_TESTS_MIN_BW, but on each row and without its 0.9 factor).
3. ``exit_code``: 0 pass, 1 a regression or a row below the floor, 2 bad input (no row in common).

The figure compared is GB/s per GPU (busbw, median over iterations). Rows that exist on one side
only are listed (``missing`` / ``new``) and do not fail the check.
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from bandwidth.errors import ConfigError
from bandwidth.results import Row, fingerprint, load_document, rows_from_document
from bandwidth.table import render
from bandwidth.topology import pcie_text

PASS, FASTER, REGRESSION, BELOW_FLOOR, MISSING, NEW, ONE_DEVICE, SIZE_DIFFERS = (
    "ok", "faster", "REGRESSION", "BELOW FLOOR", "missing", "new", "one device", "bytes differ")
FAILING = (REGRESSION, BELOW_FLOOR)


class BaselineMismatchError(ConfigError):
    """The baseline was measured on other hardware (exit status 2, as any bad input)."""


# ---------------------------------------------------------------------------------------------
# parsing the flags' values


def parse_tolerance(text: str | float) -> float:
    """``--tolerance``: a percentage, ``10%`` or ``10`` (both 10 %); from 0 up to, not including,
    100. Returns the percentage."""
    raw = str(text).strip()
    body = raw[:-1].strip() if raw.endswith("%") else raw
    try:
        value = float(body)
    except ValueError:
        value = float("nan")
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


def parse_repeat(text: str | int) -> int:
    """``--repeat``: how many times a measurement may run before the check fails; 1 or more."""
    try:
        value = int(str(text).strip())
    except ValueError:
        value = 0
    if value < 1:
        raise ConfigError(f"--repeat must be a whole number of runs, 1 or more; got {str(text)!r}")
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


def link_differences(baseline_links: dict | None, current_links: dict | None) -> list[str]:
    """What differs between two link descriptions (topology.compact_links), in words:
    ``GPU 0<->1: 18 NVLinks in the baseline, 12 now``, ``GPU 1: PCIe gen5 x16 in the baseline,
    gen5 x8 now``. A value unknown on either side (None: NVML could not tell; or a side without
    NVML at all) is not compared: it proves no difference."""
    if not baseline_links or not current_links:
        return []
    out = []
    base_nv, now_nv = baseline_links.get("nvlinks") or {}, current_links.get("nvlinks") or {}
    for pair, before in base_nv.items():
        after = now_nv.get(pair)
        if before is not None and after is not None and before != after:
            a, b = pair.split("-")
            out.append(f"GPU {a}<->{b}: {before} NVLink{'' if before == 1 else 's'} in the "
                       f"baseline, {after} now")
    base_pcie, now_pcie = baseline_links.get("pcie") or {}, current_links.get("pcie") or {}
    for gpu, before in base_pcie.items():
        after = now_pcie.get(gpu) or {}
        if any(before.get(k) is not None and after.get(k) is not None and before[k] != after[k]
               for k in ("gen", "width")):
            out.append(f"GPU {gpu}: PCIe {pcie_text(before)} in the baseline, "
                       f"{pcie_text(after)} now")
    return out


def fingerprint_differences(baseline_fp: dict, current_fp: dict) -> list[str]:
    """The fields that differ, in words: ``['device model', 'driver']``. Links differ only where
    both sides know them (link_differences)."""
    names = {"device_model": "device model", "device_count": "device count", "driver": "driver",
             "links": "links", "peer_access": "peer access"}
    keys = list(names) + sorted((set(baseline_fp) | set(current_fp)) - set(names))
    return [names.get(k, k) for k in keys
            if (link_differences(baseline_fp.get(k), current_fp.get(k)) if k == "links"
                else baseline_fp.get(k) != current_fp.get(k))]


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
    if "links" in differs:
        detail.append("links: " + "; ".join(link_differences(baseline_fp.get("links"),
                                                             current_fp.get("links"))))
    if "peer access" in differs and "device count" not in differs:
        detail.append(f"peer access: {_peer_text(baseline_fp.get('peer_access'))} then, "
                      f"{_peer_text(current_fp.get('peer_access'))} now")
    known = ("device model", "device count", "driver", "links", "peer access")
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
    """One line of the diff table."""

    label: str                      # MODE NETWORK GPUS (+ dtype, optimizer when not the default)
    key: tuple
    baseline_gbps: float | None     # None: the row is not in the baseline
    now_gbps: float | None          # the best repeat; None: not measured in this run
    repeats: int                    # rows of this run with this key
    change_pct: float | None        # (now - baseline) / baseline, of the best repeat
    verdict: str

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


def compare(baseline_rows: list[Row], current_rows: list[Row], tolerance_pct: float,
            min_gbps: float | None = None) -> list[Diff]:
    """One Diff per key found on either side: the baseline's rows first, in their order, then the
    rows new in this run. See the module docstring for the rules."""
    base, now = _group(baseline_rows), _group(current_rows)
    diffs = []
    for key in list(base) + [k for k in now if k not in base]:
        b_rows, n_rows = base.get(key, []), now.get(key, [])
        sample = (b_rows or n_rows)[0]
        b_gbps = statistics.median(r.busbw_gbps for r in b_rows) if b_rows else None
        best = max(n_rows, key=lambda r: r.busbw_gbps) if n_rows else None
        n_gbps = best.busbw_gbps if best else None
        change = None
        if b_gbps and n_gbps is not None:
            change = 100.0 * (n_gbps - b_gbps) / b_gbps
        verdict = _verdict(b_rows, n_rows, b_gbps, n_gbps, change, tolerance_pct, min_gbps)
        diffs.append(Diff(_label(sample), key, b_gbps, n_gbps, len(n_rows), change, verdict))
    return diffs


def _verdict(b_rows, n_rows, b_gbps, n_gbps, change, tolerance_pct, min_gbps) -> str:
    if not n_rows:
        return MISSING
    if n_rows[0].n < 2:
        return ONE_DEVICE           # busbw 0 by definition: nothing to compare or floor
    if min_gbps is not None and n_gbps < min_gbps:
        return BELOW_FLOOR
    if not b_rows:
        return NEW
    if {r.nbytes for r in b_rows} != {r.nbytes for r in n_rows}:
        return SIZE_DIFFERS         # same names, other arrays (e.g. another --image-shape)
    if change is None:
        return PASS
    if change < -tolerance_pct:
        return REGRESSION
    return FASTER if change > tolerance_pct else PASS


def check_floor(rows: list[Row], min_gbps: float) -> list[Diff]:
    """The floor alone, without a baseline: each key's best repeat against ``min_gbps``."""
    diffs = []
    for key, n_rows in _group(rows).items():
        best = max(n_rows, key=lambda r: r.busbw_gbps)
        verdict = ONE_DEVICE if best.n < 2 else \
            BELOW_FLOOR if best.busbw_gbps < min_gbps else PASS
        diffs.append(Diff(_label(best), key, None, best.busbw_gbps, len(n_rows), None, verdict))
    return diffs


def exit_code(diffs: list[Diff], baseline_given: bool = True) -> int:
    """0 pass, 1 a regression or a row below the floor, 2 nothing compared (no row of this run
    matches the baseline)."""
    if any(d.failed for d in diffs):
        return 1
    compared = [d for d in diffs if d.verdict in (PASS, FASTER)]
    if baseline_given and not compared:
        return 2
    return 0


def _num(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def diff_table(diffs: list[Diff], tolerance_pct: float | None,
               min_gbps: float | None = None, baseline_name: str = "the baseline") -> list[str]:
    """The diff table with a ``#`` header and a verdict line: row, baseline, now, change %,
    verdict (and repeats, when there were several)."""
    rules = []
    if tolerance_pct is not None:
        rules.append(f"a row fails below {baseline_name} by more than {tolerance_pct:g} %")
    if min_gbps is not None:
        rules.append(f"a row fails below {min_gbps:g} GB/s")
    with_baseline = tolerance_pct is not None
    show_repeats = any(d.repeats > 1 for d in diffs)
    headers = ["row"] + (["baseline GB/s"] if with_baseline else []) + ["now GB/s"] \
        + (["change %"] if with_baseline else []) + ["verdict"] \
        + (["repeats"] if show_repeats else [])
    cells = []
    for d in diffs:
        change = "-" if d.change_pct is None else f"{d.change_pct:+.1f}"
        cells.append([d.label] + ([_num(d.baseline_gbps, ".3f")] if with_baseline else [])
                     + [_num(d.now_gbps, ".3f")] + ([change] if with_baseline else [])
                     + [d.verdict] + ([str(d.repeats)] if show_repeats else []))
    numeric = {i for i, h in enumerate(headers) if h not in ("row", "verdict")}
    lines = ["# regression check of GB/s per GPU (busbw, median over iterations; the best of this "
             "run's repeats): " + "; ".join(rules)]
    lines += render(headers, cells, right=numeric)
    lines.append(verdict_line(diffs, with_baseline))
    return lines


def verdict_line(diffs: list[Diff], baseline_given: bool = True) -> str:
    failed = [d for d in diffs if d.failed]
    counts = defaultdict(int)
    for d in diffs:
        counts[d.verdict] += 1
    tally = ", ".join(f"{n} {v.lower()}" for v, n in counts.items())
    code = exit_code(diffs, baseline_given)
    if code == 1:
        return f"# FAILED: {len(failed)} of {len(diffs)} rows ({tally})"
    if code == 2:
        return f"# NOTHING COMPARED: no row of this run matches the baseline ({tally})"
    return f"# PASSED ({tally})"


# ---------------------------------------------------------------------------------------------
# one call for measure.py


@dataclass(frozen=True)
class Check:
    diffs: list[Diff]
    notes: list[str]                 # warnings (a forced fingerprint mismatch)
    lines: list[str]                 # the diff table and the verdict line, ready to print
    exit_code: int


def check(current_rows: list[Row], baseline_doc: dict | None = None, tolerance_pct: float = 10.0,
          min_gbps: float | None = None, *, fingerprints: dict[str, dict] | None = None,
          force: bool = False, baseline_name: str = "the baseline") -> Check:
    """The whole check of this run's rows (all repeats so far): the hardware of every entry of
    ``fingerprints`` (``{"this machine": fingerprint(environment)}``, or one per file) against the
    baseline's, then ``compare`` with the floor, or the floor alone without a baseline. Raises
    BaselineMismatchError (exit 2) on other hardware unless ``force``.

    ``--repeat N`` in measure.py: run, add the rows to ``current_rows``, call this, and stop at
    the first ``exit_code == 0`` or after N runs (health checks pass on the first good repeat)."""
    notes: list[str] = []
    if baseline_doc is not None:
        if not fingerprints:
            raise ValueError("check() with a baseline needs the fingerprints of this run")
        base_fp = document_fingerprint(baseline_doc)
        for name, fp in fingerprints.items():
            note = check_fingerprint(base_fp, fp, force, name)
            notes += [note] if note else []
        baseline_rows = rows_from_document(baseline_doc, baseline_name)
        diffs = compare(baseline_rows, current_rows, tolerance_pct, min_gbps)
    elif min_gbps is not None:
        diffs = check_floor(current_rows, min_gbps)
    else:
        raise ConfigError("a regression check needs --baseline FILE or --min-gbps X")
    given = baseline_doc is not None
    lines = [f"# {n}" for n in notes] + diff_table(
        diffs, tolerance_pct if given else None, min_gbps, baseline_name)
    return Check(diffs, notes, lines, exit_code(diffs, given))


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
