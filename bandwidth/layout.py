"""Where each array lives inside the flat per-device buffers.

Arrays are views into one contiguous buffer per device (as DDP's gradient buckets with
``gradient_as_bucket_view``), so a mode can exchange all of them with a few large transfers instead
of one call per array. A mode chooses the order of the keys in the buffer (``key_order``); the
device mode, for instance, groups the keys by the GPU that owns them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}
TORCH_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


@dataclass(frozen=True)
class Layout:
    names: tuple[str, ...]
    shapes: tuple[tuple[int, ...], ...]
    order: tuple[int, ...]              # keys in buffer order
    offsets: tuple[int, ...]            # element offset of key k (indexed by key)

    @classmethod
    def build(cls, shapes: list[tuple[str, tuple[int, ...]]], order: list[int] | None = None):
        order = list(range(len(shapes))) if order is None else list(order)
        if sorted(order) != list(range(len(shapes))):
            raise ValueError("key order must be a permutation of the keys")
        offsets = [0] * len(shapes)
        cursor = 0
        for key in order:
            offsets[key] = cursor
            cursor += math.prod(shapes[key][1])
        return cls(tuple(n for n, _ in shapes), tuple(s for _, s in shapes), tuple(order),
                   tuple(offsets))

    @property
    def numel(self) -> int:
        return sum(math.prod(s) for s in self.shapes)

    def key_numel(self, key: int) -> int:
        return math.prod(self.shapes[key])

    def view(self, flat: torch.Tensor, key: int) -> torch.Tensor:
        """Array ``key`` as a view of the flat buffer, in its own shape."""
        start = self.offsets[key]
        return flat[start:start + self.key_numel(key)].view(self.shapes[key])


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
