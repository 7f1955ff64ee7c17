"""The small interface every kvstore mode fills in.

A mode receives this process's replicas (flat gradient and output buffers, see
bandwidth.arrays.layout), the optimizer (or None) and a group for cross-process work, and supplies
only its own operation: set-up in ``__init__``, one reduce + broadcast of every array in ``step``,
and ``unavailable`` saying when it cannot run here and why. What the driver reads about a mode
before it runs is not here but in two small objects the mode holds: ``traits`` (its words and
flags, bandwidth.stores.traits) and ``costs`` (its bus factor, network traffic and memory,
bandwidth.stores.costs). The driver never tests a mode's name.
"""

from __future__ import annotations

from typing import Callable, ClassVar

from bandwidth.arrays.layout import Layout, Replica
from bandwidth.arrays.optimizers import Sgd
from bandwidth.hardware.devices import DeviceSet
from bandwidth.stores.costs import Costs
from bandwidth.stores.traits import Traits


class KVStore:
    name: ClassVar[str]
    # What the mode is, in words and flags; what it moves and needs (memory, network).
    traits: ClassVar[Traits]
    costs: ClassVar[Costs] = Costs()

    @classmethod
    def unavailable(cls, devices: DeviceSet, dtype: str) -> str | None:
        """Why this mode cannot run on ``devices`` with ``dtype`` (None: it can)."""
        return None

    @classmethod
    def make_layout(cls, shapes, n: int, cluster=None) -> Layout:
        """How the arrays sit in the flat buffers (default: whole, in key order)."""
        return Layout.build(shapes)

    def __init__(self, replicas: list[Replica], layout: Layout, optimizer: Sgd | None, group,
                 chunk_elements: int | None, cpu_threads: int | None = None):
        self.replicas = replicas
        self.layout = layout
        self.optimizer = optimizer
        self.group = group
        self.chunk_elements = chunk_elements
        self.cpu_threads = cpu_threads
        # With an optimizer, the buffers that hold the weights, zero as ``__init__`` leaves them:
        # untimed trial steps are undone by zeroing them (default: the outputs, where most modes
        # keep the weights).
        self.weights = [replica.outputs for replica in replicas]
        # Bytes this worker pushes to (and pulls from) each server per step; [] without servers.
        self.server_nbytes: list[int] = []

    def notes(self) -> list[str]:
        """Set-up facts worth printing (peer access, key placement, stand-ins)."""
        return []

    def prepare(self) -> None:
        """Untimed work before each step (default: none)."""

    def step(self) -> None:
        raise NotImplementedError

    def start(self) -> Callable[[], None]:
        """Begin a step without waiting for it where the mode can (a collective with
        ``async_op``, messages in flight), so that a schedule (bandwidth.schedules) has several
        parts' exchanges in flight at once; returns what completes it: afterwards the outputs
        hold the step's result. Default: the whole step now, nothing left to complete."""
        self.step()
        return _complete

    def capture(self):
        """One step recorded as a ``torch.cuda.CUDAGraph`` (GPUs only, ``traits.graph_capable``
        modes): the session replays it in place of ``step``. Called once, untimed, before the
        first step; it must leave the buffers as ``__init__`` did."""
        raise NotImplementedError

    def record_step(self) -> None:
        """What ``capture`` records, issued on the current stream while a larger graph is being
        captured there (a whole scheduled step, bandwidth.schedules.graphs.capture_step): every
        other stream the step uses is forked from the current one and joined back to it. Called
        after ``capture`` (which ran the eager warm-up), on one GPU."""
        raise NotImplementedError

    def close(self) -> None:
        """Release what ``__init__`` set up."""


def _complete() -> None:
    """What completes a step that ``start`` ran whole: nothing."""
