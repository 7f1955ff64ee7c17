"""An independent training step, to hold ``measure.py --framework torch`` against (issue 39):
models written here with torch.nn, not from the toolkit, trained as a user trains them (real
forward and backward, bfloat16 autocast, float32 parameters and gradients, no optimizer step),
under DistributedDataParallel (default buckets) and under FSDP2 (``fully_shard`` on each block,
then on the root), one process per GPU over NCCL. GPUs only: on CPU cores a GPT-2 step takes
seconds (two processes on the 2-core VM had not finished in 10 minutes).

Two models: ``gpt2``, GPT-2 small in HF GPT2Model's parameter layout (124.4 M parameters, the
LM head tied to the token embedding; batch 8 x 1,024 tokens), and ``resnet50``, a ResNet-50
(25.6 M parameters; batch 32 at 224 x 224). For each it prints the forward and the backward
milliseconds alone (one device, no wrapper: what ``--compute-ms`` takes), the host's time to
issue them (a tiny batch's forward and backward, to the calls returning: what ``--host-ms``
takes), the DDP step and the FSDP2 step (medians of ``--steps`` after 3 warm-up steps) with the
host's time to issue each, and the ``measure.py`` command that models the same step, to run in
the same call:

    python3 benchmarks/real_step.py --model gpt2 --json real.json
    python3 bandwidth/measure.py --kv-store nccl --gpus 0,1 --network gpt2 --batch-size 8 \\
        --seq-len 1024 --schedule ddp,fsdp --framework torch --compute-ms FWD,BWD \\
        --host-ms HOST_FWD,HOST_BWD --no-reference
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch import nn


# -- the models ----------------------------------------------------------------------------------

class Attention(nn.Module):
    def __init__(self, width: int, heads: int):
        super().__init__()
        self.heads = heads
        self.c_attn = nn.Linear(width, 3 * width)
        self.c_proj = nn.Linear(width, width)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.c_attn(x).split(c, dim=2)
        q, k, v = (y.view(b, t, self.heads, c // self.heads).transpose(1, 2) for y in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).reshape(b, t, c))


class Block(nn.Module):
    def __init__(self, width: int = 768, heads: int = 12):
        super().__init__()
        self.ln_1, self.attn = nn.LayerNorm(width), Attention(width, heads)
        self.ln_2 = nn.LayerNorm(width)
        self.c_fc, self.c_proj = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.c_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class Gpt2(nn.Module):
    def __init__(self, vocab: int = 50257, positions: int = 1024, width: int = 768,
                 layers: int = 12):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, width), nn.Embedding(positions, width)
        self.h = nn.ModuleList(Block(width) for _ in range(layers))
        self.ln_f = nn.LayerNorm(width)

    def forward(self, ids):
        x = self.wte(ids) + self.wpe(torch.arange(ids.shape[1], device=ids.device))
        for block in self.h:
            x = block(x)
        return self.ln_f(x) @ self.wte.weight.t()          # the tied LM head

    def blocks(self):
        return list(self.h)


class Bottleneck(nn.Module):
    def __init__(self, inputs: int, width: int, stride: int):
        super().__init__()
        out = 4 * width
        self.body = nn.Sequential(
            nn.Conv2d(inputs, width, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(),
            nn.Conv2d(width, width, 3, stride, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(),
            nn.Conv2d(width, out, 1, bias=False), nn.BatchNorm2d(out))
        self.short = (nn.Sequential(nn.Conv2d(inputs, out, 1, stride, bias=False),
                                    nn.BatchNorm2d(out))
                      if stride != 1 or inputs != out else nn.Identity())

    def forward(self, x):
        return F.relu(self.body(x) + self.short(x))


class ResNet50(nn.Module):
    def __init__(self, classes: int = 1000):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64),
                                  nn.ReLU(), nn.MaxPool2d(3, 2, 1))
        units, inputs = [], 64
        for width, count, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
            for k in range(count):
                units.append(Bottleneck(inputs, width, stride if k == 0 else 1))
                inputs = 4 * width
        self.units = nn.ModuleList(units)
        self.fc = nn.Linear(inputs, classes)

    def forward(self, x):
        x = self.stem(x)
        for unit in self.units:
            x = unit(x)
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))

    def blocks(self):
        return list(self.units)


MODELS = {
    "gpt2": dict(build=Gpt2, batch=8,
                 measure="--network gpt2 --batch-size 8 --seq-len 1024"),
    "resnet50": dict(build=ResNet50, batch=32,
                     measure="--network resnet --num-layers 50 --batch-size 32"),
}


def batch_of(name: str, device: torch.device, tiny: bool = False):
    """The model's batch; ``tiny``: two samples (BatchNorm needs two) of 32 tokens or 32 x 32
    pixels, small enough that the GPU keeps up with the host's launches (the host's time to issue
    them is what the tiny batch measures; its time to the GPU's end overstated it, 2026-11-29)."""
    g = torch.Generator(device="cpu").manual_seed(1)
    batch = 2 if tiny else MODELS[name]["batch"]
    if name == "gpt2":
        ids = torch.randint(0, 50257, (batch, 32 if tiny else 1024), generator=g)
        return ids.to(device), ids.roll(-1, 1).to(device)
    side = 32 if tiny else 224
    images = torch.randn(batch, 3, side, side, generator=g)
    return images.to(device), torch.randint(0, 1000, (batch,), generator=g).to(device)


