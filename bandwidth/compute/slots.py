"""The compute stage's side of a schedule (bandwidth.schedules): ``Slots(runners)`` is the
``compute`` function a schedule's executor calls with each FORWARD/BACKWARD event (that unit's
work on every device of this process, in turn) and its ``on_event`` hook, which stamps when each
exchange starts and when its WAIT ends, on every device's clock, for the step's timeline.

On GPUs both stamps are events on the device's current stream, where the products run. With a
CUDA graph per part (bandwidth.schedules.graphs) the exchange itself runs on a side stream: it
starts once the compute stream reaches the EXCHANGE stamp (the side stream waits for an event
recorded there), and the compute stream waits for the part's completion at its WAIT, before the
end stamp, so an exchange's bar ends when its arrays are back or when compute reached its WAIT,
whichever is later, and the next compute slot starts after it."""

from __future__ import annotations

from bandwidth.compute.runner import Runner
from bandwidth.schedules.base import BACKWARD, EXCHANGE, FORWARD, WAIT, Event


class Slots:
    def __init__(self, runners: list[Runner], part_labels: list[str]):
        self.runners, self.part_labels = runners, part_labels
        self.tracing = False
        self.graphs = None         # compute.graphs.SlotGraphs: each slot one replay per GPU
        self._open: dict[tuple[int, str], list] = {}

    def __call__(self, event: Event) -> None:
        if event.kind not in (FORWARD, BACKWARD):
            return
        backward = event.kind == BACKWARD
        if self.graphs is not None:
            self.graphs.run(event.unit, backward, self.tracing)
            return
        if self.runners and self.runners[0].waits:
            # Timed waits stand for GPUs, which compute at once: one wait for every replica.
            starts = [runner.mark() for runner in self.runners]
            self.runners[0].wait(event.unit, backward)
            if self.tracing:
                name = f"{'bwd' if backward else 'fwd'} {self.runners[0].units[event.unit].name}"
                for runner, start in zip(self.runners, starts):
                    runner.marks.append((name, start, runner.mark(), "compute"))
            return
        for runner in self.runners:
            runner.layer(event.unit, backward=backward, trace=self.tracing)

    def on_event(self, event: Event, phase: str) -> None:
        """Stamps an exchange: its start (EXCHANGE, before it is issued) and its end (WAIT,
        after it returned). Only while tracing, so that timed steps carry no marks."""
        if not self.tracing:
            return
        if event.kind == EXCHANGE and phase == "start":
            self._open[(event.part, event.op)] = [r.mark() for r in self.runners]
        elif event.kind == WAIT and phase == "end":
            starts = self._open.pop((event.part, event.op))
            label = f"{event.op} {self.part_labels[event.part]}"
            for runner, start in zip(self.runners, starts):
                runner.marks.append((label, start, runner.mark(), "exchange"))

    def run(self, events: list[Event], exchange) -> None:
        """Execute ``events`` here, for a schedule whose whole exchange is one operation of the
        session (``flat``): ``exchange()`` at its EXCHANGE, nothing more at its WAIT."""
        for event in events:
            self.on_event(event, "start")
            if event.kind == EXCHANGE:
                exchange()
            else:
                self(event)
            self.on_event(event, "end")
