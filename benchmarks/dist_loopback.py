"""Parameter-server modes on loopback against the raw transport, measured in the same run.

    python benchmarks/dist_loopback.py [--network resnet --num-layers 50] [--iters 10]

One worker with one CPU device, and 1, 2 and 4 servers, run dist_sync through launch.py; the raw
reference is Gloo send+recv of the same bytes between two processes (benchmarks/raw_sendrecv.py).
Prints GB/s each way per worker (bytes / step time) and the ratio; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import networks

ROOT = Path(__file__).resolve().parent.parent


def launch(servers: int, *command: str) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    subprocess.run([sys.executable, str(ROOT / "launch.py"), "-n", "1", "-s", str(servers),
                    "--timeout", "120", sys.executable, *command], cwd=ROOT, env=env, check=True,
                   stdout=subprocess.DEVNULL, timeout=900)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--network", default="resnet")
    parser.add_argument("--num-layers", type=int, default=50)
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--servers", default="1,2,4")
    args = parser.parse_args()
    nbytes = networks.num_elements(networks.get_shapes(args.network,
                                                       num_layers=args.num_layers)) * 4
    tmp = Path(tempfile.mkdtemp())
    launch(1, "benchmarks/raw_sendrecv.py", "--bytes", str(nbytes), "--iters", str(args.iters),
           "--json", str(tmp / "raw.json"))
    raw = json.loads((tmp / "raw.json").read_text())["gbps"]
    rows = []
    for servers in [int(s) for s in args.servers.split(",")]:
        out = tmp / f"ps{servers}.json"
        launch(servers, "bandwidth/measure.py", "--kv-store", "dist_sync", "--cpus", "1",
               "--network", args.network, "--num-layers", str(args.num_layers),
               "--num-batches", str(args.iters), "--warmup", "2", "--json", str(out))
        summary = json.loads(out.read_text())["results"][0]["summary"]
        rows.append((servers, summary["algbw_median"], summary["seconds_median"]))
    print(f"# {args.network}-{args.num_layers}: {nbytes / 1e6:.2f} MB float32, 1 worker, 1 CPU "
          f"device, loopback, {args.iters} iterations (median); raw Gloo send+recv {raw:.3f} GB/s")
    print(f"{'servers':>7} {'GB/s each way':>14} {'step ms':>9} {'of raw':>7}")
    for servers, gbps, seconds in rows:
        print(f"{servers:>7} {gbps:>14.3f} {seconds * 1e3:>9.2f} {100 * gbps / raw:>6.1f}%")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
