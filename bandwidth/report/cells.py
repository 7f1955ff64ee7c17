"""The cells and columns of the report's fixed-width tables: rates as text, the busbw cells of a
row (``n/a (1 device)`` where nothing crosses a link), and which columns name a row.
bandwidth.report.table builds its tables from these and from bandwidth.textformat (byte counts,
columns lined up), which the ceiling's tables use too."""

from __future__ import annotations

from bandwidth.results.document import Row


def gbps_cell(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def error_cell(value: float) -> str:
    return "not checked" if value < 0 else f"{value:.6f}"


def pct_cell(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f}"


ONE_DEVICE = "n/a (1 device)"     # busbw is 0 by definition with one device: nothing to show


def busbw_cells(r: Row) -> list[str]:
    """GB/s per GPU, min and max: the busbw, or n/a with one device (its algbw is still shown)."""
    if r.n < 2:
        return [ONE_DEVICE, "-", "-"]
    return [gbps_cell(r.busbw_gbps), gbps_cell(r.busbw_min), gbps_cell(r.busbw_max)]


def sources_text(rows: list[Row]) -> str:
    return ", ".join(dict.fromkeys(r.source for r in rows))


def varies(rows: list[Row], attr: str) -> bool:
    return len({getattr(r, attr) for r in rows}) > 1


def identity_columns(rows: list[Row]) -> list[tuple[str, str]]:
    """(header, Row attribute) of the columns that name a row; source, dtype and optimizer only
    where they differ between rows, so that a single run's table stays narrow; the backend
    wherever a row is not the toolkit's (an MXNet-only table says so too); the schedule, with
    ddp's bucket caps, wherever a row's is not flat (a --bucket-mb sweep's rows differ by it)."""
    columns = [("source", "source")] if varies(rows, "source") else []
    columns += [("backend", "backend")] if any(r.backend != "toolkit" for r in rows) else []
    columns += [("mode", "kv_store")]
    columns += [("schedule", "schedule")] if any(r.schedule != "flat" for r in rows) else []
    columns += [("network", "network"), ("GPUs", "devices")]
    columns += [(h, a) for h, a in (("dtype", "dtype"), ("optimizer", "optimizer"))
                if varies(rows, a)]
    return columns
