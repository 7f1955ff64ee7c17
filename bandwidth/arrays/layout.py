"""Where each array lives inside the flat per-device buffers.

Arrays are views into one contiguous buffer per device (as DDP's gradient buckets with
``gradient_as_bucket_view``), so a mode can exchange all of them with a few large transfers instead
of one call per array. A mode chooses the order of the keys in the buffer
(``KVStore.make_layout``); the device mode, for instance, groups the keys by the GPU that owns
them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch


TORCH_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


@dataclass(frozen=True)
class Segment:
    """A run of one array's elements in the flat buffer (an array split over parameter servers
    has several)."""

    key: int
    start: int          # first element within the array
    length: int
    offset: int         # first element within the flat buffer


@dataclass(frozen=True)
class Layout:
    names: tuple[str, ...]
    shapes: tuple[tuple[int, ...], ...]
    segments: tuple[Segment, ...]       # in buffer order, covering the buffer without gaps

    @classmethod
    def build(cls, shapes: list[tuple[str, tuple[int, ...]]], order: list[int] | None = None):
        """Whole arrays, one after another in ``order`` (default: key order)."""
        order = list(range(len(shapes))) if order is None else list(order)
        if sorted(order) != list(range(len(shapes))):
            raise ValueError("key order must be a permutation of the keys")
        return cls.from_pieces(shapes, [(k, 0, math.prod(shapes[k][1])) for k in order])

    @classmethod
    def from_pieces(cls, shapes, pieces: list[tuple[int, int, int]]):
        """Arrays cut into (key, start, length) pieces, laid out in the given order."""
        segments, cursor = [], 0
        for key, start, length in pieces:
            segments.append(Segment(key, start, length, cursor))
            cursor += length
        layout = cls(tuple(n for n, _ in shapes), tuple(s for _, s in shapes), tuple(segments))
        if cursor != layout.numel:
            raise ValueError(f"pieces cover {cursor} elements, the arrays hold {layout.numel}")
        return layout

    @property
    def numel(self) -> int:
        return sum(math.prod(s) for s in self.shapes)

    def key_numel(self, key: int) -> int:
        return math.prod(self.shapes[key])

    def view(self, flat: torch.Tensor, key: int) -> torch.Tensor:
        """Array ``key`` as a view of the flat buffer, in its own shape (whole arrays only)."""
        (segment,) = [s for s in self.segments if s.key == key]
        return flat[segment.offset:segment.offset + segment.length].view(self.shapes[key])


@dataclass
class Replica:
    """One participant's buffers: the gradients it pushes and the outputs it pulls into."""

    rank: int                  # global replica index, 0..n-1 over the whole job
    device: torch.device
    grads: torch.Tensor        # flat
    outputs: torch.Tensor      # flat


def chunk_ranges(start: int, stop: int, chunk: int) -> list[tuple[int, int]]:
    """[start, stop) cut into the fewest equal pieces (within one element) of at most ``chunk``
    elements; equal pieces keep a pipeline free of a short straggler at the end."""
    length = stop - start
    if length <= 0:
        return []
    pieces = -(-length // max(1, chunk))
    bounds = [start + length * i // pieces for i in range(pieces + 1)]
    return list(zip(bounds[:-1], bounds[1:]))
