"""Numbers and tables as text, for every stage's output: byte counts as nccl-tests and MXNet
write them (``format_bytes``), and fixed-width tables whose columns line up (``render``). The
report's tables, the ceiling's tables and the ceiling's messages all use these, so they sit below
both."""

from __future__ import annotations


def gbps_3(value: float) -> str:
    """A rate with 3 significant digits, as ceilings are labelled: 385, 1.18, 0.0532."""
    return f"{value:.3g}"


def format_bytes(nbytes: int) -> str:
    """Exact binary multiples as nccl-tests' sizes (``1 MiB``); network sizes in MB of 10^6 bytes
    as MXNet's size line (``257.99 MB``)."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale and nbytes % scale == 0:
            return f"{nbytes // scale} {unit}"
    if nbytes >= 10**6:
        return f"{nbytes / 1e6:.2f} MB"
    if nbytes >= 10**3:
        return f"{nbytes / 1e3:.2f} kB"
    return f"{nbytes} B"


def render(headers: list[str], cells: list[list[str]], right: set[int]) -> list[str]:
    """Columns as wide as their widest cell, two spaces apart; columns in ``right`` right-aligned
    (numbers), the others left-aligned (names)."""
    widths = column_widths(headers, cells)

    def line(values: list[str]) -> str:
        parts = [v.rjust(w) if i in right else v.ljust(w)
                 for i, (v, w) in enumerate(zip(values, widths))]
        return "  ".join(parts).rstrip()

    return [line(headers)] + [line(row) for row in cells]


def column_widths(headers: list[str], cells: list[list[str]]) -> list[int]:
    return [max([len(h)] + [len(row[i]) for row in cells]) for i, h in enumerate(headers)]
