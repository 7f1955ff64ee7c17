"""A real GPU's forward and backward milliseconds of a training step, per network and batch size:
the figures benchmarks/network_impact.py passes as ``--compute-ms FWD,BWD``.

    python3 benchmarks/gpu_step_ms.py --networks resnet-50,inception-v3 --batch-sizes 16,32 \
        --dtype float32 --json step_ms.json

Each network is built from its own definition here (networks/: every conv's shape, stride and
padding as MXNet's symbol has it, through ``costs.layer_costs``' geometry) as a chain of torch
ops: each conv layer is ``torch.nn.functional.conv2d`` at stride 1 with 'same' padding on an
input of its output's height x width and its real channels (so its FLOPs are the network's), then
a ReLU (no BatchNorm); the classifier a ``linear``. Forward runs them in order; backward is
autograd's over the same graph (input and weight gradients). Timed with CUDA events after warm-up, median of ``--repeats``; cuDNN's
autotuner (benchmark mode) on, as training scripts set it. The branches of an Inception block are
run one after the other (as a framework's single stream does). Needs CUDA; the lab's CPUs are far
slower than a GPU, which is why network_impact.py takes these figures as milliseconds.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import networks  # noqa: E402
from networks.costs import GEOMETRY  # noqa: E402

NETWORKS = {"resnet-50": ("resnet", (3, 224, 224), 50),
            "inception-v3": ("inception-v3", (3, 299, 299), None)}


def conv_layers(name: str, image_shape, depth):
    """(weight shape, output height x width) of every conv, and the classifier's shape."""
    shapes = dict(networks.get_shapes(name, image_shape, 1000, depth))
    positions, _, _ = GEOMETRY[name](image_shape, depth, None)
    convs = [(shapes[array], positions[array]) for array in positions]
    fc = shapes["fc1_weight"]
    return convs, fc


def build(torch, convs, fc, batch: int, dtype, device):
    """Each conv's input and weight (module docstring); returns a closure running forward."""
    tensors = []
    for (out_c, in_c, kh, kw), area in convs:
        side = max(1, round(math.sqrt(area)))
        x = torch.randn(batch, in_c, side, side, device=device, dtype=dtype, requires_grad=True)
        w = torch.randn(out_c, in_c, kh, kw, device=device, dtype=dtype, requires_grad=True)
        tensors.append((x, w, (kh // 2, kw // 2)))
    features = torch.randn(batch, fc[1], device=device, dtype=dtype, requires_grad=True)
    weight = torch.randn(*fc, device=device, dtype=dtype, requires_grad=True)

    def forward():
        outs = [torch.relu(torch.nn.functional.conv2d(x, w, padding=pad)) for x, w, pad in tensors]
        outs.append(torch.nn.functional.linear(features, weight))
        return sum(o.float().mean() for o in outs)
    return forward


def time_ms(torch, fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def measure(torch, label: str, batch: int, dtype_name: str, repeats: int) -> dict:
    name, image_shape, depth = NETWORKS[label]
    dtype = getattr(torch, dtype_name)
    convs, fc = conv_layers(name, image_shape, depth)
    forward = build(torch, convs, fc, batch, dtype, torch.device("cuda"))
    for _ in range(3):                               # warm-up: cuDNN's autotuner picks kernels
        forward().backward()
    torch.cuda.synchronize()
    fwd = time_ms(torch, lambda: forward(), repeats)
    both = time_ms(torch, lambda: forward().backward(), repeats)
    return {"network": label, "batch_size": batch, "dtype": dtype_name,
            "forward_ms": fwd, "backward_ms": both - fwd,
            "gpu": torch.cuda.get_device_name(0)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--networks", default="resnet-50,inception-v3")
    parser.add_argument("--batch-sizes", default="16,32")
    parser.add_argument("--dtype", default="float32", choices=("float32", "float16", "bfloat16"))
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    import torch
    if not torch.cuda.is_available():
        print("gpu_step_ms.py: needs a CUDA GPU", file=sys.stderr)
        return 2
    torch.backends.cudnn.benchmark = True
    labels = [n for n in args.networks.split(",") if n]
    unknown = [n for n in labels if n not in NETWORKS]
    if unknown:
        print(f"gpu_step_ms.py: unknown network {unknown[0]!r}; valid: {', '.join(NETWORKS)}",
              file=sys.stderr)
        return 2
    rows = [measure(torch, label, int(b), args.dtype, args.repeats)
            for label in labels for b in args.batch_sizes.split(",")]
    print(f"{'network':<14} {'batch':>5} {'fwd ms':>8} {'bwd ms':>8}  --compute-ms  "
          f"({rows[0]['gpu']}, {args.dtype})")
    for r in rows:
        print(f"{r['network']:<14} {r['batch_size']:>5} {r['forward_ms']:>8.2f} "
              f"{r['backward_ms']:>8.2f}  {r['forward_ms']:.2f},{r['backward_ms']:.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
