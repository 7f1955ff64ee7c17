"""The launch rule: how a mode's steps are issued on a device set, "graph", "auto" or "eager"
(``launch_of``), and how a scheduled step's are, in words for the summary's notes
(``schedule_launch_note``). The session (bandwidth.measurement.session) applies the rule; the
plan (bandwidth.plan.plan) reports it before anything is allocated.
"""

from __future__ import annotations

from bandwidth.hardware.devices import DeviceSet


def launch_of(store_cls, devices: DeviceSet, requested: str | None,
              optimizer: str = "none", schedule=None) -> str:
    """How ``store_cls``'s steps are issued on ``devices``: "graph" or "auto" where asked for (or,
    for "auto", by default) on GPUs by a mode that can capture its step there (``can_capture``;
    "auto" only where the mode's ``auto_graph`` says a graph can help), otherwise "eager". The
    session resolves "auto" to "graph" or "eager" (``Session.launch``). A ``schedule`` other than
    flat follows the same rule with one graph per part, where its parts allow graphs
    (``Schedule.graph_parts``: not fsdp's)."""
    if schedule is not None and not schedule.graph_parts:
        return "eager"
    wanted = requested or ("auto" if devices.is_cuda else "eager")
    if wanted == "auto" and not store_cls.traits.auto_graph:
        return "eager"
    if wanted in ("graph", "auto") and devices.is_cuda and store_cls.traits.can_capture(devices,
                                                                                 optimizer):
        return wanted
    return "eager"


def schedule_launch_note(schedule, store_cls, devices: DeviceSet, requested: str | None,
                         optimizer: str, graphed: bool) -> str:
    """How a scheduled step is issued, for the summary's notes: ``requested`` is the user's
    --launch (None: the default), ``graphed`` whether the session replays a graph per part."""
    parts = len(schedule.parts)
    if graphed:
        return (f"launch: each of the {parts} parts' exchanges replayed from a CUDA graph of its "
                "own on a side stream at its EXCHANGE, compute waiting on its event at its WAIT")
    if not devices.is_cuda:
        why = "CPU devices"
    elif not schedule.graph_parts:
        why = f"{schedule.name}'s parts are not captured"
    elif requested == "eager":
        why = "--launch eager"
    elif not store_cls.traits.can_capture(devices, optimizer):
        why = f"{store_cls.name} cannot capture its step here"
    elif requested != "graph" and not store_cls.traits.auto_graph:
        why = f"{store_cls.name} runs eager under --launch auto; --launch graph to capture"
    else:
        why = "launch auto's trial steps chose it, or the capture failed: see the next note"
    return f"launch: eager, each of the {parts} parts' exchanges issued from the host ({why})"
