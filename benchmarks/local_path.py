"""The ``local`` mode against the path it runs on, measured in the same process: on one GPU the
duplex host path (device->host and host->device at once, bandwidth.ceiling.host.duplex_host_gbps),
on CPU devices the host-memory bound of bandwidth.ceiling.bounds.cpu_local_gbps. Every network runs
``--runs`` times; the table shows the median of the runs' medians, their spread (max / min) and
the ratio to the ceiling. Issue 17's targets: >= 0.85 of the duplex path for networks of 64 MB or
more, >= 0.6 for 16-64 MB, spread <= 1.05.

    PYTHONPATH=$PWD python benchmarks/local_path.py --gpus 0          # every network of 16 MB+
    PYTHONPATH=$PWD python benchmarks/local_path.py --cpus 2 --networks resnet-50,lenet --runs 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import networks
from bandwidth.backends.registry import store_class
from bandwidth.ceiling.bounds import BoundCache, cpu_local_gbps
from bandwidth.config.options import Config
from bandwidth.plan.plan import make_plan
from bandwidth.run import run

MIN_MB, MAX_MB = 16, 2000


def network_configs(names: str | None, dtype: str) -> list[dict]:
    """``name`` or ``name-depth`` entries; default: every network at its default shape whose
    arrays take MIN_MB..MAX_MB MB in ``dtype``."""
    if names:
        picked = []
        for name in names.split(","):
            base, _, depth = name.partition("-")
            if base in networks.NETWORKS and depth.isdigit():
                picked.append({"network": base, "num_layers": int(depth)})
            else:
                picked.append({"network": name})
        return picked
    picked = []
    for name in networks.NETWORKS:
        try:
            plan = make_plan(Config(network=name, cpus=1, dtype=dtype), store_class,
                             with_devices=False)
        except Exception:                     # noqa: BLE001 - a network that needs another shape
            continue
        if MIN_MB * 10**6 <= plan.nbytes <= MAX_MB * 10**6:
            picked.append({"network": name})
    return picked


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--gpus", default="0", help="one GPU id (default 0)")
    where.add_argument("--cpus", type=int, default=None)
    parser.add_argument("--networks", default=None,
                        help=f"comma list (resnet-200, gpt2, ...); default every network of "
                             f"{MIN_MB}-{MAX_MB} MB")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--num-batches", type=int, default=20)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    on_gpu = args.cpus is None
    place = {"gpus": (int(args.gpus),)} if on_gpu else {"cpus": args.cpus}
    rows = []
    duplex = []
    if on_gpu:
        from bandwidth.ceiling.host import duplex_host_gbps, host_link_gbps
        gpu = int(args.gpus)
        duplex.append(duplex_host_gbps(gpu, 256 * 10**6))
        print(f"# GPU {gpu}: host->device {host_link_gbps(gpu, 256 * 10**6, True, True):.2f}, "
              f"device->host {host_link_gbps(gpu, 256 * 10**6, True, False):.2f}, duplex "
              f"{duplex[0]:.2f} GB/s (pinned, 256 MB)", flush=True)
    for net in network_configs(args.networks, args.dtype):
        config = Config(kv_store="local", dtype=args.dtype, num_batches=args.num_batches,
                        **place, **net)
        plan = make_plan(config, store_class)
        bounds = BoundCache([plan])
        medians, ceilings, errors = [], [], []
        start = time.perf_counter()
        for _ in range(args.runs):
            result = run(config, plan=plan, bounds=bounds)
            figure = result.summary.algbw_median if on_gpu else result.summary.busbw_median
            medians.append(figure)
            errors.append(result.summary.error_max)
            if not on_gpu:
                ceilings.append(cpu_local_gbps(plan.nbytes, args.cpus))
        if on_gpu:
            ceiling = duplex_host_gbps(gpu, 256 * 10**6)
            duplex.append(ceiling)
        else:
            ceiling = max(ceilings)
        row = {"network": plan.network_label, "mb": plan.nbytes / 1e6,
               "figure": "algbw" if on_gpu else "busbw", "runs": medians,
               "median": statistics.median(medians), "spread": max(medians) / min(medians),
               "ceiling": ceiling, "ratio": statistics.median(medians) / ceiling,
               "printed_ceiling": None if result.ceiling is None else result.ceiling.gbps,
               "error_max": max(errors), "seconds": time.perf_counter() - start,
               "notes": result.notes}
        rows.append(row)
        print(f"{row['network']:<22} {row['mb']:>9.2f} MB  {row['figure']} median "
              f"{row['median']:8.3f} GB/s (runs {', '.join(f'{m:.2f}' for m in medians)}), "
              f"spread {row['spread']:.3f}, ceiling {ceiling:.2f}, ratio {row['ratio']:.3f}, "
              f"error {row['error_max']:g}, {row['seconds']:.0f} s", flush=True)
    print(f"\n{'network':<22} {'MB':>9} {'GB/s':>8} {'ceiling':>8} {'ratio':>6} {'spread':>6} "
          "target")
    for row in rows:
        target = 0.85 if row["mb"] >= 64 else 0.6
        ok = row["ratio"] >= target and row["spread"] <= 1.05
        print(f"{row['network']:<22} {row['mb']:>9.2f} {row['median']:>8.3f} "
              f"{row['ceiling']:>8.2f} {row['ratio']:>6.3f} {row['spread']:>6.3f} "
              f"{target:.2f} {'ok' if ok else 'MISSED'}")
    if on_gpu:
        print(f"# duplex host path over the run: {', '.join(f'{d:.2f}' for d in duplex)} GB/s")
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "duplex": duplex}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
