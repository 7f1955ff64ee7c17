"""The seed's scale, run for real (issue 27): W workers x S servers on loopback or across a lab.

    flock /tmp/heavy.lock python3 benchmarks/scale.py --cells 50x5:dist_sync,100x10:dist_sync
    flock /tmp/heavy.lock python3 benchmarks/scale.py --cells 50x5:dist_sync:resnet-50
    flock /tmp/heavy.lock python3 benchmarks/scale.py --lab 25 --rate 100mbit --cells 50x5:dist_sync

A cell is ``WxS:MODE[:NETWORK[:FLAGS]]`` (network default: mlp on 1x28x28 images, 0.4 MB;
``resnet-50`` and the others at their own sizes; FLAGS: measure.py options joined by ``+``, each
without its dashes, ``server-order=staggered+max-in-flight=2``). ``dist_async`` runs with
``--optimizer sgd``; ``dist_nccl`` takes W ranks and no servers (S is ignored).
``mxnet-dist_sync`` is real MXNet ps-lite (``--backend mxnet``, launch.py ``--scheduler``) under
the interpreter ``--mxnet PYTHON``, the same placement: the toolkit's cell before it in
``--cells`` is the comparison of the same run::

    flock /tmp/heavy.lock python3 benchmarks/scale.py --lab 25 --rate 1gbit --mxnet \
        /tmp/mxv/bin/python --cells 50x5:dist_sync:mobilenet,50x5:mxnet-dist_sync:mobilenet

Every cell runs launch.py with its default timeouts (no ``--timeout``), one CPU device per
worker, ``--json``; with ``--lab N`` on a ``bandwidth.netlab`` lab of N hosts (``--name``,
removed on every exit path) with every link shaped to ``--rate``, through the ssh launcher,
round-robin (``--placement`` to choose); ``--rto-min MS`` lowers every lab host's least TCP
retransmission timeout (``netlab up --rto-min``), as datacenter hosts do against incast.

Prints per cell: exact (every worker's every iteration has error 0, read from the JSON's
``workers``; async modes: the largest error), the wall time of the whole launch, the median step,
on a lab its GB/s per worker and % of the full-duplex link bound (``--link-rate``),
the job's memory (the sum of every process's peak RSS from the JSON, and the machine's own peak:
MemAvailable before the launch less its lowest value during it, sampled every 0.2 s), and the
load average (1 min) before and after; under the table, each cell's summary lines on what bound
its steps (the link counters' drops and retransmissions, busy cores) and, on a lab, the drops of
its bridge ports toward the hosts during the launch (what the links lost on the way in, which the
hosts' own counters do not see).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SMALL = ["--network", "mlp", "--image-shape", "1,28,28", "--num-classes", "10"]


def mem_available() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no MemAvailable")


class MemoryWatch(threading.Thread):
    """The lowest MemAvailable while it runs."""

    def __init__(self):
        super().__init__(daemon=True)
        self.before = mem_available()
        self.lowest = self.before
        self.stop = threading.Event()

    def run(self):
        while not self.stop.wait(0.2):
            self.lowest = min(self.lowest, mem_available())

    def peak_used(self) -> int:
        return self.before - self.lowest


def cell_argv(cell: str, batches: int, out: Path, lab, placement: str, rate: str,
              mxnet: str | None) -> list[str]:
    shape, mode, *net = cell.split(":")
    flags = [f"--{flag.replace('=', ' ', 1)}".split() for flag in net[1].split("+")] \
        if len(net) > 1 else []
    net = net[:1]
    workers, servers = (int(x) for x in shape.split("x"))
    if mode == "dist_nccl":
        servers = 0
    network = SMALL if not net else net_flags(net[0])
    launch = [sys.executable, str(ROOT / "launch.py"), "-n", str(workers), "-s", str(servers),
              "--placement", placement]
    python, extra = "python3", []
    if mode.startswith("mxnet-"):
        if mxnet is None:
            raise SystemExit(f"scale.py: cell {cell} needs --mxnet PYTHON")
        mode, python = mode[len("mxnet-"):], mxnet
        launch.append("--scheduler")
        extra += ["--backend", "mxnet"]
    if lab is not None:
        launch += ["-H", str(lab.state_dir / "hosts"), "--ssh-config",
                   str(lab.state_dir / "ssh_config")]
        extra += ["--link-rate", rate]
    if mode.startswith("dist_async"):
        extra += ["--optimizer", "sgd"]
    return [*launch, python, "bandwidth/measure.py", "--kv-store", mode, "--cpus", "1",
            *network, *extra, *(word for flag in flags for word in flag),
            "--num-batches", str(batches), "--json", str(out)]


def net_flags(network: str) -> list[str]:
    name, _, layers = network.rpartition("-")
    return ["--network", name, "--num-layers", layers] if layers.isdigit() else \
        ["--network", network]


def run_cell(cell: str, batches: int, lab, placement: str, rate: str = "",
             mxnet: str | None = None) -> dict:
    with tempfile.TemporaryDirectory(prefix="bandwidth-scale-") as tmp:
        out = Path(tmp, "result.json")
        argv = cell_argv(cell, batches, out, lab, placement, rate, mxnet)
        load_before = os.getloadavg()[0]
        inbound = lab_inbound(lab)
        watch = MemoryWatch()
        watch.start()
        start = time.monotonic()
        proc = subprocess.run(argv, cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)),
                              capture_output=True, text=True, timeout=1800)
        wall = time.monotonic() - start
        watch.stop.set()
        watch.join()
        row = {"cell": cell, "wall_s": wall, "machine_peak": watch.peak_used(),
               "load_before": load_before, "load_after": os.getloadavg()[0],
               "returncode": proc.returncode, "stderr_lines": len(proc.stderr.splitlines()),
               # what the summary says bound the steps (linkcounters: drops, busy cores)
               "bound_lines": [text.strip() for text in proc.stdout.splitlines()
                               if text.startswith(("#   cores:", "#   link counters:",
                                                   "#   bound:"))]}
        if lab is not None:
            row["bound_lines"].append(inbound_line(inbound, lab_inbound(lab)))
        if proc.returncode != 0 or not out.exists():
            lines = proc.stderr.strip().splitlines() or ["?"]
            row["error"] = lines[-1][:300]
            row["stderr_head"] = [line[:300] for line in lines[:20]]   # the cause is near the top
            return row
        result = json.loads(out.read_text())["results"][0]
    errors = [e for w in result["workers"] for e in w["errors"]]
    row.update(error=None, workers=len(result["workers"]), max_error=max(errors),
               exact=len(errors) == batches * len(result["workers"]) and max(errors) == 0.0,
               seconds=result["summary"]["seconds_median"],
               rss_total=result.get("memory", {}).get("total_peak_rss"),
               nbytes=result["summary"]["nbytes"],
               link_pct=(result.get("link_bound") or {}).get("pct"))
    return row


def lab_inbound(lab) -> dict[str, int] | None:
    if lab is None:
        return None
    from bandwidth.netlab.lab import inbound_drops
    return inbound_drops(lab)


def inbound_line(before: dict[str, int], after: dict[str, int]) -> str:
    """The drops of the lab's bridge ports toward each host over the whole launch (every
    exchange of it, warm-up and reference included): what the hosts' links lost on the way in,
    which their own counters do not see."""
    drops = {host: after[host] - before[host] for host in after}
    hit = [host for host in drops if drops[host] > 0]
    if not hit:
        return "lab ports: no drops into any host's link during the launch"
    from bandwidth.hardware.linksummary import host_span
    low, high = min(drops[h] for h in hit), max(drops[h] for h in hit)
    counts = f"{low:,}" if low == high else f"{low:,}-{high:,}"
    rest = len(drops) - len(hit)
    return (f"lab ports: {counts} drops into the link of each of {len(hit)} hosts "
            f"({host_span(hit)}) during the launch (warm-up and reference included)"
            + (f"; {rest} hosts none" if rest else ""))


def line(row: dict) -> str:
    if row.get("error"):
        return (f"| {row['cell']} | FAIL ({row['error']}) | {row['wall_s']:.0f} | | | "
                f"| | {row['machine_peak'] / 1e9:.1f} | {row['load_before']:.1f} / "
                f"{row['load_after']:.1f} |")
    exact = "yes" if row["exact"] else f"no (max error {row['max_error']:.2g})"
    rss = "n/a" if row["rss_total"] is None else f"{row['rss_total'] / 1e9:.1f}"
    link = "" if row.get("link_pct") is None else f"{row['link_pct']:.1f}"
    return (f"| {row['cell']} | {exact}, {row['workers']} workers | {row['wall_s']:.0f} | "
            f"{row['seconds']:.3f} | {row['nbytes'] / row['seconds'] / 1e9:.4f} | {link} | "
            f"{rss} | {row['machine_peak'] / 1e9:.1f} | "
            f"{row['load_before']:.1f} / {row['load_after']:.1f} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", default="50x5:dist_sync,100x10:dist_sync")
    parser.add_argument("--num-batches", type=int, default=3)
    parser.add_argument("--lab", type=int, default=None, metavar="HOSTS",
                        help="across a netlab lab of this many hosts (needs root)")
    parser.add_argument("--rate", default="100mbit", help="the lab's link rate, each way")
    parser.add_argument("--name", default="h6scale")
    parser.add_argument("--subnet", default="198.18.126.0/24")
    parser.add_argument("--rto-min", type=int, default=None, metavar="MS",
                        help="the lab hosts' least TCP retransmission timeout (default 200)")
    parser.add_argument("--placement", default="round-robin")
    parser.add_argument("--mxnet", default=None, metavar="PYTHON",
                        help="the interpreter of the mxnet-* cells (MXNet 1.9.1 installed)")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    lab = None
    if args.lab:
        from bandwidth.netlab import lab as labmod
        from bandwidth.netlab.cli import up
        labmod.remove(args.name)
        lab = up(args.name, args.lab, args.rate, subnet=args.subnet, rto_min_ms=args.rto_min)
    rows = []
    try:
        rto = f", TCP rto_min {args.rto_min} ms" if lab and args.rto_min else ""
        print(f"# {'lab of ' + str(args.lab) + ' hosts at ' + args.rate if lab else 'loopback'}"
              f"{rto}, {args.num_batches} iterations, placement {args.placement}", flush=True)
        print("| cell | exact on every worker | launch wall s | median step s | GB/s per "
              "worker | % of link | sum of peak RSS GB | machine peak GB | load 1 min before / "
              "after |")
        print("|---|---|---|---|---|---|---|---|---|", flush=True)
        for cell in args.cells.split(","):
            rows.append(run_cell(cell, args.num_batches, lab, args.placement, args.rate,
                                 args.mxnet))
            print(line(rows[-1]), flush=True)
        for row in rows:
            for said in row.get("bound_lines", []):
                print(f"# {row['cell']}: {said.lstrip('# ')}")
    finally:
        if lab is not None:
            labmod.remove(args.name)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")
    return 0 if all(not r.get("error") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
