"""Parameter-server modes on loopback against the raw transport, measured in the same run.

    python benchmarks/dist_loopback.py [--network resnet --num-layers 50] [--iters 10]
        [--rounds 3] [--mxnet-python /path/to/venv/bin/python]

One worker with one CPU device, and 1, 2 and 4 servers, run dist_sync through launch.py; the raw
reference is Gloo send+recv of the same bytes between two processes (benchmarks/raw_sendrecv.py).
With --mxnet-python (a Python that has mxnet 1.9.1 and this package), MXNet's own dist_sync
(ps-lite, with its scheduler) runs the same configuration right after each of the toolkit's.
--rounds repeats everything and ends with the median of each row over the rounds.
Prints GB/s each way per worker (bytes / step time) and the ratios; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import networks

ROOT = Path(__file__).resolve().parent.parent


def launch(servers: int, *command: str, python: str = sys.executable,
           scheduler: bool = False) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    subprocess.run([sys.executable, str(ROOT / "launch.py"), "-n", "1", "-s", str(servers),
                    "--timeout", "120", *(["--scheduler"] if scheduler else []), python,
                    *command], cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL,
                   timeout=900)


def dist_sync(servers: int, args, out: Path, python: str | None) -> tuple[float, float]:
    """(GB/s each way, step seconds) of one dist_sync run; MXNet's when ``python`` is given."""
    launch(servers, "bandwidth/measure.py", "--kv-store", "dist_sync", "--cpus", "1",
           "--network", args.network, "--num-layers", str(args.num_layers),
           "--num-batches", str(args.iters), "--warmup", "2", "--json", str(out),
           *(["--backend", "mxnet"] if python else []), python=python or sys.executable,
           scheduler=python is not None)
    summary = json.loads(out.read_text())["results"][0]["summary"]
    return summary["algbw_median"], summary["seconds_median"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--network", default="resnet")
    parser.add_argument("--num-layers", type=int, default=50)
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--servers", default="1,2,4")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--mxnet-python", default=None,
                        help="a Python with mxnet 1.9.1: also run MXNet's dist_sync")
    args = parser.parse_args()
    nbytes = networks.num_elements(networks.get_shapes(args.network,
                                                       num_layers=args.num_layers)) * 4
    tmp = Path(tempfile.mkdtemp())
    servers_list = [int(s) for s in args.servers.split(",")]
    rounds = []
    for r in range(args.rounds):
        launch(1, "benchmarks/raw_sendrecv.py", "--bytes", str(nbytes), "--iters",
               str(args.iters), "--json", str(tmp / "raw.json"))
        raw = json.loads((tmp / "raw.json").read_text())["gbps"]
        rows = {}
        for servers in servers_list:
            rows[servers] = dist_sync(servers, args, tmp / f"ps{servers}.json", None)
            if args.mxnet_python:
                rows[servers] += dist_sync(servers, args, tmp / f"mx{servers}.json",
                                           args.mxnet_python)
        rounds.append((raw, rows))
        _table(f"round {r + 1}", args, nbytes, raw, rows)
    if args.rounds > 1:
        raw = statistics.median(raw for raw, _ in rounds)
        rows = {s: tuple(statistics.median(rs[s][k] for _, rs in rounds)
                         for k in range(len(rounds[0][1][s]))) for s in servers_list}
        _table(f"median of {args.rounds} rounds", args, nbytes, raw, rows)
    return 0


def _table(title: str, args, nbytes: int, raw: float, rows: dict) -> None:
    print(f"# {title}: {args.network}-{args.num_layers}: {nbytes / 1e6:.2f} MB float32, 1 worker, "
          f"1 CPU device, loopback, {args.iters} iterations (median); raw Gloo send+recv "
          f"{raw:.3f} GB/s")
    mx = args.mxnet_python is not None
    print(f"{'servers':>7} {'GB/s each way':>14} {'step ms':>9} {'of raw':>7}"
          + (f" {'mxnet GB/s':>11} {'mxnet ms':>9} {'toolkit/mxnet':>14}" if mx else ""))
    for servers, row in rows.items():
        gbps, seconds = row[:2]
        line = f"{servers:>7} {gbps:>14.3f} {seconds * 1e3:>9.2f} {100 * gbps / raw:>6.1f}%"
        if mx:
            line += f" {row[2]:>11.3f} {row[3] * 1e3:>9.2f} {gbps / row[2]:>14.2f}"
        print(line, flush=True)

if __name__ == "__main__":
    raise SystemExit(main())
