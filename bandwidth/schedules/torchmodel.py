"""A ``torch.nn`` module built from a schedule's units, for a framework's own step
(``--framework torch``): what ``DistributedDataParallel`` and FSDP2's ``fully_shard`` wrap.

``UnitsModule(shapes, units, dtype, device, hooks)`` has one submodule per unit (a layer, or a
block under ``fsdp``), in forward order, and each submodule's parameters are the network's arrays
of that unit, in key order, of the network's shapes, so the framework sees the parameters a user's
model of that network has (the same count, sizes and order, hence the same DDP buckets and FSDP
units). The forward of unit ``u`` calls ``hooks.compute(u, backward=False)``; its backward calls
``hooks.compute(u, backward=True)`` and hands autograd ``hooks.gradients(u)``: one tensor per
parameter of the unit, the gradient a real backward would produce. Nothing else is computed, so
a step's work is the compute the hooks run, the gradients they give, and what the framework does
around them (hooks, buckets, all-gathers, reduce-scatters, its host work).

The module carries a one-element tensor from unit to unit (each unit's output is its input,
passed through an autograd function), so autograd reaches the units last to first, as a network's
backward does, and each unit's parameters get their gradients when that unit's backward ends.
"""

from __future__ import annotations

import math
from typing import Protocol

import torch
from torch import nn

from bandwidth.schedules.base import Shapes, Unit


class UnitHooks(Protocol):
    def compute(self, unit: int, backward: bool) -> None: ...

    def gradients(self, unit: int) -> list[torch.Tensor]: ...


class _UnitStep(torch.autograd.Function):
    """One unit's forward and backward: the hooks' compute, and the hooks' gradients for the
    unit's parameters (which arrive here unsharded under FSDP)."""

    @staticmethod
    def forward(ctx, x, hooks, unit, *params):
        ctx.hooks, ctx.unit = hooks, unit
        hooks.compute(unit, False)
        return x.clone()

    @staticmethod
    def backward(ctx, grad_x):
        hooks, unit = ctx.hooks, ctx.unit
        hooks.compute(unit, True)
        return (grad_x, None, None, *hooks.gradients(unit))


class UnitModule(nn.Module):
    """One unit: its arrays as parameters, in key order."""

    def __init__(self, index: int, shapes: Shapes, dtype: torch.dtype, device: torch.device,
                 hooks: UnitHooks):
        super().__init__()
        self.index, self.hooks = index, hooks
        self.params = nn.ParameterList(
            nn.Parameter(torch.zeros(shape, dtype=dtype, device=device)) for _, shape in shapes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _UnitStep.apply(x, self.hooks, self.index, *self.params)


class UnitsModule(nn.Module):
    """The network as ``units`` (a schedule's, in forward order) of ``shapes``' arrays."""

    def __init__(self, shapes: Shapes, units: list[Unit], dtype: torch.dtype,
                 device: torch.device, hooks: UnitHooks):
        super().__init__()
        keys = [k for unit in units for k in unit.keys]
        if keys != list(range(len(shapes))):
            raise ValueError("the units must hold every array once, in key order")
        self.units = nn.ModuleList(
            UnitModule(unit.index, [shapes[k] for k in unit.keys], dtype, device, hooks)
            for unit in units)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for unit in self.units:
            x = unit(x)
        return x


def key_offsets(shapes: Shapes) -> list[int]:
    """Each array's first element in the flat buffer of every array in key order (the test data's
    index: bandwidth.arrays.data)."""
    offsets, cursor = [], 0
    for _, shape in shapes:
        offsets.append(cursor)
        cursor += math.prod(shape)
    return offsets


def framework_unavailable(schedule_cls) -> str | None:
    """Why PyTorch cannot take ``schedule_cls``'s step here (None: it can)."""
    if schedule_cls.framework is None:
        return f"--schedule {schedule_cls.name} has no counterpart in PyTorch"
    if schedule_cls.framework.startswith("FSDP2"):
        try:
            from torch.distributed.fsdp import fully_shard  # noqa: F401
        except ImportError:
            return (f"this torch ({torch.__version__}) has no FSDP2 (torch.distributed.fsdp."
                    "fully_shard, torch 2.6 or later)")
    return None
