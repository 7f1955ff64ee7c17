"""Fixed-width text tables and CSV of result Rows (bandwidth.results.document.Row).

Three tables, each opened by a ``#`` line that says what it shows:

* ``sweep_table``: one line per measured configuration (mode x network x GPUs): GB/s per GPU
  (the all-reduce busbw, MXNet's "GB/sec per gpu", median over iterations; ``n/a (1 device)``
  where one device moves nothing across a link), algbw, % of the ceiling measured in the same run
  (``n/a`` when none was, or when the run beat it), and the largest error; under it one line per
  ceiling.
* ``ratio_table``: every row's GB/s per GPU as a ratio to one baseline row (1.00 for the baseline),
  the "performance ratio" tables of remote-GPU and network studies.
* ``backend_table``: where rows of several backends (``--backend toolkit,mxnet``) measured the
  same mode, network and GPUs: their GB/s per GPU side by side and the ratio to the toolkit's.
* ``speedup_table``: for scaling runs (same mode and network at several GPU counts), the total
  throughput n x algbw against the smallest GPU count, the ideal, and the per-GPU efficiency.

``write_csv`` writes every Row field (plus % of ceiling) with units in the column names.
"""

from __future__ import annotations

import csv
from collections import defaultdict
from pathlib import Path

from bandwidth.errors import ConfigError
from bandwidth.report.cells import (busbw_cells, error_cell, gbps_cell, identity_columns,
                                    pct_cell, sources_text, varies)
from bandwidth.results.costs import HOST_PACED
from bandwidth.results.document import Row
from bandwidth.textformat import column_widths, format_bytes, gbps_3, render

CSV_COLUMNS = ("source", "kv_store", "network", "devices", "n", "dtype", "optimizer", "nbytes",
               "busbw_gbps", "busbw_min", "busbw_max", "algbw_gbps", "seconds", "error",
               "ceiling_name", "ceiling_gbps", "pct_of_ceiling", "backend", "ceiling_note",
               "batch_size", "compute_s", "exchange_s", "step_s", "exposed_s", "overlap",
               "samples_per_s", "performance_ratio", "framework_s", "framework_own_s",
               "framework_host_s")


# ---------------------------------------------------------------------------------------------
# tables


def sweep_table(rows: list[Row], title: str | None = None) -> list[str]:
    """The main table: one line per row, numbered from 1 (the numbers --baseline-row takes)."""
    if not rows:
        return ["# no results"]
    ident = identity_columns(rows)
    headers = ["row"] + [h for h, _ in ident] + [
        "size", "GB/s per GPU", "min GB/s", "max GB/s", "algbw GB/s", "% of ceiling", "error"]
    cells = [[str(i)] + [str(getattr(r, a)) for _, a in ident] + [format_bytes(r.nbytes)]
             + busbw_cells(r) + [gbps_cell(r.algbw_gbps), pct_cell(r.pct_of_ceiling), error_cell(r.error)]
             for i, r in enumerate(rows, 1)]
    first_number = 1 + len(ident)
    right = {0} | set(range(first_number, len(headers)))
    plural = "s" if len(rows) != 1 else ""
    lines = [title or f"# {len(rows)} result{plural} from {sources_text(rows)}",
             ("# GB/s per GPU = all-reduce busbw (MXNet's GB/sec per gpu), median over iterations "
              "(min, max beside it); algbw = bytes / time")]
    lines += render(headers, cells, right)
    return lines + ceiling_lines(rows)


