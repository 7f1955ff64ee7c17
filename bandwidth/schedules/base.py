"""The interface of the schedule stage: units, parts and the events of one step.

A schedule turns the network's ordered ``(name, shape)`` arrays into

- **units**: the network's layers (a schedule may group them into blocks, as FSDP wraps a
  transformer block), in forward order, unit 0 first; every array belongs to exactly one unit.
  Units are where compute happens: each has a forward and a backward compute slot.
- **parts**: what one operation of the store exchanges: whole arrays, a run of consecutive keys
  (so a part is one contiguous run of the flat buffers, ``Schedule.part_ranges``). A layer under
  ``backward``, a bucket under ``ddp``, a unit under ``fsdp``, everything under ``flat``. Parts
  are numbered in key order; the events say in which order they are exchanged.
- **events**: one step as an ordered list, which ``runner.ScheduledStore.step`` executes top to
  bottom on every device of the process:

  ========================  ==================================================================
  ``Event(FORWARD, unit)``  the forward compute slot of ``unit`` (empty with ``--compute none``)
  ``Event(BACKWARD, unit)`` the backward compute slot of ``unit`` (empty with ``--compute none``)
  ``Event(EXCHANGE, part=p, op=o)`` start operation ``o`` on part ``p``, asynchronously where the
                            mode allows it (a collective with ``async_op``, messages in flight,
                            copies queued on streams): ``REDUCE`` is the mode's own reduce +
                            broadcast (an all-reduce for nccl), ``ALL_GATHER`` and
                            ``REDUCE_SCATTER`` are FSDP's halves of it
  ``Event(WAIT, part=p, op=o)`` block until that operation is complete on this process (its
                            arrays are back and may be read by the next compute slot)
  ========================  ==================================================================

  Every EXCHANGE has exactly one WAIT after it (``check_events``), so a step ends with every
  exchange complete and the error check reads finished arrays. A step's compute slots run in the
  order listed; a compute stage (``--compute``) gets each FORWARD/BACKWARD event and runs that
  unit's work on every device of the process (``runner.ScheduledStore(..., compute=fn)``, with
  ``fn(event)``); ``runner`` also calls an ``on_event(event, "start"|"end")`` hook around every
  event, where a timeline can stamp them.

Adding a schedule: a module with a ``Schedule`` subclass (``name``, ``summary``, ``modes``,
``units``/``parts`` if not the defaults, ``events``) and one line in ``registry.SCHEDULES``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import ClassVar

FORWARD = "forward"
BACKWARD = "backward"
EXCHANGE = "exchange"
WAIT = "wait"

REDUCE = "reduce"                  # the mode's own operation: reduce + broadcast (all-reduce)
ALL_GATHER = "all-gather"
REDUCE_SCATTER = "reduce-scatter"

Shapes = list[tuple[str, tuple[int, ...]]]


@dataclass(frozen=True)
class Unit:
    """A layer (or block) of the network: arrays ``keys`` (consecutive, in key order)."""

    index: int
    name: str
    keys: tuple[int, ...]


@dataclass(frozen=True)
class Part:
    """What one store operation exchanges: arrays ``keys`` (consecutive, in key order), ``nbytes``
    bytes in the run's dtype."""

    index: int
    keys: tuple[int, ...]
    nbytes: int
    label: str


@dataclass(frozen=True)
class Event:
    kind: str                      # FORWARD, BACKWARD, EXCHANGE or WAIT
    unit: int | None = None        # FORWARD, BACKWARD: the unit
    part: int | None = None        # EXCHANGE, WAIT: the part
    op: str = REDUCE               # EXCHANGE, WAIT: REDUCE, ALL_GATHER or REDUCE_SCATTER


def layer_name(array: str) -> str:
    """The layer an array belongs to: its name without the last ``_``- or ``.``-separated word
    (``fc1_weight`` -> ``fc1``, ``h.0.attn.c_attn.weight`` -> ``h.0.attn.c_attn``)."""
    head = re.split(r"[._](?=[^._]*$)", array, maxsplit=1)
    return head[0] if len(head) == 2 and head[0] else array


def layers(shapes: Shapes) -> list[Unit]:
    """The network's layers: runs of consecutive arrays with the same ``layer_name``."""
    units: list[Unit] = []
    for key, (array, _) in enumerate(shapes):
        name = layer_name(array)
        if units and units[-1].name == name:
            last = units[-1]
            units[-1] = Unit(last.index, name, last.keys + (key,))
        else:
            units.append(Unit(len(units), name, (key,)))
    return units


