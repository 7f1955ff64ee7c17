"""The seeds' experiment on the lab: how the link rate between hosts bounds the distributed modes.

    flock /tmp/bandwidth-bench.lock python3 benchmarks/network_impact.py \
        --rates 1gbit,2.5gbit,5gbit,10gbit --networks resnet-50,inception-v3 \
        [--mxnet /opt/mxvenv/bin/python] [--plot impact.png] [--json impact.json]

Needs root (it makes a ``bandwidth.netlab`` lab of 4 hosts, named ``--name``, and removes it on
every exit path). For every rate (both directions of every host's link shaped to it) and network
it runs, through the ssh launcher across the hosts:

* ``dist_sync``: 2 workers x 2 servers, one CPU device per worker, one process per host;
* ``dist_async`` (``--optimizer sgd``), the same;
* ``dist_nccl``: 4 workers, one CPU device each (Gloo's ring), one per host;
* with ``--mxnet PYTHON``: ``dist_sync`` through MXNet's ps-lite (``--backend mxnet``, 2 CPU
  devices per worker, ``--scheduler``), the same placement, under that interpreter, and the
  toolkit's ``dist_sync`` with 2 CPU devices per worker too (the same configuration).

It prints, per mode, the median step time and ``% of link`` (the full-duplex bound of
``bandwidth.links.linkbound`` over the measured step) of every cell, and the seeds' table: the
performance ratio of every rate against the fastest one, per network (1 = the link does not
matter). With ``--mxnet``, the toolkit's dist_sync time over MXNet's per cell.

With ``--compute``, every cell is a training step (``measure.py --compute``): ``dist_sync`` under
the ``backward`` schedule (2 workers x 2 servers) and ``dist_nccl`` under ``ddp`` (4 workers),
per network, batch size (``--batch-size 16,32``) and rate, and the table is the seeds'
"Performance Ratio" row: compute alone / step, both measured in the cell's own run (1: the
network costs nothing). ``--compute ms --step-ms step_ms.json`` takes each network's and batch's
forward and backward milliseconds from ``benchmarks/gpu_step_ms.py``'s JSON (a real GPU's step,
since the lab's CPUs compute far slower than a GPU); ``--compute flops`` runs the FLOPs on the
lab's CPUs instead::

    flock /tmp/heavy.lock python3 benchmarks/network_impact.py --compute ms \
        --step-ms step_ms.json --batch-size 16,32 --plot ratio.png --json ratio.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bandwidth.links.linkbound import (link_bound, parse_rate, ps_host_bytes,  # noqa: E402
                                       ring_host_bytes)
from bandwidth.netlab import lab as labmod  # noqa: E402
from bandwidth.netlab.cli import up  # noqa: E402

MODES = {   # name: (launch flags, measure flags, interpreter: None = this one)
    "dist_sync": (["-n", "2", "-s", "2"], ["--kv-store", "dist_sync", "--cpus", "1"]),
    "dist_async": (["-n", "2", "-s", "2"], ["--kv-store", "dist_async", "--cpus", "1",
                                             "--optimizer", "sgd"]),
    "dist_nccl": (["-n", "4", "-s", "0"], ["--kv-store", "dist_nccl", "--cpus", "1"]),
    "dist_sync 2cpu": (["-n", "2", "-s", "2"], ["--kv-store", "dist_sync", "--cpus", "2"]),
    "mxnet dist_sync": (["-n", "2", "-s", "2", "--scheduler"],
                        ["--backend", "mxnet", "--kv-store", "dist_sync", "--cpus", "2"]),
    # --compute: the documents' two setups, each in its training schedule
    "dist_sync backward": (["-n", "2", "-s", "2"], ["--kv-store", "dist_sync", "--cpus", "1",
                                                     "--schedule", "backward"]),
    "dist_nccl ddp": (["-n", "4", "-s", "0"], ["--kv-store", "dist_nccl", "--cpus", "1",
                                               "--schedule", "ddp"]),
}
COMPUTE_MODES = "dist_sync backward,dist_nccl ddp"
COMPUTE_RATES = "500mbit,1gbit,2.5gbit,5gbit,10gbit"


def compute_flags(compute: str, network: str, batch: int, step_ms: dict) -> list[str]:
    """measure.py's compute flags of a cell (none without --compute)."""
    if compute == "none":
        return []
    if compute == "flops":
        return ["--compute", "flops", "--batch-size", str(batch)]
    forward, backward = step_ms[(network, batch)]
    return ["--compute-ms", f"{forward:.3f},{backward:.3f}", "--batch-size", str(batch)]