def step_table(rows: list[Row]) -> list[str]:
    """What a step cost (--compute), per row; among rows of the same measurement but for ddp's
    bucket caps (a --bucket-mb sweep), the fastest step is marked."""
    def group(r: Row) -> tuple:          # the measurement but for ddp's bucket caps
        return (r.kv_store, r.network, r.devices, r.dtype, r.optimizer, r.backend,
                r.schedule.split()[0])

    fastest = {}
    for i, r in enumerate(rows):
        if r.step_s is not None and (group(r) not in fastest
                                     or r.step_s < rows[fastest[group(r)]].step_s):
            fastest[group(r)] = i
    counts = {key: sum(1 for r in rows if group(r) == key and r.step_s is not None)
              for key in fastest}
    framework = any(r.framework_s is not None for r in rows)
    headers = ["row", "schedule", "batch", "compute ms", "exchange ms", "step ms", "exposed ms",
               "overlap", "samples/s", "perf. ratio"] + (
        ["framework ms", "its own ms", "its host ms"] if framework else []) + [""]
    cells = []
    for i, r in enumerate(rows):
        if r.step_s is None:
            continue
        mark = "<- fastest" if counts[group(r)] > 1 and fastest[group(r)] == i else ""
        cells.append([str(i + 1), r.schedule, str(r.batch_size), f"{1e3 * r.compute_s:.3f}",
                      f"{1e3 * r.exchange_s:.3f}", f"{1e3 * r.step_s:.3f}",
                      f"{1e3 * r.exposed_s:.3f}", f"{100 * r.overlap:.1f} %",
                      f"{r.samples_per_s:.1f}", f"{r.performance_ratio:.3f}"]
                     + ([_ms(r.framework_s), _ms(r.framework_own_s),
                         _host(r.framework_host_s, r.framework_s)] if framework else [])
                     + [mark])
    lines = ["# what a step costs (--compute): medians; exposed = step - compute alone, overlap = "
             "1 - exposed / exchange alone, performance ratio = compute alone / step"
             + ("; framework: the framework's own step (--framework), its own = framework - "
                "compute alone - exposed, its host = the host's time to issue it (* where it "
                "paces the step)" if framework else "")]
    return lines + render(headers, cells, {0} | set(range(2, len(headers) - 1)))


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{1e3 * seconds:.3f}"


def _host(host_s: float | None, step_s: float | None) -> str:
    """The host's time to issue a step, starred where it paces it (HOST_PACED of the step)."""
    if host_s is None:
        return "-"
    paced = bool(step_s) and host_s > HOST_PACED * step_s
    return f"{1e3 * host_s:.3f}{'*' if paced else ''}"


def ceiling_lines(rows: list[Row]) -> list[str]:
    """One line per mode (and GPU set, where several) and ceiling: its rate, or the range of rates
    where each row has its own (the nccl mode's flat reference); then the rows whose run beat
    their ceiling, with the reason."""
    by_devices = varies(rows, "devices")
    groups: dict[tuple, list[tuple[int, Row]]] = defaultdict(list)
    for i, r in enumerate(rows, 1):
        if r.ceiling_gbps:
            groups[(r.mode, r.devices if by_devices else "", r.ceiling_name)].append((i, r))
    lines = []
    for (mode, devices, name), members in groups.items():
        rates = sorted({r.ceiling_gbps for _, r in members})
        rate = f"{gbps_3(rates[0])} GB/s" if len(rates) == 1 else \
            f"per row, {gbps_3(rates[0])} to {gbps_3(rates[-1])} GB/s"
        where = f" on {devices}" if devices else ""
        lines.append(f"# ceiling of {mode}{where}: {name}, {rate} (measured in the same run)")
        notes: dict[str, list[int]] = defaultdict(list)
        for i, r in members:
            if r.ceiling_note:
                notes[r.ceiling_note].append(i)
        for note, numbers in notes.items():
            which = "row" + ("s " if len(numbers) > 1 else " ") + ", ".join(map(str, numbers))
            lines.append(f"#   {which}: % of ceiling n/a, {note}")
    return lines


def pick_baseline_row(rows: list[Row], spec: str | int | None) -> int:
    """The index (0-based) of the row named by ``--baseline-row``: a row number of the sweep table
    (from 1), or a label ``MODE NETWORK GPUS`` (optionally ``SOURCE MODE NETWORK GPUS``), or a
    text found in exactly one row's ``SOURCE MODE NETWORK GPUS``. None: the first row."""
    if not rows:
        raise ConfigError("no results to take a baseline row from")
    if spec is None:
        return 0
    text = str(spec).strip()
    if text.isdigit():
        number = int(text)
        if not 1 <= number <= len(rows):
            raise ConfigError(f"--baseline-row {number} is not a row number: the table has rows "
                              f"1 to {len(rows)}")
        return number - 1
    full = [f"{r.source} {r.label}" for r in rows]
    for candidates in ([i for i, r in enumerate(rows) if r.label == text],
                       [i for i, f in enumerate(full) if f == text],
                       [i for i, f in enumerate(full) if text in f]):
        if len(candidates) == 1:
            return candidates[0]
        if len(candidates) > 1:
            names = "; ".join(f"{i + 1}: {full[i]}" for i in candidates)
            raise ConfigError(f"--baseline-row {text!r} matches {len(candidates)} rows ({names}); "
                              "give the row number instead")
    names = "; ".join(f"{i}: {f}" for i, f in enumerate(full, 1))
    raise ConfigError(f"--baseline-row {text!r} matches no row; give a row number or a label "
                      f"among: {names}")


