"""Figures of result Rows, chosen from what the rows hold (``plot_rows``):

* ``sweep``: flat-buffer size sweeps (``--network flat -b -e -f``): GB/s per GPU against the
  buffer size, log x axis, one line per mode and GPU set, and its ceiling dashed in the same
  colour (level where it was probed once, following the sizes where each has its own); hollow
  markers where a run beat its ceiling by more than 10 %.
* ``scaling``: the same mode and network at several GPU counts: GB/s per GPU against the GPU count
  (left) and the speed-up of the total throughput n x algbw with the ideal line (right).
* ``bars``: anything else: one bar per mode, grouped by network and GPU set, whiskers from the
  slowest to the fastest iteration, the ceiling measured in the same run drawn over each bar.

matplotlib is imported only here and only when a figure is asked for, with the Agg canvas (no
display, no pyplot state), so the rest of the toolkit runs without it.
"""

from __future__ import annotations

import textwrap
from collections import defaultdict
from pathlib import Path

from bandwidth.errors import ConfigError, UnsupportedError
from bandwidth.report.cells import sources_text
from bandwidth.report.table import scaling_series, total_gbps
from bandwidth.results.document import Row
from bandwidth.textformat import format_bytes, gbps_3

KINDS = ("bars", "scaling", "sweep")
YLABEL = "GB/s per GPU (all-reduce busbw)"


def is_flat(row: Row) -> bool:
    """A row of a flat-buffer size sweep (network label ``flat <size>``)."""
    return row.network == "flat" or row.network.startswith("flat ")


def sweep_series(rows: list[Row]) -> dict[str, list[Row]]:
    """Flat-buffer rows of one mode, GPU set, dtype and optimizer (and source, where several) at two
    or more sizes, as ``{label: rows sorted by size}``."""
    flat = [r for r in rows if is_flat(r)]
    many_sources = len({r.source for r in flat}) > 1
    groups: dict[tuple, list[Row]] = defaultdict(list)
    for r in flat:
        groups[(r.mode, r.devices, r.dtype, r.optimizer,
                r.source if many_sources else "")].append(r)
    series = {}
    for (mode, devices, dtype, optimizer, source), members in groups.items():
        if len({r.nbytes for r in members}) < 2:
            continue
        label = f"{mode} {devices}" + ("" if dtype == "float32" else f" {dtype}") \
            + ("" if optimizer == "none" else f" {optimizer}") + (f" [{source}]" if source else "")
        series[label] = sorted(members, key=lambda r: r.nbytes)
    return series


def choose_kind(rows: list[Row]) -> str:
    if sweep_series(rows):
        return "sweep"
    if scaling_series(rows):
        return "scaling"
    return "bars"


def plot_rows(rows: list[Row], path: str | Path, kind: str | None = None,
              title: str | None = None) -> str:
    """Draw ``rows`` into the PNG (or any format matplotlib knows by the suffix) ``path``; the kind
    is chosen from the rows unless given. Returns the kind drawn."""
    if not rows:
        raise ConfigError("nothing to plot: no results")
    kind = kind or choose_kind(rows)
    if kind not in KINDS:
        raise ConfigError(f"unknown plot kind {kind!r}; valid: {', '.join(KINDS)}")
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise UnsupportedError("--plot needs matplotlib, which is not installed: "
                               "pip install matplotlib") from None
    draw = {"bars": _bars, "scaling": _scaling, "sweep": _sweep}[kind]
    fig = Figure(figsize=(11, 6), dpi=110, layout="constrained")
    FigureCanvasAgg(fig)
    draw(fig, rows)
    subtitle = f"{sources_text(rows)}; medians over iterations"
    fig.suptitle((title or _TITLES[kind]) + "\n", fontsize=14, fontweight="bold")
    fig.text(0.5, 0.955, subtitle, ha="center", va="top", fontsize=9, color="0.35")
    from bandwidth.files import atomic_output

    try:
        with atomic_output(path, "the plot", binary=True) as out:
            fig.savefig(out, format=Path(path).suffix.lstrip(".").lower() or None)
    except ValueError as exc:
        raise ConfigError(f"cannot write the plot {str(path)!r}: {exc}") from None
    return kind


_TITLES = {"bars": "Gradient exchange bandwidth by kvstore mode",
           "scaling": "Scaling with the number of GPUs",
           "sweep": "Flat-buffer size sweep"}


