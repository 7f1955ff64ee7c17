"""``backward``: MXNet training's order, for every kvstore mode.

Backward produces the gradients one layer at a time from the last layer to the first; each
layer's arrays are pushed (the mode's reduce + broadcast over that layer's part) the moment its
backward slot ends, without waiting for the others, as MXNet's Module pushes each gradient as soon
as the engine has written it. The next forward then starts on the first layer as soon as that
layer's arrays are back, and each later layer waits only for its own. A step therefore runs from
the first backward slot to the end of the next forward:

    B(L-1) X(L-1)  B(L-2) X(L-2) ... B(0) X(0)   W(0) F(0)  W(1) F(1) ... W(L-1) F(L-1)

(B/F: compute slots, X: exchange started, W: wait for it). With ``--compute none`` the slots are
empty and the step is every layer's exchange, queued last layer first and all in flight at once
where the mode allows.
"""

from __future__ import annotations

from bandwidth.schedules.base import BACKWARD, EXCHANGE, FORWARD, WAIT, Event, Schedule


class Backward(Schedule):
    name = "backward"
    summary = "one exchange per layer, last layer first, each as soon as its backward ends"

    def events(self) -> list[Event]:
        out: list[Event] = []
        for unit in reversed(self.units):
            out += [Event(BACKWARD, unit=unit.index), Event(EXCHANGE, part=unit.index)]
        for unit in self.units:
            out += [Event(WAIT, part=unit.index), Event(FORWARD, unit=unit.index)]
        return out
