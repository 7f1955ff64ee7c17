"""Single-host benchmark: each kvstore mode against the ceiling measured in the same run.

    pip install -e .   # or: export PYTHONPATH=$PWD
    python benchmarks/single_host.py [--network resnet --num-layers 200] [--iters 20] [--rounds 3]
        [--out F.json]

On GPUs it measures, for the network in float32:
  device  vs the unidirectional peer-to-peer copy rate between GPU 0 and 1 (target >= 90 %)
  nccl    vs one flat torch.distributed all-reduce of the same bytes (target >= 90 %)
  local   vs the pipelined host-path bound: slowest of PCIe down, CPU sum, PCIe up (>= 80 %)
and the per-array overhead of device and nccl: the network's arrays against one flat array of the
same bytes (target: at most 10 % more time). It also sweeps --chunk-mb for the device and local
modes. --rounds repeats the ratio table (ceilings and modes measured again each round) and ends
with the median of each row's ratio over the rounds, so that run-to-run spread shows. It prints
ratio tables; it asserts nothing. Record results in BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from dataclasses import asdict, replace
from pathlib import Path

import torch

import networks
from bandwidth.ceiling.host import host_path
from bandwidth.ceiling.p2p import p2p_copy_gbps
from bandwidth.config.options import Config
from bandwidth.hardware.devices import DeviceSet
from bandwidth.measurement.session import Session
from bandwidth.processes.group import LocalGroup
from bandwidth.run import run


def enqueue_seconds(shapes, gpus, chunk_mb: float, repeats: int = 10) -> tuple[float, float]:
    """Host time to enqueue one device-mode step (the GPUs run it asynchronously), and the time
    per step of 10 steps run back to back with one synchronisation (a diagnostic only: without
    the per-step barrier consecutive steps may overlap, so it bounds the fixed per-step cost)."""
    session = Session("device", shapes, DeviceSet("cuda", gpus), list(range(len(gpus))),
                      LocalGroup(), dtype="float32", optimizer="none", seed=0, chunk_mb=chunk_mb)
    times, bursts = [], []
    for _ in range(repeats + 2):
        session.synchronize()
        start = time.perf_counter()
        session.step()
        times.append(time.perf_counter() - start)
        session.synchronize()
        start = time.perf_counter()
        for _ in range(10):
            session.step()
        session.synchronize()
        bursts.append((time.perf_counter() - start) / 10)
    session.close()
    return statistics.median(times[2:]), statistics.median(bursts[2:])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--network", default="resnet")
    parser.add_argument("--num-layers", type=int, default=200)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--chunks", default="32,64,128,256", help="--chunk-mb values to sweep")
    parser.add_argument("--rounds", type=int, default=1, help="ratio tables to measure")
    parser.add_argument("--out", default=None, help="write all figures as JSON here")
    args = parser.parse_args()
    if torch.cuda.device_count() < 2:
        print("this benchmark needs at least 2 GPUs")
        return 0
    gpus = tuple(range(torch.cuda.device_count()))
    base = Config(network=args.network, num_layers=args.num_layers, gpus=gpus,
                  num_batches=args.iters, warmup=3, test_results=False)
    shapes = networks.get_shapes(args.network, num_layers=args.num_layers)
    numel = networks.num_elements(shapes)
    nbytes = numel * 4
    flat, flat_per_gpu = flat_configs(base, numel, len(gpus))
    figures = {"gpus": [torch.cuda.get_device_name(g) for g in gpus], "torch": torch.__version__,
               "network": args.network, "num_layers": args.num_layers, "nbytes": nbytes}
    sweep, enqueue = chunk_sweep(base, shapes, gpus, [float(c) for c in args.chunks.split(",")])
    figures["chunk_sweep"], figures["device_enqueue_seconds"] = sweep, enqueue
    print(f"# {len(gpus)} x {figures['gpus'][0]}, torch {torch.__version__}, {args.network}-"
          f"{args.num_layers}, {nbytes / 1e6:.2f} MB float32, {args.iters} iterations (median)")
    print("# chunk sweep (GB/sec per gpu): " + ", ".join(f"{k}: {v:.1f}" for k, v in sweep.items()))
    print("# device step, host enqueue time / step time in bursts of 10: " + ", ".join(
        f"{k}: {a * 1e3:.3f} / {b * 1e3:.3f} ms ({nbytes / b / 1e9:.1f} GB/s)"
        for k, (a, b) in enqueue.items()))

    figures["rounds"] = []
    for r in range(args.rounds):
        figures["rounds"].append(ratio_round(base, flat, flat_per_gpu, gpus, nbytes,
                                             f"round {r + 1} of {args.rounds}"))
    if args.rounds > 1:
        print(f"# median over the {args.rounds} rounds of each row's figures and ratio")
        per_row = list(zip(*[rnd["rows"] for rnd in figures["rounds"]]))   # a row's rounds
        _table([(rs[0]["what"], statistics.median(x["gbps"] for x in rs), rs[0]["against"],
                 statistics.median(x["ceiling_gbps"] for x in rs)) for rs in per_row],
               ratios=[statistics.median(x["gbps"] / x["ceiling_gbps"] for x in rs)
                       for rs in per_row])
    if args.out:
        Path(args.out).write_text(json.dumps(figures, indent=1))
    return 0


def busbw(config: Config) -> tuple[float, object]:
    """The run's median busbw, and the run's result."""
    result = run(config)
    return result.summary.busbw_median, result


def flat_configs(base: Config, numel: int, gpus: int) -> tuple[Config, Config]:
    """``base`` on one flat array of the network's elements, and on one equal flat array per
    GPU (network files in a temporary folder)."""
    tmp = Path(tempfile.mkdtemp())
    (tmp / "flat.json").write_text(json.dumps([["flat", [numel]]]))
    # The device mode places whole keys: one flat key would sit on one GPU, so its fair flat
    # counterpart is one equal key per GPU.
    parts = [numel // gpus + (i < numel % gpus) for i in range(gpus)]
    (tmp / "flat_per_gpu.json").write_text(json.dumps([[f"flat{i}", [p]] for i, p in enumerate(parts)]))
    return (replace(base, network=str(tmp / "flat.json"), num_layers=None),
            replace(base, network=str(tmp / "flat_per_gpu.json"), num_layers=None))


def chunk_sweep(base: Config, shapes, gpus, chunks: list[float]) -> tuple[dict, dict]:
    """--chunk-mb swept for the device and local modes: busbw by mode and chunk, and the device
    mode's host enqueue time and step time in bursts (``enqueue_seconds``) by chunk."""
    sweep, enqueue = {}, {}
    for mode in ("device", "local"):
        for chunk in chunks:
            gbps, _ = busbw(replace(base, kv_store=mode, chunk_mb=chunk, reference=False))
            sweep[f"{mode} chunk {chunk:g} MB"] = gbps
            if mode == "device":
                enqueue[f"device chunk {chunk:g} MB"] = enqueue_seconds(shapes, gpus, chunk)
    return sweep, enqueue


