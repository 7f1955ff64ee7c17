"""The framework's own step beside the schedule's (``--framework torch``): the ``ddp`` schedule's
step taken by PyTorch's ``DistributedDataParallel``, the ``fsdp`` schedule's by FSDP2
(``fully_shard`` on every unit, then on the root, as a user shards a model), over
``schedules.torchmodel.UnitsModule``: one submodule per unit of the schedule, its parameters the
network's arrays in order, whose forward and backward run the same compute as the schedule's step
(this process's ``compute.runner.Runner``, calibrated once for both) and whose backward hands
autograd this rank's test gradients (bandwidth.arrays.data). The framework's step is then what a
training step under that framework takes: forward, backward, and the framework's hooks, buckets,
collectives and host work in between; no optimizer step.

A step object here is a session of the protocol (``prepare``, ``step``, ``synchronize``,
``error``, ``group``), measured interleaved with the compute alone and the schedule's step
(measurement.costs). ``prepare`` (untimed) sets the gradients to none, as ``zero_grad`` does, and
hands the backward views of one flat buffer of this rank's test gradients: autograd takes each
view as the parameter's gradient without a copy (the gradient a real backward's product writes).

The check, every iteration, untimed: ``DistributedDataParallel`` averages, so n times every
parameter's gradient is the closed-form sum over the n ranks. FSDP2 leaves each rank its shard of
the averaged gradients (``torch.chunk`` of dim 0); n times it is the closed-form sum of those
rows. The shard is then written into the sharded parameters (an optimizer that sets the weights
to the summed gradient) and each unit all-gathered by FSDP2's own ``unshard`` and resharded:
every unsharded parameter must equal the closed-form sum (as the ``fsdp`` schedule's check gathers
its reduced shards). Exact in float32 where n is a power of two (the frameworks multiply by 1/n).
"""

from __future__ import annotations

import math
from typing import ClassVar

import torch
import torch.distributed as dist
from torch import nn

from bandwidth.arrays.data import fill_gradient, piece_error_terms
from bandwidth.arrays.layout import TORCH_DTYPES
from bandwidth.schedules.ddp import DEFAULT_BUCKET_MB, DEFAULT_FIRST_BUCKET_MB
from bandwidth.schedules.torchmodel import UnitsModule, key_offsets

# Untimed steps at set-up: DDP rebuilds its buckets in the order the gradients came at its second
# step and logs them at its third; FSDP2 initialises itself lazily at its first.
SETUP_STEPS = 3


class FrameworkStep:
    """One process's model under the framework, on its one device; ``runner``: the compute."""

    name: ClassVar[str] = "torch"
    wraps: ClassVar[str]
    refills: ClassVar[bool] = False   # the framework writes its result into the gradients

    def __init__(self, plan, session, runner):
        (replica,) = session.replicas            # one process per device
        self.group, self.runner = session.group, runner
        self.device, self.rank = replica.device, replica.rank
        self.n, self.seed = session.n, plan.config.seed
        self.host_ms = plan.config.host_ms
        self.schedule, self.shapes = plan.schedule, plan.shapes
        self.offsets = key_offsets(plan.shapes)
        dtype = TORCH_DTYPES[plan.config.dtype]
        self.model = UnitsModule(plan.shapes, self.schedule.units, dtype, self.device, self)
        self.flat = torch.empty(plan.numel, dtype=dtype, device=self.device)
        fill_gradient(self.flat, rank=self.rank, seed=self.seed)
        self.pending: dict[int, torch.Tensor] = {}     # array key -> its gradient
        self.x = torch.zeros(1, device=self.device)
        self.wrapped = self.wrap(plan)
        self.dirty = False
        for _ in range(SETUP_STEPS):
            self.prepare()
            self.step()
        self.synchronize()

    def wrap(self, plan) -> nn.Module:
        raise NotImplementedError

    def notes(self) -> list[str]:
        note = host_note(self.device.type, self.host_ms)
        return [note] if note else []

    # -- the hooks of schedules.torchmodel -----------------------------------------------------

    def compute(self, unit: int, backward: bool) -> None:
        self.runner.layer(unit, backward=backward)

    def gradient(self, key: int) -> torch.Tensor:
        return self.pending.pop(key)

    # -- a session of the protocol ---------------------------------------------------------------

    def prepare(self) -> None:
        if self.dirty and self.refills:
            fill_gradient(self.flat, rank=self.rank, seed=self.seed)
        self.dirty = False
        self.model.zero_grad(set_to_none=True)
        for key, (_, shape) in enumerate(self.shapes):
            # Views made here and handed over whole: autograd keeps each as the gradient.
            start = self.offsets[key]
            self.pending[key] = self.flat[start:start + math.prod(shape)].view(shape)

    def step(self) -> None:
        self.wrapped(self.x).sum().backward()
        self.dirty = True

    def synchronize(self) -> None:
        self.runner.synchronize()

    def error(self) -> float:
        wrong, total = self.error_terms()
        total = self.group.sum(total)
        return self.group.sum(wrong) / total if total else 0.0

    def error_terms(self) -> tuple[float, float]:
        raise NotImplementedError

    def parameters_of(self):
        """(key, parameter) of every array, in key order."""
        for unit, module in zip(self.schedule.units, self.model.units):
            yield from zip(unit.keys, module.params)

    def close(self) -> None:
        self.pending.clear()
        self.wrapped = self.model = self.flat = None