def _colors(names) -> dict[str, str]:
    palette = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
               "#7f7f7f", "#bcbd22", "#17becf"]
    return {name: palette[i % len(palette)] for i, name in enumerate(dict.fromkeys(names))}


def _whiskers(rows: list[Row]) -> list[list[float]]:
    return [[max(r.busbw_gbps - r.busbw_min, 0) for r in rows],
            [max(r.busbw_max - r.busbw_gbps, 0) for r in rows]]


def _bars(fig, rows: list[Row]) -> None:
    ax = fig.add_subplot()
    many_sources = len({r.source for r in rows}) > 1
    groups: dict[tuple, dict[str, Row]] = defaultdict(dict)
    for r in rows:
        group = (r.network, r.devices, r.dtype, r.source if many_sources else "")
        groups[group].setdefault(r.mode, r)   # a repeated row: the first is drawn
    modes = list(dict.fromkeys(r.mode for r in rows))
    color = _colors(modes)
    width = 0.8 / len(modes)
    n_bars = sum(len(g) for g in groups.values())
    ceiling_drawn = False
    for gi, members in enumerate(groups.values()):
        present = [m for m in modes if m in members]
        for bi, mode in enumerate(present):
            r = members[mode]
            x = gi + (bi - (len(present) - 1) / 2) * width
            ax.bar(x, r.busbw_gbps, width * 0.9, color=color[mode],
                   label=mode if mode not in ax.get_legend_handles_labels()[1] else None,
                   yerr=_whiskers([r]), capsize=3,
                   ecolor="0.3", zorder=2)
            if r.ceiling_gbps and not r.ceiling_note:      # a ceiling the run beat is no bound
                ax.hlines(r.ceiling_gbps, x - width * 0.5, x + width * 0.5, colors="black",
                          linewidth=2.5, zorder=3,
                          label=None if ceiling_drawn else "ceiling\n(measured in\nthe same run)")
                ceiling_drawn = True
            if n_bars <= 24:
                text = f"{r.busbw_gbps:.3g}"
                if r.pct_of_ceiling is not None:
                    text += f"\n{r.pct_of_ceiling:.0f} %"
                top = max(r.busbw_max, r.busbw_gbps,
                          0 if r.ceiling_note else r.ceiling_gbps or 0)
                ax.annotate(text, (x, top), xytext=(0, 4),
                            textcoords="offset points", ha="center", va="bottom", fontsize=8)
    labels = []
    for network, devices, dtype, source in groups:
        label = f"{network}\n{devices}" + ("" if dtype == "float32" else f" {dtype}")
        labels.append(label + (f"\n{source}" if source else ""))
    crowded = len(groups) > 6
    ax.set_xticks(range(len(groups)), labels, fontsize=9, rotation=30 if crowded else 0,
                  ha="right" if crowded else "center")
    pad = max(0.0, (3 - len(groups)) / 2)        # a lone group keeps bars of a sensible width
    ax.set_xlim(-0.6 - pad, len(groups) - 0.4 + pad)
    ax.set_ylabel(YLABEL)
    ax.set_xlabel("network and devices")
    ax.margins(y=0.15)
    ax.set_ylim(bottom=0)
    ax.grid(axis="y", alpha=0.3, zorder=0)
    # Outside the axes, so that it never covers a bar, a label or a ceiling.
    ax.legend(title="kvstore mode", loc="upper left", bbox_to_anchor=(1.01, 1), borderaxespad=0,
              fontsize=9)


