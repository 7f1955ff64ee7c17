"""``--plot`` of a single configuration with ``--compute``: one traced step's timeline, a compute
lane and an exchange lane per device (bandwidth.measurement.costs records it in the result
document's ``step_costs.timeline``: each unit's compute and each part's exchange, start and end
on each device's clock, seconds from the step's start)."""

from __future__ import annotations

from pathlib import Path

from bandwidth.errors import ConfigError, UnsupportedError

LANES = ("compute", "exchange")
COLORS = {"compute": ("#1f77b4", "#6baed6"), "exchange": ("#d62728", "#fc9272")}
LEGEND = {"compute": "compute: a unit's forward or backward",
          "exchange": "exchange: a part's gradients (the mode's step)",
          "shades": "two shades: neighbouring units or parts"}


def wanted(doc: dict) -> bool:
    """The document is one configuration measured with --compute (its plot is the timeline)."""
    results = doc.get("results", [])
    return len(results) == 1 and bool((results[0].get("step_costs") or {}).get("timeline"))


def plot_timeline(doc: dict, path: str | Path) -> str:
    fig = timeline_figure(doc)
    try:
        fig.savefig(path)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot write the plot {str(path)!r}: {exc}") from None
    return "timeline"


def timeline_figure(doc: dict):
    """The figure of ``plot_timeline``, not yet written (matplotlib's Figure)."""
    result = doc["results"][0]
    costs = result["step_costs"]
    events = costs["timeline"]
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        from matplotlib.patches import Patch
    except ImportError:
        raise UnsupportedError("--plot needs matplotlib, which is not installed: "
                               "pip install matplotlib") from None
    devices = list(dict.fromkeys(e["device"] for e in events))
    lanes = [(device, lane) for device in devices for lane in LANES]
    fig = Figure(figsize=(12, 1.2 + 0.6 * len(lanes)), dpi=110, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    for row, (device, lane) in enumerate(lanes):
        spans = [e for e in events if e["device"] == device and e["lane"] == lane]
        for index, e in enumerate(spans):
            color = COLORS[lane][index % 2]      # neighbours alternate, so each unit shows
            ax.broken_barh([(1e3 * e["start_s"], 1e3 * max(e["end_s"] - e["start_s"], 1e-6))],
                           (row - 0.35, 0.7), facecolors=color)
    ax.set_yticks(range(len(lanes)), [f"{device} {lane}" for device, lane in lanes])
    ax.invert_yaxis()
    ax.set_xlabel("ms from the step's start")
    config = result["config"]
    ax.set_title(f"{result['network']['name']} under {config['kv_store']}, "
                 f"{costs.get('schedule', 'flat')} schedule, batch {costs['batch_size']}: step "
                 f"{1e3 * costs['step_s']:.2f} ms, compute alone {1e3 * costs['compute_s']:.2f} "
                 f"ms, exchange alone {1e3 * costs['exchange_s']:.2f} ms, performance ratio "
                 f"{costs['performance_ratio']:.3f}", fontsize=10)
    ax.legend(handles=[Patch(facecolor=COLORS[lane][0], label=LEGEND[lane]) for lane in LANES]
              + [Patch(facecolor="none", edgecolor="none", label=LEGEND["shades"])],
              loc="upper right", fontsize=8)
    return fig