def ratio_table(rows: list[Row], baseline_index: int = 0) -> list[str]:
    """Each row's GB/s per GPU divided by the baseline row's: 1.00 for the baseline, higher is
    better; ``n/a`` where the baseline moves no bytes across a link (one device: busbw 0)."""
    if not rows:
        return ["# no results"]
    base = rows[baseline_index]
    ident = identity_columns(rows)
    headers = ["row"] + [h for h, _ in ident] + ["GB/s per GPU", "ratio", ""]
    cells = []
    for i, r in enumerate(rows):
        ratio = f"{r.busbw_gbps / base.busbw_gbps:.2f}" if base.busbw_gbps > 0 else "n/a"
        cells.append([str(i + 1)] + [str(getattr(r, a)) for _, a in ident]
                     + [gbps_cell(r.busbw_gbps), ratio, "baseline" if i == baseline_index else ""])
    right = {0, len(ident) + 1, len(ident) + 2}
    where = f" in {base.source}" if varies(rows, "source") else ""
    return [(f"# performance ratio: GB/s per GPU of each row / row {baseline_index + 1} "
            f"({base.label}{where}); 1.00 = the baseline, higher is better")] \
        + render(headers, cells, right)


def backend_table(rows: list[Row]) -> list[str]:
    """The same measurement (mode, network, GPUs, dtype, optimizer) under each backend: GB/s per
    GPU side by side, whatever file each came from, and every other backend's ratio to the
    toolkit's (to the first backend where the toolkit is absent). Repeats: the median row."""
    backends = list(dict.fromkeys(r.backend for r in rows))
    base = "toolkit" if "toolkit" in backends else backends[0]
    others = [b for b in backends if b != base]
    groups: dict[tuple, dict[str, list[Row]]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        groups[r.key[:-1]][r.backend].append(r)     # Row.key without the backend
    pairs = {key: {b: _median_row(members) for b, members in by.items()}
             for key, by in groups.items() if base in by and len(by) > 1}
    if not pairs:
        return [f"# backends: no measurement was made under {base} and another backend alike "
                "(same mode, network, GPUs, dtype and optimizer)"]
    ident = [("mode", "kv_store"), ("network", "network"), ("GPUs", "devices")]
    ident += [(h, a) for h, a in (("dtype", "dtype"), ("optimizer", "optimizer"))
              if varies(rows, a)]
    headers = [h for h, _ in ident] + [f"{b} GB/s" for b in [base] + others] \
        + [f"{b} / {base}" for b in others] + [f"{b} error" for b in [base] + others]
    cells = []
    for by in pairs.values():
        row = by[base]
        ratios = [f"{by[b].busbw_gbps / row.busbw_gbps:.2f}" if b in by and row.busbw_gbps > 0
                  else "n/a" for b in others]
        cells.append([str(getattr(row, a)) for _, a in ident]
                     + [gbps_cell(by[b].busbw_gbps) if b in by else "-" for b in [base] + others]
                     + ratios + [error_cell(by[b].error) if b in by else "-" for b in [base] + others])
    right = set(range(len(ident), len(headers)))
    return [(f"# backends side by side: GB/s per GPU (median) of the same measurement; "
             f"{', '.join(others)} / {base} > 1 means faster than {base}")] \
        + render(headers, cells, right)


def scaling_series(rows: list[Row]) -> dict[str, list[Row]]:
    """Scaling runs: rows of the same mode, network, dtype, optimizer and device kind measured at
    two or more device counts, as ``{series label: rows sorted by device count}``. Where one
    series has several rows at a count from different sources (TCP vs RDMA runs, two machines),
    each source is its own series; repeats within a source are represented by their median row.
    One-device rows are left out: nothing crosses a link, so their busbw is 0 by definition and
    their exchange time measures no communication."""
    groups: dict[tuple, list[Row]] = defaultdict(list)
    for r in rows:
        if r.n < 2:
            continue
        kind = r.devices.split(":")[0].split(" ")[0]
        groups[(r.mode, r.network, r.dtype, r.optimizer, kind)].append(r)
    dtypes_vary, opts_vary = varies(rows, "dtype"), varies(rows, "optimizer")
    series: dict[str, list[Row]] = {}
    for (mode, network, dtype, optimizer, _), members in groups.items():
        counts = [r.n for r in members]
        split = len(set(counts)) < len(counts) and len({r.source for r in members}) > 1
        parts = defaultdict(list)
        for r in members:
            parts[r.source if split else ""].append(r)
        for source, part in parts.items():
            by_n = defaultdict(list)
            for r in part:
                by_n[r.n].append(r)
            if len(by_n) < 2:
                continue
            label = f"{mode} {network}" + (f" {dtype}" if dtypes_vary else "") \
                + (f" {optimizer}" if opts_vary else "") + (f" [{source}]" if source else "")
            series[label] = [_median_row(by_n[n]) for n in sorted(by_n)]
    return series


def _median_row(rows: list[Row]) -> Row:
    ordered = sorted(rows, key=lambda r: r.busbw_gbps)
    return ordered[(len(ordered) - 1) // 2]


def total_gbps(row: Row) -> float:
    """Total throughput of a data-parallel exchange: every one of the n devices gets its S bytes
    reduced in time t, so n x algbw (algbw = S / t)."""
    return row.n * (row.algbw_gbps or 0.0)


def speedup_table(rows: list[Row]) -> list[str]:
    """GPU scaling in the form of 'images/sec and speed-up per GPU count' tables: one line per
    device count, per series a column group of total GB/s, speed-up against the series' smallest
    count, and efficiency = speed-up / ideal speed-up (ideal: proportional to the count)."""
    series = scaling_series(rows)
    if not series:
        counts = sorted({r.n for r in rows})
        return [("# speed-up: none: it compares the same mode and network at two or more device "
                 "counts of 2 or more, and these rows have "
                 + (f"only the count{'s' if len(counts) > 1 else ''} "
                    f"{', '.join(map(str, counts))}" if counts else "none")
                 + "; measure at more counts (--scaling on more devices, or several --gpus sets)")]
    counts = sorted({r.n for members in series.values() for r in members})
    headers = ["GPUs"]
    for _ in series:
        headers += ["total GB/s", "speed-up", "efficiency"]
    cells = []
    for n in counts:
        line = [str(n)]
        for members in series.values():
            first = members[0]
            row = next((r for r in members if r.n == n), None)
            if row is None:
                line += ["-", "-", "-"]
                continue
            base, now = total_gbps(first), total_gbps(row)
            if base > 0:
                speedup = now / base
                efficiency = speedup / (n / first.n)
                line += [f"{now:.3f}", f"{speedup:.2f}", f"{100 * efficiency:.0f} %"]
            else:
                line += [f"{now:.3f}", "n/a", "n/a"]
        cells.append(line)
    # Above the column headers, each series' label centred over its three columns (the first of
    # them widened where the label is longer than the three).
    widths = column_widths(headers, cells)
    group_line = " " * widths[0]
    for k, label in enumerate(series):
        first = 1 + 3 * k
        span = sum(widths[first:first + 3]) + 4
        if len(label) + 2 > span:
            headers[first] = headers[first].rjust(widths[first] + len(label) + 2 - span)
            span = len(label) + 2
        group_line += "  " + f" {label} ".center(span, "-")
    return [("# speed-up with added GPUs: total GB/s = n x algbw (every GPU's bytes reduced per "
            "second, all GPUs together)"),
            ("# against each series' smallest GPU count; efficiency = speed-up / (n / smallest n); "
            "one GPU is left out (nothing crosses a link)"),
            group_line.rstrip()] \
        + render(headers, cells, set(range(len(headers))))


# ---------------------------------------------------------------------------------------------
# CSV


def write_csv(rows: list[Row], path: str | Path) -> None:
    """One line per row, every Row field plus pct_of_ceiling; numbers unformatted; an unknown value
    (no ceiling, error not checked) is an empty cell."""
    from bandwidth.files import atomic_output

    with atomic_output(path, "the CSV", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(CSV_COLUMNS)
        for r in rows:
            values = []
            for column in CSV_COLUMNS:
                value = getattr(r, column)
                if value is None or (column == "error" and value < 0):
                    value = ""
                values.append(value)
            writer.writerow(values)


def report_lines(rows: list[Row], baseline_row: str | int | None = None,
                 speedup: bool = False, title: str | None = None) -> list[str]:
    """What a sweep or a comparison prints: the main table, then the ratio table against
    ``baseline_row`` (when there are two rows or more), then the speed-up table (``speedup``),
    separated by blank lines. A bad ``baseline_row`` is a ConfigError."""
    lines = sweep_table(rows, title)
    if len(rows) > 1:
        lines += [""] + ratio_table(rows, pick_baseline_row(rows, baseline_row))
    if any(r.step_s is not None for r in rows):
        lines += [""] + step_table(rows)
    if varies(rows, "backend"):
        lines += [""] + backend_table(rows)
    if speedup:
        lines += [""] + speedup_table(rows)
    return lines
