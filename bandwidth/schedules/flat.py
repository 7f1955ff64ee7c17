"""``flat``: today's step, the default. Every array in one part, exchanged by the mode's single
operation with nothing else running; the session runs it exactly as before the schedule stage
existed (same store, same layout, CUDA graphs where the mode has them), so every figure is
unchanged."""

from __future__ import annotations

from bandwidth.schedules.base import BACKWARD, EXCHANGE, FORWARD, WAIT, Event, Part, Schedule


class Flat(Schedule):
    name = "flat"
    summary = "every array in one exchange, nothing else running (today's step)"

    def make_parts(self) -> list[Part]:
        keys = tuple(range(len(self.shapes)))
        return [Part(0, keys, self.nbytes(keys), "all arrays")]

    def events(self) -> list[Event]:
        units = range(len(self.units))
        return ([Event(BACKWARD, unit=u) for u in reversed(units)]
                + [Event(EXCHANGE, part=0), Event(WAIT, part=0)]
                + [Event(FORWARD, unit=u) for u in units])