def load_step_ms(path: str) -> dict:
    """gpu_step_ms.py's JSON: {(network, batch): (forward ms, backward ms)}."""
    return {(r["network"], int(r["batch_size"])): (r["forward_ms"], r["backward_ms"])
            for r in json.loads(Path(path).read_text())}


def run_cell(lab, mode: str, network: str, rate_bits: int, batches: int,
             mxnet_python: str | None, extra: list[str] = ()) -> dict:
    launch_flags, measure_flags = MODES[mode]
    measure_flags = measure_flags + list(extra)
    python = mxnet_python if mode.startswith("mxnet") else "python3"
    name, _, layers = network.rpartition("-")
    net_flags = (["--network", name, "--num-layers", layers] if layers.isdigit()
                 else ["--network", network])
    if network.startswith("inception-"):
        net_flags += ["--image-shape", "3,299,299"]
    with tempfile.TemporaryDirectory(prefix="bandwidth-impact-") as tmp:
        out = Path(tmp, "result.json")
        argv = [sys.executable, str(ROOT / "launch.py"), "-H", str(lab.state_dir / "hosts"),
                "--ssh-config", str(lab.state_dir / "ssh_config"), *launch_flags,
                "--timeout", "120", python, "bandwidth/measure.py", *measure_flags, *net_flags,
                "--num-batches", str(batches), "--no-reference", "--json", str(out)]
        proc = subprocess.run(argv, cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)),
                              capture_output=True, text=True, timeout=900)
        if proc.returncode != 0 or not out.exists():
            fail = [line for line in proc.stderr.splitlines() if line.startswith("FAIL")]
            return {"error": (fail or proc.stderr.splitlines()[-1:] or ["?"])[0]}
        doc = json.loads(out.read_text())
    result = doc["results"][0] if "results" in doc else doc
    seconds = result["summary"]["seconds_median"]
    nbytes = result["summary"]["nbytes"]
    hosts = [h.address for h in lab.hosts]
    if mode.startswith("dist_nccl"):           # and "dist_nccl ddp" (--compute)
        traffic = ring_host_bytes(hosts, nbytes)
    else:
        # MXNet's placement of keys on servers is the same rule (kvstores/dist.py); its JSON has
        # no per-server load, so the toolkit's split of these arrays stands in for both.
        shares = (result.get("workers") or [{}])[0].get("server_nbytes") or shares_of(result)
        traffic = ps_host_bytes(hosts[:2], hosts[2:], shares)
    bound = link_bound(traffic, rate_bits, seconds)
    costs = result.get("step_costs") or {}
    return {"seconds": seconds, "nbytes": nbytes, "bound_s": bound.seconds, "pct": bound.pct,
            "error": None, **{k: costs[k] for k in ("compute_s", "exchange_s", "step_s",
                                                     "exposed_s", "last_exchange_s", "overlap",
                                                     "performance_ratio") if k in costs}}


def shares_of(result: dict) -> list[float]:
    """Per-server bytes from the notes ("per-server load: 0: 48.87 MB, 1: 53.15 MB")."""
    for note in result.get("kv_store", {}).get("notes", []):
        if note.startswith("per-server load:"):
            parts = note.split(";")[0].split(":", 1)[1].split(",")
            return [float(p.split(":")[1].split()[0]) * 1e6 for p in parts]
    nbytes = result["summary"]["nbytes"]
    return [nbytes / 2, nbytes / 2]


