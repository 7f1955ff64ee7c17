"""Cross-process combination, written once: barrier, max, sum and gather over the ranks of a job.

A single-process run uses LocalGroup (one rank, every operation trivial); a run of one process per
device uses DistGroup over torch.distributed's default process group.
"""

from __future__ import annotations

import torch


class LocalGroup:
    rank = 0
    size = 1
    backend = "none"

    def barrier(self) -> None:
        pass

    def max(self, value: float) -> float:
        return value

    def sum(self, value: float) -> float:
        return value

    def gather(self, item) -> list:
        return [item]


class DistGroup:
    """``group``: a torch.distributed group (default: every rank), e.g. only the workers of a
    parameter-server job."""

    def __init__(self, device: torch.device, group=None):
        import torch.distributed as dist

        self._dist = dist
        self._group = group
        self.rank = dist.get_rank(group)
        self.size = dist.get_world_size(group)
        self.backend = dist.get_backend(group)
        # NCCL reduces only device tensors; Gloo host tensors.
        self._device = device if self.backend == "nccl" else torch.device("cpu")

    def barrier(self) -> None:
        self._reduce(0.0, self._dist.ReduceOp.SUM)

    def max(self, value: float) -> float:
        return self._reduce(value, self._dist.ReduceOp.MAX)

    def sum(self, value: float) -> float:
        return self._reduce(value, self._dist.ReduceOp.SUM)

    def gather(self, item) -> list:
        """Every rank's ``item`` (any picklable value), in rank order, on every rank."""
        items = [None] * self.size
        self._dist.all_gather_object(items, item, group=self._group)
        return items

    def _reduce(self, value: float, op) -> float:
        # A tiny all-reduce doubles as a barrier and works the same on NCCL and Gloo.
        t = torch.tensor([value], dtype=torch.float64, device=self._device)
        self._dist.all_reduce(t, op=op, group=self._group)
        return float(t.item())