def _scaling(fig, rows: list[Row]) -> None:
    series = scaling_series(rows)
    left, right = fig.subplots(1, 2)
    color = _colors(series)
    counts = sorted({r.n for members in series.values() for r in members})
    for label, members in series.items():
        ns = [r.n for r in members]
        left.errorbar(ns, [r.busbw_gbps for r in members], yerr=_whiskers(members), marker="o",
                      capsize=3, color=color[label], label=label)
        ceilings = [(r.n, r.ceiling_gbps) for r in members
                    if r.ceiling_gbps and not r.ceiling_note]
        if ceilings:
            left.plot(*zip(*ceilings), linestyle="--", color=color[label], alpha=0.6,
                      label=f"{label}: ceiling")
        base = total_gbps(members[0])
        if base > 0:
            right.plot(ns, [total_gbps(r) / base for r in members], marker="o",
                       color=color[label], label=label)
    smallest = counts[0]
    right.plot(counts, [n / smallest for n in counts], linestyle=":", color="black",
               label="ideal (proportional to GPUs)")
    for ax in (left, right):
        ax.set_xticks(counts)
        ax.set_xlabel("GPUs (devices)")
        ax.grid(alpha=0.3)
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=8)
    left.set_ylabel(YLABEL)
    left.set_title("GB/s per GPU", fontsize=11)
    right.set_ylabel(f"speed-up of total GB/s (n x algbw) over {smallest} GPU"
                     + ("" if smallest == 1 else "s"))
    right.set_title("speed-up", fontsize=11)


def _sweep(fig, rows: list[Row]) -> None:
    series = sweep_series(rows)
    ax = fig.add_subplot()
    color = _colors(series)
    sizes = sorted({r.nbytes for members in series.values() for r in members})
    above = False
    for label, members in series.items():
        ax.errorbar([r.nbytes for r in members], [r.busbw_gbps for r in members],
                    yerr=_whiskers(members), marker="o", markersize=4, capsize=2,
                    color=color[label], label=label, zorder=3)
        beat = [r for r in members if r.ceiling_note]
        if beat:       # the run beat its ceiling there: hollow markers, no % of ceiling
            ax.plot([r.nbytes for r in beat], [r.busbw_gbps for r in beat], linestyle="none",
                    marker="o", markersize=8, markerfacecolor="white", markeredgewidth=1.5,
                    color=color[label], zorder=4)
            above = True
        _sweep_ceiling(ax, label, members, color[label])
    if above:
        ax.plot([], [], linestyle="none", marker="o", markersize=8, markerfacecolor="white",
                markeredgecolor="0.3", label="above its ceiling by > 10 %:\nno % of ceiling "
                                             "there (see the table)")
    ax.set_xscale("log", base=2)
    step = max(1, (len(sizes) + 9) // 10)     # at most about ten labelled sizes
    ticks = sizes[::step]
    ax.set_xticks(ticks, [format_bytes(s) for s in ticks], fontsize=9,
                  rotation=30 if len(ticks) > 6 else 0)
    ax.minorticks_off()
    ax.set_xlabel("buffer size (bytes per GPU, log scale)")
    ax.set_ylabel(YLABEL)
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3, which="both")
    # Each series above its ceiling; outside the axes, so that it never covers a point.
    handles, labels = ax.get_legend_handles_labels()
    order = sorted(range(len(labels)), key=lambda i: _legend_rank(labels[i], list(series)))
    ax.legend([handles[i] for i in order], [labels[i] for i in order], title="mode and devices",
              loc="upper left", bbox_to_anchor=(1.01, 1), borderaxespad=0, fontsize=8)


def _legend_rank(text: str, series: list[str]) -> tuple[int, int]:
    for k, label in enumerate(series):
        if text == label:
            return (k, 0)
        if text.startswith(f"ceiling of {label}:"):
            return (k, 1)
    return (len(series), 0)


def _sweep_ceiling(ax, label: str, members: list[Row], color: str) -> None:
    """One dashed ceiling per series: a level line where the series has one ceiling (one probe
    per mode and devices), a dashed curve where each size has its own (the nccl mode's flat
    reference of the same bytes)."""
    points = [(r.nbytes, r.ceiling_gbps) for r in members if r.ceiling_gbps]
    if not points:
        return
    name = next(r.ceiling_name for r in members if r.ceiling_gbps)
    rates = sorted({gbps for _, gbps in points})
    if len(rates) == 1:
        text = f"{name}, {gbps_3(rates[0])} GB/s"
        ax.axhline(rates[0], linestyle="--", alpha=0.8, color=color, zorder=2,
                   label=f"ceiling of {label}:\n" + "\n".join(textwrap.wrap(text, 40)))
    else:
        text = f"{name}, per size, {gbps_3(rates[0])} to {gbps_3(rates[-1])} GB/s"
        ax.plot(*zip(*points), linestyle="--", alpha=0.8, color=color, zorder=2,
                label=f"ceiling of {label}:\n" + "\n".join(textwrap.wrap(text, 40)))