def tables(cells: dict, rates: list[str], networks: list[str], modes: list[str]) -> list[str]:
    lines = []
    for mode in modes:
        lines += ["", f"## {mode}: median step time, s (% of link)",
                  "| network | " + " | ".join(rates) + " |",
                  "|---|" + "---|" * len(rates)]
        for network in networks:
            row = []
            for rate in rates:
                c = cells[(mode, network, rate)]
                row.append(f"FAIL ({c['error']})" if c["error"] else
                           f"{c['seconds']:.3f} ({c['pct']:.0f} %)")
            lines.append(f"| {network} | " + " | ".join(row) + " |")
        fastest = max(rates, key=parse_rate)
        lines += ["", f"## {mode}: performance ratio against {fastest} (its step time / this "
                  "one's)", "| network | " + " | ".join(rates) + " |",
                  "|---|" + "---|" * len(rates)]
        for network in networks:
            best = cells[(mode, network, fastest)]
            row = []
            for rate in rates:
                c = cells[(mode, network, rate)]
                row.append("Fail" if c["error"] or best["error"] else
                           f"{best['seconds'] / c['seconds']:.2f}")
            lines.append(f"| {network} | " + " | ".join(row) + " |")
    if "mxnet dist_sync" in modes:
        lines += ["", "## the toolkit's dist_sync against MXNet ps-lite's, 2 CPU devices per worker "
                  "each: MXNet's step time / the toolkit's",
                  "| network | " + " | ".join(rates) + " |", "|---|" + "---|" * len(rates)]
        for network in networks:
            row = []
            for rate in rates:
                a = cells[("dist_sync 2cpu", network, rate)]
                b = cells[("mxnet dist_sync", network, rate)]
                row.append("n/a" if a["error"] or b["error"] else
                           f"{b['seconds'] / a['seconds']:.2f} x")
            lines.append(f"| {network} | " + " | ".join(row) + " |")
    return lines


def ratio_tables(cells: dict, rates: list[str], rows: list[str], modes: list[str]) -> list[str]:
    """The seeds' "Performance Ratio" rows: compute alone / step per cell (--compute), with
    the step and compute alone in ms beside it."""
    lines = []
    for mode in modes:
        lines += ["", f"## {mode}: Performance Ratio (compute alone / step; 1: the network "
                  "costs nothing)", "| network, batch | " + " | ".join(rates) + " |",
                  "|---|" + "---|" * len(rates)]
        for row in rows:
            cell_text = []
            for rate in rates:
                c = cells[(mode, row, rate)]
                cell_text.append(f"FAIL ({c['error']})" if c["error"] else
                                 f"{c['performance_ratio']:.2f} ({1e3 * c['step_s']:.0f} / "
                                 f"{1e3 * c['compute_s']:.0f} ms)")
            lines.append(f"| {row} | " + " | ".join(cell_text) + " |")
    return lines


def overlap_table(cells: dict, rates: list[str], rows: list[str], modes: list[str]) -> list[str]:
    """Issue 26's overlap target per cell: where compute alone is at least 2 x the exchange
    alone, the exposed communication is at most the last unit's exchange + 10 % of the exchange
    alone (both from the cell's own run)."""
    lines = ["", "## overlap: exposed against the last unit's exchange + 10 % of the exchange "
             "alone (the target where compute alone >= 2 x the exchange alone)",
             "| mode | network, batch | rate | exchange alone ms | compute alone ms | exposed ms "
             "| last unit ms | allowed ms | overlap | target |", "|---|---|---|---|---|---|---|"
             "---|---|---|"]
    for mode in modes:
        for row in rows:
            for rate in rates:
                c = cells[(mode, row, rate)]
                if c["error"] or "last_exchange_s" not in c:
                    continue
                allowed = c["last_exchange_s"] + 0.1 * c["exchange_s"]
                applies = c["compute_s"] >= 2 * c["exchange_s"]
                verdict = (("met" if c["exposed_s"] <= allowed else "NOT met") if applies
                           else "n/a (compute < 2 x exchange)")
                lines.append(f"| {mode} | {row} | {rate} | {1e3 * c['exchange_s']:.0f} | "
                             f"{1e3 * c['compute_s']:.0f} | {1e3 * c['exposed_s']:.0f} | "
                             f"{1e3 * c['last_exchange_s']:.0f} | {1e3 * allowed:.0f} | "
                             f"{100 * c['overlap']:.1f} % | {verdict} |")
    return lines