class DdpStep(FrameworkStep):
    wraps = "DistributedDataParallel"
    refills = True

    def wrap(self, plan) -> nn.Module:
        c = plan.config
        # DDP's defaults where the schedule has them (25 MiB, the first bucket 1 MiB); else the
        # cap, which torch 2.13 gives the first bucket too.
        default = (c.bucket_mb, c.first_bucket_mb) == (DEFAULT_BUCKET_MB, DEFAULT_FIRST_BUCKET_MB)
        self.bucket_cap_mb = None if default else c.bucket_mb
        return nn.parallel.DistributedDataParallel(
            self.model, device_ids=[self.device.index] if self.device.type == "cuda" else None,
            bucket_cap_mb=self.bucket_cap_mb)

    def notes(self) -> list[str]:
        data = self.wrapped._get_ddp_logging_data()
        sizes = [s for s in str(data.get("rebuilt_bucket_sizes", "")).split(",") if s]
        caps = ("bucket_cap_mb default: 25 MiB, the first 1 MiB" if self.bucket_cap_mb is None
                else f"bucket_cap_mb {self.bucket_cap_mb:g}, the first bucket's too")
        return [f"framework torch: DistributedDataParallel over {len(self.schedule.units)} "
                f"unit(s), {len(sizes) or '?'} bucket(s) ({caps}; the ddp schedule's parts: "
                f"{len(self.schedule.parts)})"] + super().notes()

    def error_terms(self) -> tuple[float, float]:
        return piece_error_terms(((self.offsets[k], p.grad) for k, p in self.parameters_of()),
                                 self.n, self.seed, scale=self.n)


class FsdpStep(FrameworkStep):
    wraps = "FSDP2 fully_shard"

    def wrap(self, plan) -> nn.Module:
        from torch.distributed.device_mesh import DeviceMesh
        from torch.distributed.fsdp import fully_shard
        mesh = DeviceMesh.from_group(dist.group.WORLD, self.device.type)
        for unit in self.model.units:
            fully_shard(unit, mesh=mesh)
        return fully_shard(self.model, mesh=mesh)

    def notes(self) -> list[str]:
        return [f"framework torch: FSDP2, fully_shard on each of {len(self.schedule.units)} "
                "unit(s), then the root (reshard after forward, its default prefetching)"
                ] + super().notes()

    def shard_start(self, key: int, local: torch.Tensor) -> int:
        """The flat index of this rank's shard of array ``key``: FSDP2 keeps rows
        ``torch.chunk(param, n, dim=0)[rank]``."""
        shape = self.shapes[key][1]
        rows = -(-shape[0] // self.n)
        first = min(self.rank * rows, shape[0])
        if local.shape[0] != min(rows, shape[0] - first):
            raise RuntimeError(f"FSDP2's shard of {self.shapes[key][0]} has {local.shape[0]} "
                               f"rows; torch.chunk gives rank {self.rank} "
                               f"{min(rows, shape[0] - first)}")
        return self.offsets[key] + first * math.prod(shape[1:])

    def error_terms(self) -> tuple[float, float]:
        shards = []
        for key, param in self.parameters_of():
            local = param.grad.to_local()
            shards.append((self.shard_start(key, local), local))
            with torch.no_grad():           # the weights set to the summed gradients' shard
                param.to_local().copy_(local * self.n)
        wrong, total = piece_error_terms(shards, self.n, self.seed, scale=self.n)
        for unit, module in zip(self.schedule.units, self.model.units):
            module.unshard()                # FSDP2's own all-gather, then reshard
            terms = piece_error_terms(((self.offsets[k], p) for k, p in
                                       zip(unit.keys, module.params)), self.n, self.seed)
            module.reshard()
            wrong, total = wrong + terms[0], total + terms[1]
        return wrong, total


def host_note(device_type: str, host_ms) -> str | None:
    """On a GPU without --host-ms: the module issues its compute in microseconds, so the
    framework's step leaves out a real model's own host time, which paces a step where the
    framework's host work is large (FSDP2; BENCHMARKS.md 2026-11-29, fifth session)."""
    if device_type != "cuda" or host_ms is not None:
        return None
    return ("framework torch: without --host-ms the module issues its compute in microseconds; "
            "a real model's own host time to issue its forward and backward (15-26 ms a step "
            "for GPT-2 small and ResNet-50 on an H200's host) is not in the framework's step, "
            "and where the host paces it (FSDP2) the step is longer: give --host-ms FWD,BWD "
            "(benchmarks/real_step.py measures a model's)")


STEPS = {"ddp": DdpStep, "fsdp": FsdpStep}     # the schedule a framework's step stands beside


def framework_step(plan, session, runner) -> FrameworkStep:
    """The framework's step of ``plan``'s schedule on this process's replica (set up, its first
    steps taken)."""
    return STEPS[plan.schedule.name](plan, session, runner)