def loss_of(model, inputs, targets, device: torch.device):
    with torch.autocast(device.type, dtype=torch.bfloat16):
        logits = model(inputs)
    return F.cross_entropy(logits.float().flatten(0, -2), targets.flatten())


# -- timing --------------------------------------------------------------------------------------

def median_ms(fn, device: torch.device, steps: int, barrier: bool) -> tuple[float, float]:
    """The medians of ``fn``'s time (to the device's end) and of its host time (to ``fn``
    returning: the host issuing the work), ms, of ``steps`` runs after 3 warm-up runs."""
    times, host = [], []
    for k in range(3 + steps):
        if barrier:
            dist.barrier()
        torch.cuda.synchronize(device)
        start = time.perf_counter()
        fn()
        issued = time.perf_counter()
        torch.cuda.synchronize(device)
        if k >= 3:
            times.append(1e3 * (time.perf_counter() - start))
            host.append(1e3 * (issued - start))
    return statistics.median(times), statistics.median(host)


def compute_alone(name: str, device: torch.device, steps: int,
                  tiny: bool = False) -> tuple[float, float]:
    """Forward and backward milliseconds on one device, no wrapper; ``tiny``: the host's time
    to issue them (the tiny batch's, to ``loss`` and ``backward`` returning, whose kernels the
    GPU runs as fast as they come: the time does not wait for the GPU)."""
    torch.manual_seed(0)
    model = MODELS[name]["build"]().to(device)
    inputs, targets = batch_of(name, device, tiny)
    forward = median_ms(lambda: loss_of(model, inputs, targets, device), device, steps, False)

    def step():
        model.zero_grad(set_to_none=True)
        loss_of(model, inputs, targets, device).backward()

    both = median_ms(step, device, steps, False)
    which = 1 if tiny else 0                    # the host's time, or the device's
    return forward[which], both[which] - forward[which]


