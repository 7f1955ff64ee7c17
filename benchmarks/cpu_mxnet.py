"""The toolkit against real MXNet 1.9.1 on CPU devices, in the same runs (issue 17's CPU target).

    python benchmarks/cpu_mxnet.py --mxnet-python /opt/mxvenv/bin/python --rounds 3 \\
        --out benchmarks/results/cpu-mxnet

Each round runs, for 2 and 4 CPU devices and for resnet-50 (102.02 MB) and lenet at MNIST's shape
(1,28,28, 10 classes: 1.72 MB; no network of --list-networks is under 10 MB at 3,224,224),

    measure.py --backend toolkit,mxnet --kv-store local,device --cpus N NETWORK --num-batches 10

(the two backends' iterations interleaved in one process, run.run_together), each command under
``flock /tmp/bandwidth-bench.lock`` on its own, with the load average before it. Then one table:
per mode, network and device count, the toolkit's and MXNet's medians over the rounds (of each
run's median), the ratio toolkit / MXNet of each run (median, min, max), the printed ceiling and
MXNet's highest share of it. The target: every ratio at least 1.1 and MXNet never above the
ceiling. Exit status 0 when it holds in every cell's median, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NETWORKS = {
    "resnet-50": ["--network", "resnet", "--num-layers", "50"],
    "lenet": ["--network", "lenet", "--image-shape", "1,28,28", "--num-classes", "10"],
}
TARGET = 1.1


def one_run(python: str, network: str, cpus: int, batches: int, out: Path, lock: str) -> dict:
    argv = ["flock", lock, python, "bandwidth/measure.py", "--backend", "toolkit,mxnet",
            "--kv-store", "local,device", "--cpus", str(cpus), *NETWORKS[network],
            "--num-batches", str(batches), "--json", str(out)]
    before = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    started = time.time()
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=900,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    after = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    text = proc.stdout + proc.stderr
    if proc.returncode != 0:
        raise SystemExit(f"cpu_mxnet: {' '.join(argv)} failed ({proc.returncode}):\n{text[-3000:]}")
    doc = json.loads(out.read_text())
    return {"network": network, "cpus": cpus, "load_before": before, "load_after": after,
            "started": time.strftime("%H:%M:%S", time.gmtime(started)), "output": text,
            "rows": [{"backend": r["config"]["backend"], "mode": r["config"]["kv_store"],
                      "gbps": r["summary"]["busbw_median"], "min": r["summary"]["busbw_min"],
                      "max": r["summary"]["busbw_max"], "error": r["summary"]["error_max"],
                      "ceiling": (r["ceiling"] or {}).get("gbps"),
                      "notes": r["kv_store"]["notes"]} for r in doc["results"]]}


def table(runs: list[dict]) -> tuple[list[str], bool]:
    lines = ["| mode | network | CPU devices | runs | toolkit (median of runs) | MXNet 1.9.1 | "
             "toolkit / MXNet: median (min-max) | ceiling (min-max) | MXNet's highest % of "
             "its ceiling | toolkit's highest % |",
             "| --- | --- | ---: | ---: | ---: | ---: | --- | --- | ---: | ---: |"]
    holds = True
    for mode in ("local", "device"):
        for network in NETWORKS:
            for cpus in (2, 4):
                cell = [r for r in runs if r["network"] == network and r["cpus"] == cpus]
                if not cell:
                    continue
                pairs = []
                for run in cell:
                    by = {row["backend"]: row for row in run["rows"] if row["mode"] == mode}
                    pairs.append((by["toolkit"], by["mxnet"]))
                ratios = [t["gbps"] / m["gbps"] for t, m in pairs]
                ceilings = [t["ceiling"] for t, _ in pairs if t["ceiling"]]
                mx_pct = max(100 * m["gbps"] / m["ceiling"] for _, m in pairs if m["ceiling"])
                tk_pct = max(100 * t["gbps"] / t["ceiling"] for t, _ in pairs if t["ceiling"])
                ratio = statistics.median(ratios)
                holds &= ratio >= TARGET and mx_pct <= 100
                lines.append(
                    f"| `{mode}` | {network} | {cpus} | {len(pairs)} | "
                    f"{statistics.median(t['gbps'] for t, _ in pairs):.3f} | "
                    f"{statistics.median(m['gbps'] for _, m in pairs):.3f} | "
                    f"{ratio:.2f} ({min(ratios):.2f}-{max(ratios):.2f}) | "
                    f"{min(ceilings):.3g}-{max(ceilings):.3g} | {mx_pct:.1f} | {tk_pct:.1f} |")
    return lines, holds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mxnet-python", required=True, help="a Python with mxnet 1.9.1 and torch")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--num-batches", type=int, default=10)
    parser.add_argument("--cpus", default="2,4")
    parser.add_argument("--networks", default=",".join(NETWORKS))
    parser.add_argument("--lock", default="/tmp/bandwidth-bench.lock")
    parser.add_argument("--out", required=True, help="folder for the JSON documents and the log")
    parser.add_argument("--append", action="store_true",
                        help="add to the runs already in --out (runs.json) before the table")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    saved = out / "runs.json"
    runs = json.loads(saved.read_text()) if args.append and saved.exists() else []
    for round_ in range(args.rounds):
        for network in args.networks.split(","):
            for cpus in map(int, args.cpus.split(",")):
                name = f"{network}-x{cpus}-r{len(runs) + 1}.json"
                run = one_run(args.mxnet_python, network, cpus, args.num_batches, out / name,
                              args.lock)
                runs.append(run)
                saved.write_text(json.dumps(runs, indent=1))
                cells = ", ".join(f"{r['backend']} {r['mode']} {r['gbps']:.3f}"
                                  for r in run["rows"])
                print(f"round {round_ + 1} {network} x{cpus} at {run['started']} UTC, load "
                      f"{run['load_before']} -> {run['load_after']}: {cells}", flush=True)
    lines, holds = table(runs)
    print("\n".join(lines))
    print(f"# target (toolkit / MXNet >= {TARGET} in every cell's median, MXNet never above the "
          f"ceiling): {'holds' if holds else 'does not hold'}")
    return 0 if holds else 1


if __name__ == "__main__":
    sys.exit(main())