def check_events(events: list[Event], units: int, parts: int) -> None:
    """A step's events are well formed: every unit's slots appear once each, every part's
    EXCHANGE is followed by one WAIT of the same op, and nothing waits for what has not started
    (ValueError otherwise: a schedule's bug, not the user's)."""
    started: dict[tuple[int, str], int] = {}
    slots = []
    for event in events:
        if event.kind in (FORWARD, BACKWARD):
            slots.append((event.kind, event.unit))
        elif event.kind == EXCHANGE:
            started[(event.part, event.op)] = started.get((event.part, event.op), 0) + 1
        elif event.kind == WAIT:
            if started.get((event.part, event.op), 0) < 1:
                raise ValueError(f"wait for part {event.part} ({event.op}) before it started")
            started[(event.part, event.op)] -= 1
        else:
            raise ValueError(f"unknown event kind {event.kind!r}")
    if any(started.values()):
        raise ValueError("an exchange is never waited for")
    if sorted(slots, key=str) != sorted([(k, u) for k in (FORWARD, BACKWARD)
                                         for u in range(units)], key=str):
        raise ValueError("every unit needs one forward and one backward slot")
    exchanged = {part for part, _ in started}
    if exchanged != set(range(parts)):
        raise ValueError("every part must be exchanged")


class Schedule:
    """One step's parts and events for arrays ``shapes`` of ``element_bytes`` bytes each."""

    name: ClassVar[str]
    summary: ClassVar[str]
    # The kvstore modes this schedule can run (None: every mode).
    modes: ClassVar[tuple[str, ...] | None] = None
    # What ``modes`` lists in words, for the error of a mode it cannot run.
    modes_why: ClassVar[str] = ""
    # True: on GPUs each part's operation can be a CUDA graph of its own where the mode can capture
    # its step (runner.ScheduledStore.capture, graphs.PartGraphs); False: always issued eagerly.
    graph_parts: ClassVar[bool] = True
    # What PyTorch takes this schedule's step with under --framework torch (its own step beside
    # the schedule's: bandwidth.measurement.framework); None: PyTorch has no counterpart.
    framework: ClassVar[str | None] = None
    # Where it lives: (module, name), which must import for the framework's step to run.
    framework_api: ClassVar[tuple[str, str] | None] = None

    def __init__(self, shapes: Shapes, element_bytes: int, **options):
        self.shapes = list(shapes)
        self.element_bytes = element_bytes
        self.options = options
        self.units = self.make_units()
        self.parts = self.make_parts()

    @classmethod
    def unavailable(cls, kv_store: str) -> str | None:
        """Why this schedule cannot run under ``kv_store`` (None: it can)."""
        if cls.modes is not None and kv_store not in cls.modes:
            return (f"--schedule {cls.name} runs under --kv-store {', '.join(cls.modes)} only "
                    f"({cls.modes_why}), not {kv_store}")
        return None

    def nbytes(self, keys) -> int:
        return sum(math.prod(self.shapes[k][1]) for k in keys) * self.element_bytes

    def make_units(self) -> list[Unit]:
        return layers(self.shapes)

    def make_parts(self) -> list[Part]:
        """Default: one part per unit."""
        return [Part(u.index, u.keys, self.nbytes(u.keys), u.name) for u in self.units]

    def events(self) -> list[Event]:
        raise NotImplementedError

    def extra_bytes_per_device(self, nbytes: int, n: int, optimizer: bool) -> int:
        """Device memory the schedule's stores need beyond the mode's own (default: none)."""
        return 0

    def framework_bytes(self, nbytes: int, n: int) -> int:
        """Device memory the framework's step (--framework) adds: its module's parameters, the
        gradients the backward hands it, and the framework's own buffers."""
        return 0

    def bus_factor(self, store_cls, n: int) -> float:
        """Bytes each device moves per byte of the arrays in a step (default: the mode's)."""
        return store_cls.costs.bus_factor(n)

    def unit_of_key(self) -> list[int]:
        owner = [0] * len(self.shapes)
        for unit in self.units:
            for key in unit.keys:
                owner[key] = unit.index
        return owner

    def part_shapes(self, part: Part) -> Shapes:
        return [self.shapes[k] for k in part.keys]

    def describe(self) -> list[dict]:
        """The parts for the result document: members (array names) and bytes, in the order of
        their first exchange in a step."""
        order = list(dict.fromkeys(e.part for e in self.events() if e.kind == EXCHANGE))
        return [{"index": p.index, "label": p.label, "nbytes": p.nbytes,
                 "arrays": [self.shapes[k][0] for k in p.keys]}
                for p in (self.parts[i] for i in order)]