def _lines_plot(cells: dict, rates: list[str], rows: list[str], modes: list[str], path: str,
                key: str, ylabel: str, ymax: float):
    """One line per (mode, row) of ``cells[...][key]`` over the link rates (log scale)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 4))
    ax = fig.add_subplot()
    x = [parse_rate(r) / 1e9 for r in rates]
    for mode in modes:
        for row in rows:
            y = [cells[(mode, row, r)].get(key) for r in rates]
            ax.plot(x, [v if v is not None else float("nan") for v in y], marker="o",
                    label=f"{mode}, {row}")
    ax.set_xscale("log")
    ax.set_xticks(x, [f"{v:g}" for v in x])
    ax.set_xlabel("link rate, Gbit/s each way (tc tbf, netlab)")
    ax.set_ylabel(ylabel)
    ax.set_ylim(0, ymax)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def ratio_plot(cells: dict, rates: list[str], rows: list[str], modes: list[str], path: str):
    _lines_plot(cells, rates, rows, modes, path, "performance_ratio",
                "performance ratio (compute alone / step)", 1.05)


def plot(cells: dict, rates: list[str], networks: list[str], modes: list[str], path: str):
    _lines_plot(cells, rates, networks, modes, path, "pct", "% of the full-duplex link bound", 105)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", default=None,
                        help=f"default 1gbit,2.5gbit,5gbit,10gbit ({COMPUTE_RATES} with --compute)")
    parser.add_argument("--networks", default="resnet-50,inception-v3")
    parser.add_argument("--modes", default=None,
                        help=f"default dist_sync,dist_async,dist_nccl ({COMPUTE_MODES} with "
                             "--compute)")
    parser.add_argument("--compute", default="none", choices=("none", "flops", "ms"),
                        help="cells are training steps: 'ms' with --step-ms (a GPU's step), "
                             "'flops' on the lab's CPUs")
    parser.add_argument("--batch-size", default="16,32", help="with --compute: batch sizes")
    parser.add_argument("--step-ms", default=None, metavar="FILE.json",
                        help="--compute ms: benchmarks/gpu_step_ms.py's JSON")
    parser.add_argument("--mxnet", default=None, metavar="PYTHON",
                        help="also MXNet's ps-lite dist_sync, under this interpreter")
    parser.add_argument("--num-batches", type=int, default=5)
    parser.add_argument("--name", default="bwimpact")
    parser.add_argument("--subnet", default="198.18.120.0/24")
    parser.add_argument("--plot", default=None)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    computing = args.compute != "none"
    rates = (args.rates or (COMPUTE_RATES if computing else "1gbit,2.5gbit,5gbit,10gbit")
             ).split(",")
    networks = args.networks.split(",")
    modes = (args.modes or (COMPUTE_MODES if computing else "dist_sync,dist_async,dist_nccl")
             ).split(",") + (["dist_sync 2cpu", "mxnet dist_sync"] if args.mxnet else [])
    batches = [int(b) for b in args.batch_size.split(",")] if computing else [0]
    if args.compute == "ms" and not args.step_ms:
        parser.error("--compute ms needs --step-ms FILE.json (benchmarks/gpu_step_ms.py --json)")
    step_ms = load_step_ms(args.step_ms) if args.compute == "ms" else {}
    missing = [f"{n} batch {b}" for n in networks for b in batches
               if args.compute == "ms" and (n, b) not in step_ms]
    if missing:
        parser.error(f"--step-ms {args.step_ms} has no figure for {', '.join(missing)}")
    rows = [f"{n}, batch {b}" if computing else n for n in networks for b in batches]
    labmod.remove(args.name)
    lab = up(args.name, 4, rates[0], subnet=args.subnet)
    cells = {}
    try:
        for rate in rates:
            lab = labmod.reshape(lab, parse_rate(rate))
            for network, batch, row in zip([n for n in networks for _ in batches],
                                           batches * len(networks), rows):
                for mode in modes:
                    cell = run_cell(lab, mode, network, parse_rate(rate), args.num_batches,
                                    args.mxnet, compute_flags(args.compute, network, batch,
                                                              step_ms))
                    cells[(mode, row, rate)] = cell
                    print(f"# {rate:>8} {row:<24} {mode:<18} " + (
                        f"FAIL {cell['error']}" if cell["error"] else
                        f"{cell['seconds']:.3f} s, {cell['pct']:.1f} % of link" + (
                            f", ratio {cell['performance_ratio']:.3f}" if computing else "")),
                        flush=True)
    finally:
        labmod.remove(args.name)
    print("\n".join(ratio_tables(cells, rates, rows, modes)
                    + overlap_table(cells, rates, rows, modes) if computing
                    else tables(cells, rates, networks, modes)))
    if args.plot:
        (ratio_plot if computing else plot)(cells, rates, rows, modes, args.plot)
        print(f"# wrote {args.plot}")
    if args.json:
        Path(args.json).write_text(json.dumps(
            {"rates": rates, "networks": networks, "modes": modes, "compute": args.compute,
             "batch_sizes": batches if computing else [], "step_ms": [
                 {"network": n, "batch_size": b, "forward_ms": f, "backward_ms": w}
                 for (n, b), (f, w) in step_ms.items()],
             "cells": [{"mode": m, "network": n, "rate": r, **c}
                       for (m, n, r), c in cells.items()]}, indent=1))
        print(f"# wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
