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

import importlib
import math
from typing import Protocol

import torch
from torch import nn

from bandwidth.schedules.base import Shapes, Unit


class UnitHooks(Protocol):
    def compute(self, unit: int, backward: bool) -> None: ...

    def gradient(self, key: int) -> torch.Tensor: ...


class _Compute(torch.autograd.Function):
    """One unit's forward and backward compute (the hooks')."""

    @staticmethod
    def forward(ctx, x, hooks, unit):
        ctx.hooks, ctx.unit = hooks, unit
        hooks.compute(unit, False)
        return x.clone()

    @staticmethod
    def backward(ctx, grad_x):
        ctx.hooks.compute(ctx.unit, True)
        return grad_x, None, None


class _Attach(torch.autograd.Function):
    """One parameter on the path: its backward hands autograd the hooks' gradient of array
    ``key`` (the parameter arrives here unsharded under FSDP)."""

    @staticmethod
    def forward(ctx, x, hooks, key, param):
        ctx.hooks, ctx.key = hooks, key
        return x.clone()

    @staticmethod
    def backward(ctx, grad_x):
        return grad_x, None, None, ctx.hooks.gradient(ctx.key)


class UnitModule(nn.Module):
    """One unit: its arrays ``keys`` as parameters, in key order. Its forward attaches each
    parameter to the path, first to last, then computes; so its backward computes first and then
    hands the gradients last parameter first, as a layer's backward makes them ready (and as
    DDP's reducer, the ddp schedule and schedules/realddp.py order them)."""

    def __init__(self, index: int, keys: tuple[int, ...], shapes: Shapes, dtype: torch.dtype,
                 device: torch.device, hooks: UnitHooks):
        super().__init__()
        self.index, self.keys, self.hooks = index, keys, hooks
        self.params = nn.ParameterList(
            nn.Parameter(torch.zeros(shape, dtype=dtype, device=device)) for _, shape in shapes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for key, param in zip(self.keys, self.params):
            x = _Attach.apply(x, self.hooks, key, param)
        return _Compute.apply(x, self.hooks, self.index)


class UnitsModule(nn.Module):
    """The network as ``units`` (a schedule's, in forward order) of ``shapes``' arrays."""

    def __init__(self, shapes: Shapes, units: list[Unit], dtype: torch.dtype,
                 device: torch.device, hooks: UnitHooks):
        super().__init__()
        keys = [k for unit in units for k in unit.keys]
        if keys != list(range(len(shapes))):
            raise ValueError("the units must hold every array once, in key order")
        self.units = nn.ModuleList(
            UnitModule(unit.index, unit.keys, [shapes[k] for k in unit.keys], dtype, device,
                       hooks)
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
    """Why PyTorch cannot take ``schedule_cls``'s step here (None: it can): no counterpart, or
    a torch without it (FSDP2's ``fully_shard`` came with torch 2.6)."""
    if schedule_cls.framework is None or schedule_cls.framework_api is None:
        return f"--schedule {schedule_cls.name} has no counterpart in PyTorch"
    module, name = schedule_cls.framework_api
    try:
        found = getattr(importlib.import_module(module), name, None)
    except ImportError:
        found = None
    if found is None:
        return f"this torch ({torch.__version__}) has no {module}.{name}"
    return None