def ratio_round(base: Config, flat: Config, flat_per_gpu: Config, gpus, nbytes: int,
                which: str) -> dict:
    """One ratio table: the ceilings and every mode measured again, printed; returns the round's
    figures."""
    rows = []
    uni = p2p_copy_gbps(0, 1, 256 * 10**6)
    bi = p2p_copy_gbps(0, 1, 256 * 10**6, bidirectional=True)
    device_net, _ = busbw(replace(base, kv_store="device", reference=False))
    device_flat, _ = busbw(replace(flat_per_gpu, kv_store="device", reference=False))
    rows.append(("device", device_net, "p2p unidirectional copy", uni))
    rows.append(("device", device_net, "p2p bidirectional / 2", bi / 2))
    rows.append(("device, flat per gpu", device_flat, "device, network arrays", device_net))

    nccl_net, result = busbw(replace(base, kv_store="nccl"))
    ref = result.reference.busbw_median
    nccl_flat, _ = busbw(replace(flat, kv_store="nccl", reference=False))
    rows.append(("nccl", nccl_net, "flat all-reduce (same run)", ref))
    rows.append(("nccl, flat array", nccl_flat, "nccl, network arrays", nccl_net))

    hp = host_path(list(gpus), nbytes)
    local_net, _ = busbw(replace(base, kv_store="local", reference=False))
    rows.append(("local", local_net, "host path, pipelined bound",
                 hp.busbw_gbps(hp.bound_seconds)))
    rows.append(("local", local_net, "host path, serial bound",
                 hp.busbw_gbps(hp.serial_seconds)))
    print(f"# {which}: p2p copy 0->1: unidirectional {uni:.1f} GB/s, "
          f"bidirectional {bi:.1f} GB/s; host path: d2h {hp.d2h_seconds * 1e3:.2f} ms, sum "
          f"{hp.sum_seconds * 1e3:.2f} ms ({hp.threads} threads), h2d "
          f"{hp.h2d_seconds * 1e3:.2f} ms, all at once {hp.overlap_seconds * 1e3:.2f} ms")
    _table(rows)
    return {"p2p_unidirectional_gbps": uni, "p2p_bidirectional_gbps": bi, "host_path": asdict(hp),
            "rows": [dict(zip(("what", "gbps", "against", "ceiling_gbps"), row)) for row in rows]}


def _table(rows, ratios=None) -> None:
    print(f"{'measured':<22} {'GB/s/gpu':>9}   {'against':<28} {'GB/s':>8} {'ratio':>7}")
    for k, (what, gbps, against, ceiling) in enumerate(rows):
        ratio = ratios[k] if ratios is not None else gbps / ceiling
        print(f"{what:<22} {gbps:>9.1f}   {against:<28} {ceiling:>8.1f} {100 * ratio:>6.1f}%")


if __name__ == "__main__":
    raise SystemExit(main())
