"""FSDP2's and DDP's own host work on a real model and on the toolkit's module of the same arrays
(issue 39): two processes on CPU devices over Gloo, a GPT-2 of 12 blocks in real_step.py's
layout made small (vocabulary 512, width 96: 148 arrays, as GPT-2 small has) and a batch of 2 x
8 tokens, so a step is the host's work. Each model is stepped bare, under
DistributedDataParallel and under FSDP2 (``fully_shard`` per block, then the root); the
framework's own cost is its step less the bare one. The module is
``schedules.torchmodel.UnitsModule`` over the same shapes and units (embeddings, each block, the
final LayerNorm), its compute none and its gradients handed over as ``--framework torch`` does.

    python3 benchmarks/host_cost_cpu.py [--steps 40]

It answers whether the module costs a framework the host work a real model of those arrays does:
if so, a gap between the framework option and a real step on a GPU lies in the model's own host
work (``--host-ms``) and in how it overlaps the framework's, not in the module.
"""

from __future__ import annotations

import argparse
import math
import os
import socket
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from real_step import Gpt2                                       # noqa: E402
from bandwidth.schedules.base import Unit                        # noqa: E402
from bandwidth.schedules.torchmodel import UnitsModule           # noqa: E402

SMALL = dict(vocab=512, positions=64, width=96, layers=12)
WRAPS = ("bare", "DDP", "FSDP2")


class Hooks:
    """No compute; each backward hands a view of one zero buffer (the option's gradients)."""

    def __init__(self, shapes):
        self.shapes = shapes
        self.flat = torch.zeros(sum(math.prod(shape) for _, shape in shapes))
        self.pending: dict[int, torch.Tensor] = {}

    def prepare(self) -> None:
        offset = 0
        for key, (_, shape) in enumerate(self.shapes):
            self.pending[key] = self.flat[offset:offset + math.prod(shape)].view(shape)
            offset += math.prod(shape)

    def compute(self, unit: int, backward: bool) -> None:
        pass

    def gradient(self, key: int) -> torch.Tensor:
        return self.pending.pop(key)


def units_of(shapes) -> list[Unit]:
    """Embeddings, each block, the final LayerNorm: real_step.py's FSDP2 units."""
    units: list[Unit] = []
    for key, (name, _) in enumerate(shapes):
        group = ".".join(name.split(".")[:2]) if name.startswith("h.") else \
            "embeddings" if name.startswith("w") else "head"
        if units and units[-1].name == group:
            units[-1] = Unit(units[-1].index, group, units[-1].keys + (key,))
        else:
            units.append(Unit(len(units), group, (key,)))
    return units


def wrapped(model, wrap: str, blocks):
    from torch.distributed.fsdp import fully_shard
    from torch.nn.parallel import DistributedDataParallel
    if wrap == "DDP":
        return DistributedDataParallel(model)
    if wrap == "FSDP2":
        for block in blocks:
            fully_shard(block)
        return fully_shard(model)
    return model


def median_ms(step, steps: int) -> float:
    times = []
    for k in range(5 + steps):
        dist.barrier()
        start = time.perf_counter()
        step()
        if k >= 5:
            times.append(1e3 * (time.perf_counter() - start))
    return statistics.median(times)


def rank_main(rank: int, world: int, port: int, steps: int) -> None:
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        ids = torch.randint(0, SMALL["vocab"], (2, 8), generator=torch.Generator().manual_seed(1))
        shapes = [(n, tuple(p.shape)) for n, p in Gpt2(**SMALL).named_parameters()]
        units = units_of(shapes)
        figures = {}
        for wrap in WRAPS:
            torch.manual_seed(0)
            real = Gpt2(**SMALL)
            model = wrapped(real, wrap, real.blocks())

            def real_step(model=model):
                model.zero_grad(set_to_none=True)
                F.cross_entropy(model(ids).flatten(0, -2), ids.roll(-1, 1).flatten()).backward()

            figures[("real", wrap)] = median_ms(real_step, steps)
            hooks = Hooks(shapes)
            module = UnitsModule(shapes, units, torch.float32, torch.device("cpu"), hooks)
            model = wrapped(module, wrap, module.units)
            x = torch.zeros(1)

            def module_step(model=model, hooks=hooks):
                model.zero_grad(set_to_none=True)
                hooks.prepare()
                model(x).sum().backward()

            figures[("module", wrap)] = median_ms(module_step, steps)
        if rank == 0:
            print(f"# {len(shapes)} arrays in {len(units)} units, 2 ranks over Gloo, medians of "
                  f"{steps} steps (ms); own = the wrapped step less the bare one")
            print(f"{'model':<8}" + "".join(f"{w:>10}" for w in WRAPS) + f"{'DDP own':>10}"
                  f"{'FSDP2 own':>11}")
            for who in ("real", "module"):
                row = [figures[(who, w)] for w in WRAPS]
                print(f"{who:<8}" + "".join(f"{v:>10.3f}" for v in row)
                      + f"{row[1] - row[0]:>10.3f}{row[2] - row[0]:>11.3f}")
    finally:
        dist.destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40, help="timed steps (default 40)")
    args = parser.parse_args(argv)
    if args.steps < 1:
        parser.error(f"--steps must be at least 1; got {args.steps}")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    mp.start_processes(rank_main, args=(2, port, args.steps), nprocs=2, start_method="spawn")
    return 0


if __name__ == "__main__":
    sys.exit(main())
