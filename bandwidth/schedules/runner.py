"""The step runner: a schedule's events executed on one store per part.

``ScheduledStore`` looks like a kvstore mode to the session (``prepare``, ``step``, ``notes``,
``weights``, ``close``) and is built from one: each part of the schedule
(bandwidth.schedules.base) gets an instance of the mode's class over the part's run of the flat
buffers (views: the replicas' gradients and outputs of those arrays, laid out by the mode's own
``make_layout`` for the part's arrays), so the mode keeps its single operation, now over a part.
``fsdp``'s parts are ``sharded.ShardedPart`` instead (all-gather and reduce-scatter). A step runs
the events in order: EXCHANGE starts the part's operation (``KVStore.start``), WAIT completes it
(what ``start`` returned), FORWARD and BACKWARD call the compute stage's function if there is one.
That is the eager step (``step``); on GPUs, where the mode can capture its operation, ``capture``
records each part's as a CUDA graph and returns a ``graphs.PartGraphs`` whose ``replay`` runs the
same events with a replay per EXCHANGE (the session treats it as the flat step's graph).
"""

from __future__ import annotations

from bandwidth.arrays.layout import Layout, Replica
from bandwidth.schedules.base import ALL_GATHER, EXCHANGE, REDUCE, WAIT, Schedule
from bandwidth.schedules.graphs import PartGraphs
from bandwidth.schedules.sharded import ShardedPart


def scheduled_layout(schedule: Schedule, store_cls, n: int, cluster=None, **rule):
    """The flat buffers of a scheduled run: each part's arrays laid out by the mode for that part
    alone, the parts one after another in key order. Returns (layout, [(start, stop, part's
    layout)] per part)."""
    pieces, spans, cursor = [], [], 0
    for part in schedule.parts:
        sub = store_cls.make_layout(schedule.part_shapes(part), n, cluster, **rule)
        spans.append((cursor, cursor + sub.numel, sub))
        pieces += [(part.keys[0] + seg.key, seg.start, seg.length) for seg in sub.segments]
        cursor += sub.numel
    return Layout.from_pieces(schedule.shapes, pieces), spans


def exchange_order(schedule: Schedule) -> list[int]:
    """The parts in the order a step first exchanges them (the servers serve them so)."""
    return list(dict.fromkeys(e.part for e in schedule.events() if e.kind == EXCHANGE))


class ScheduledStore:
    def __init__(self, schedule: Schedule, store_cls, spans, replicas: list[Replica], optimizer,
                 group, chunk_elements, cpu_threads=None, compute=None, on_event=None, **extra):
        """``compute(event)``: runs a FORWARD or BACKWARD slot (None: empty slots);
        ``on_event(event, "start" | "end")``: called around every event (a timeline)."""
        self.schedule, self.store_cls = schedule, store_cls
        self.events = schedule.events()
        self.compute, self.on_event = compute, on_event
        self.replicas = replicas
        sharded = any(e.op == ALL_GATHER for e in self.events)
        self.stores = []
        options = {} if sharded else dict(store_cls.traits.part_options)
        for start, stop, sub in spans:
            views = [Replica(r.rank, r.device, r.grads[start:stop], r.outputs[start:stop])
                     for r in replicas]
            if sharded:
                self.stores.append(ShardedPart(views, optimizer))
            else:
                self.stores.append(store_cls(views, sub, optimizer, group, chunk_elements,
                                             cpu_threads, **extra, **options))
        tag_base = 0                 # parameter servers: message tags numbered part after part
        for index in exchange_order(schedule):
            store = self.stores[index]
            if hasattr(store, "messages"):
                store.tag_base = tag_base
                tag_base += len(store.messages)
        # With an optimizer, every part's weights (KVStore.weights); what each worker pushes to
        # each server per step, summed over the parts (KVStore.server_nbytes).
        self.weights = [weights for store in self.stores for weights in store.weights]
        self.server_nbytes: list[int] = []
        for store in self.stores:
            for server, nbytes in enumerate(getattr(store, "server_nbytes", ())):
                self.server_nbytes += [0] * (server + 1 - len(self.server_nbytes))
                self.server_nbytes[server] += nbytes
        self._waiting = {}       # (part, op): what completes the part's operation (start's)

    def notes(self) -> list[str]:
        parts = self.schedule.parts
        sizes = sorted(p.nbytes for p in parts)
        lines = [f"schedule {self.schedule.name}: {len(parts)} part(s) over "
                 f"{len(self.schedule.units)} unit(s), {sizes[0] / 1e6:.3g}-{sizes[-1] / 1e6:.3g} "
                 "MB each"]
        if not isinstance(self.stores[0], ShardedPart):
            lines += self.stores[-1].notes()
        return lines

    def prepare(self) -> None:
        for store in self.stores:
            store.prepare()

    def step(self) -> None:
        """One step issued eagerly: every part's operation from the host."""
        self.run_events(self._start, self._finish)

    def run_events(self, start, finish) -> None:
        """The step's events in order: ``start(event)`` at each EXCHANGE, ``finish(event)`` at
        each WAIT, the compute function at FORWARD and BACKWARD, ``on_event`` around each."""
        for event in self.events:
            if self.on_event is not None:
                self.on_event(event, "start")
            if event.kind == EXCHANGE:
                start(event)
            elif event.kind == WAIT:
                finish(event)
            elif self.compute is not None:
                self.compute(event)
            if self.on_event is not None:
                self.on_event(event, "end")

    def _start(self, event) -> None:
        store = self.stores[event.part]
        self._waiting[event.part, event.op] = (store.start() if event.op == REDUCE
                                               else store.start(event.op))

    def _finish(self, event) -> None:
        self._waiting.pop((event.part, event.op))()

    def settle(self) -> None:
        """Untimed, before the error check (``fsdp``: gather the reduced shards)."""
        for store in self.stores:
            if isinstance(store, ShardedPart):
                store.settle()

    def capture(self) -> PartGraphs:
        """Each part's operation captured as a CUDA graph of its own (GPUs, a mode that can
        capture; fsdp's sharded parts cannot): see graphs.PartGraphs."""
        if any(isinstance(store, ShardedPart) for store in self.stores):
            raise RuntimeError("fsdp's sharded parts are issued eagerly (no CUDA graph)")
        return PartGraphs(self)

    def close(self) -> None:
        for store in self.stores:
            store.close()
        self.stores.clear()
        self.weights.clear()
        self._waiting.clear()
