"""FSDP's two halves of an all-reduce over one part of the arrays, one process per device
(``nccl``, ``dist_nccl``): the store the ``fsdp`` schedule runs on each of its parts.

Each device keeps a shard of ``ceil(numel / n)`` elements of the part (the last device's padded
with zeros). ``REDUCE_SCATTER`` sums every device's gradients of the part and leaves on each
device the sum of its own shard (with an optimizer, the shard of the weights is then updated from
it); ``ALL_GATHER`` puts every device's shard together into the part's full parameters (the
outputs). The gradients are reduce-scattered straight from the flat buffer where the part divides
evenly, else from a padded copy written by the untimed ``prepare`` (as the nccl mode's bucket);
likewise the all-gather lands straight in the outputs, else in a padded buffer copied into them.
"""

from __future__ import annotations

import functools
from typing import Callable

import torch
import torch.distributed as dist

from bandwidth.schedules.base import ALL_GATHER, REDUCE_SCATTER

# torch 2.13 names them *_single; older torch has only *_tensor.
_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
_scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


class ShardedPart:
    def __init__(self, replicas, optimizer):
        (replica,) = replicas
        self.replica, self.optimizer = replica, optimizer
        numel = replica.grads.numel()
        self.n = dist.get_world_size()      # every device of the run, one process each
        self.shard_numel = -(-numel // self.n)
        padded = self.shard_numel * self.n
        self.even = padded == numel
        like = replica.grads
        self.grads_in = like if self.even else torch.zeros(padded, dtype=like.dtype,
                                                           device=like.device)
        self.gathered = replica.outputs if self.even else torch.zeros_like(self.grads_in)
        self.reduced = torch.zeros(self.shard_numel, dtype=like.dtype, device=like.device)
        # The shard the all-gather sends: the reduced gradients, or with an optimizer the weights.
        self.params = self.reduced if optimizer is None else torch.zeros_like(self.reduced)
        # With an optimizer, where the weights are (zero as here): the shard and the parameters.
        self.weights = [self.params, replica.outputs]

    def prepare(self) -> None:
        if not self.even:
            self.grads_in[:self.replica.grads.numel()].copy_(self.replica.grads)

    def start(self, op: str) -> Callable[[], None]:
        """Begin ``op``; returns what completes it."""
        if op == REDUCE_SCATTER:
            work = _scatter(self.reduced, self.grads_in, async_op=True)
        elif op == ALL_GATHER:
            work = _gather(self.gathered, self.params, async_op=True)
        else:
            raise ValueError(f"a sharded part has no {op!r}")
        return functools.partial(self._finish, op, work)

    def _finish(self, op: str, work) -> None:
        work.wait()
        if op == REDUCE_SCATTER and self.optimizer is not None:
            self.optimizer.apply(self.params, self.reduced)
        if op == ALL_GATHER and not self.even:
            numel = self.replica.outputs.numel()
            self.replica.outputs.copy_(self.gathered[:numel])

    def settle(self) -> None:
        """Untimed, before the error check: gather the shards this step reduced into every
        device's full parameters (what the next step's first all-gather does)."""
        self.start(ALL_GATHER)()

    def close(self) -> None:
        """Nothing to release: what a step started, it completed."""
