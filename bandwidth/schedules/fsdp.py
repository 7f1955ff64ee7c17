"""``fsdp``: FSDP / ZeRO-3, one unit (a block of the network) at a time.

Each device keeps only its shard (1/n) of every unit's parameters. Before a unit's forward, and
again before its backward, the unit's parameters are all-gathered from the shards; after its
backward its gradients are reduce-scattered, each device receiving the sum of its own shard. One
unit of prefetch: the all-gather of the next unit (in the direction compute goes) is issued as
soon as the current one has arrived, before the current unit computes, as FSDP's
``forward_prefetch`` / ``BACKWARD_PRE`` do. A step, forward then backward:

    G(0)  W(0) G(1) F(0)  W(1) G(2) F(1) ...  W(L-1) F(L-1)
    G(L-1)  W(L-1) G(L-2) B(L-1) R(L-1)  W(L-2) G(L-3) B(L-2) R(L-2) ...  then wait every R

(G: all-gather, R: reduce-scatter, W: wait for the all-gather). Bytes per device per step:
2 x (n-1)/n x S gathered and (n-1)/n x S reduce-scattered, 3(n-1)/n x S in all (docs/formulas.md).
The units are blocks: a transformer block (``h.0``, ``model.layers.3``), a resnet unit
(``stage1_unit2``), an inception mixed block; otherwise a layer.
"""

from __future__ import annotations

import re

from bandwidth.formulas import fsdp_factor
from bandwidth.schedules.base import (
    ALL_GATHER, BACKWARD, EXCHANGE, FORWARD, REDUCE_SCATTER, WAIT, Event, Schedule, Unit,
    layer_name)

_BLOCK = re.compile(r"^(.*?(?:[._]\d+|unit\d+))[._]")


def block_name(array: str) -> str:
    """The block an array belongs to: its name up to the first numbered component (``h.0``,
    ``stage1_unit2``, ``mixed_3``), else its layer."""
    match = _BLOCK.match(array)
    return match.group(1) if match else layer_name(array)


class Fsdp(Schedule):
    name = "fsdp"
    summary = ("FSDP/ZeRO-3 per block: all-gather before forward and backward, reduce-scatter "
               "after backward, one block of prefetch")
    modes = ("nccl", "dist_nccl")
    modes_why = "FSDP all-gathers and reduce-scatters through torch.distributed"
    graph_parts = False       # its sharded halves (sharded.ShardedPart) are issued eagerly
    framework = "FSDP2 fully_shard"
    framework_api = ("torch.distributed.fsdp", "fully_shard")

    def framework_bytes(self, nbytes: int, n: int) -> int:
        # the gradients handed to backward; the sharded parameters and gradients; at worst
        # every unit unsharded at once with its reduce-scatter buffers
        return nbytes + 2 * -(-nbytes // max(n, 1)) + 2 * nbytes

    def make_units(self) -> list[Unit]:
        units: list[Unit] = []
        for key, (array, _) in enumerate(self.shapes):
            name = block_name(array)
            if units and units[-1].name == name:
                units[-1] = Unit(units[-1].index, name, units[-1].keys + (key,))
            else:
                units.append(Unit(len(units), name, (key,)))
        return units

    def extra_bytes_per_device(self, nbytes: int, n: int, optimizer: bool) -> int:
        # The reduced shard (and the weights' shard), and at worst a padded copy of every part's
        # gradients and parameters (sharded.ShardedPart: parts that n does not divide).
        return (2 if optimizer else 1) * -(-nbytes // max(n, 1)) + 2 * nbytes

    def bus_factor(self, store_cls, n: int) -> float:
        return fsdp_factor(n)

    def events(self) -> list[Event]:
        last = len(self.units) - 1
        out = [Event(EXCHANGE, part=0, op=ALL_GATHER)]
        for u in range(last + 1):
            out.append(Event(WAIT, part=u, op=ALL_GATHER))
            if u < last:
                out.append(Event(EXCHANGE, part=u + 1, op=ALL_GATHER))
            out.append(Event(FORWARD, unit=u))
        out.append(Event(EXCHANGE, part=last, op=ALL_GATHER))
        for u in range(last, -1, -1):
            out.append(Event(WAIT, part=u, op=ALL_GATHER))
            if u > 0:
                out.append(Event(EXCHANGE, part=u - 1, op=ALL_GATHER))
            out += [Event(BACKWARD, unit=u), Event(EXCHANGE, part=u, op=REDUCE_SCATTER)]
        out += [Event(WAIT, part=u, op=REDUCE_SCATTER) for u in range(last, -1, -1)]
        return out