def rank_main(rank: int, world: int, port: int, name: str, steps: int, out) -> None:
    from torch.distributed.fsdp import fully_shard
    from torch.nn.parallel import DistributedDataParallel

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    device = torch.device("cuda", rank)
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=device)
    try:
        # the host's time to issue the bare model here too, in the process of the wrapped steps
        # (the parent's figure came out above the ranks' tiny DDP step once, 2026-11-29)
        results = {"rank_host": compute_alone(name, device, steps, tiny=True)}
        for (wrap, tiny) in (("ddp", False), ("fsdp2", False), ("ddp", True), ("fsdp2", True)):
            inputs, targets = batch_of(name, device, tiny)
            torch.manual_seed(0)
            model = MODELS[name]["build"]().to(device)
            if wrap == "ddp":
                model = DistributedDataParallel(model, device_ids=[rank])
            else:
                for block in model.blocks():
                    fully_shard(block)
                fully_shard(model)

            def step(model=model):
                model.zero_grad(set_to_none=True)
                loss_of(model, inputs, targets, device).backward()

            key = f"{wrap}_tiny" if tiny else wrap
            results[key], results[f"{key}_host"] = median_ms(step, device, steps, True)
            del model
        if rank == 0:
            out.put(results)
    finally:
        dist.destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", choices=sorted(MODELS), default="gpt2")
    parser.add_argument("--steps", type=int, default=10, help="timed steps (default 10)")
    parser.add_argument("--json", metavar="FILE", help="write the figures here")
    args = parser.parse_args(argv)
    if torch.cuda.device_count() < 2:
        parser.error(f"{torch.cuda.device_count()} CUDA GPUs here: the step needs two or more")
    world = torch.cuda.device_count()
    forward, backward = compute_alone(args.model, torch.device("cuda", 0), args.steps)
    host_forward, host_backward = compute_alone(args.model, torch.device("cuda", 0), args.steps,
                                                tiny=True)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    ctx = mp.get_context("spawn")
    out = ctx.SimpleQueue()
    mp.start_processes(rank_main, args=(world, port, args.model, args.steps, out),
                       nprocs=world, start_method="spawn")
    steps = out.get()
    transport = ", ".join(f"{k}={os.environ[k]}" for k in ("NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE")
                          if k in os.environ) or "NCCL's choice"
    figures = {"model": args.model, "ranks": world, "transport": transport,
               "forward_ms": forward, "backward_ms": backward,
               "host_forward_ms": host_forward, "host_backward_ms": host_backward,
               "ddp_step_ms": steps["ddp"], "fsdp2_step_ms": steps["fsdp2"],
               "ddp_host_ms": steps["ddp_host"], "fsdp2_host_ms": steps["fsdp2_host"],
               "ddp_tiny_ms": steps["ddp_tiny"], "fsdp2_tiny_ms": steps["fsdp2_tiny"],
               "rank_host_forward_ms": steps["rank_host"][0],
               "rank_host_backward_ms": steps["rank_host"][1]}
    print(f"# {args.model} on {world} ranks ({transport}): forward {forward:.3f} ms, backward "
          f"{backward:.3f} ms alone; DDP step {steps['ddp']:.3f} ms, FSDP2 step "
          f"{steps['fsdp2']:.3f} ms (medians of {args.steps})")
    print(f"# the host: forward {host_forward:.3f} ms, backward {host_backward:.3f} ms to issue "
          f"them (a tiny batch, to the calls returning; in rank 0's process "
          f"{steps['rank_host'][0]:.3f} and {steps['rank_host'][1]:.3f}); issuing the DDP step "
          f"took {steps['ddp_host']:.3f} ms, the FSDP2 step {steps['fsdp2_host']:.3f} ms; the tiny "
          f"batch's steps to the GPU's end: DDP "
          f"{steps['ddp_tiny']:.3f} ms, FSDP2 {steps['fsdp2_tiny']:.3f} ms")
    print(f"# the toolkit's model of it: python3 bandwidth/measure.py --kv-store nccl "
          f"--gpus {','.join(map(str, range(world)))} {MODELS[args.model]['measure']} "
          f"--schedule ddp,fsdp --framework torch --compute-ms {forward:.3f},{backward:.3f} "
          f"--host-ms {host_forward:.3f},{host_backward:.3f} --no-reference")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(figures, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
