"""The statistical gate's two targets on CPU devices, N tries each (issue 20): an unchanged rerun
passes (no false alarm), and a run slowed for real by competing processes on the same cores is
caught within --repeat auto's budget. Prints one line per try and a ratio table; asserts nothing.

    flock /tmp/bandwidth-bench.lock python3 benchmarks/ci_gate_cpu.py --tries 20

Each try is a fresh measure.py process (2 CPU devices, the local mode, the tiny mlp) gating
against a baseline saved by the same command at the start (with --paired: right before the
try), with the default tolerance of 10 % unless --tolerance says otherwise.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TINY = ["--kv-store", "local", "--cpus", "2", "--network", "mlp", "--image-shape", "1,28,28",
        "--num-classes", "10", "--num-batches", "20", "--no-reference"]


def measure(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "bandwidth" / "measure.py"), *TINY, *args],
                          capture_output=True, text=True, timeout=600)


def gate(base: Path, auto: list[str], tolerance: str, burners: int) -> tuple[int, str, float]:
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
             for _ in range(burners)]
    try:
        start = time.perf_counter()
        proc = measure(*auto, "--baseline", str(base), "--tolerance", tolerance)
        seconds = time.perf_counter() - start
    finally:
        for p in procs:
            p.kill()
            p.wait()
    row = next((line for line in proc.stdout.splitlines() if line.startswith("local mlp")), "")
    return proc.returncode, re.sub(r"\s+", " ", row), seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tries", type=int, default=20)
    parser.add_argument("--slowed-tries", type=int, default=None,
                        help="tries of the slowed run (default: --tries)")
    parser.add_argument("--tolerance", default="10%")
    parser.add_argument("--budget", default="10", help="--time-budget of each run, seconds")
    parser.add_argument("--paired", action="store_true",
                        help="save a fresh baseline right before every try (the machine's other "
                             "load changes over minutes; a pair measures both under the same)")
    parser.add_argument("--burners", type=int, default=6,
                        help="competing busy-loop processes in the slowed runs")
    args = parser.parse_args()
    auto = ["--repeat", "auto", "--time-budget", args.budget]
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp) / "base.json"
        saved = measure(*auto, "--save-baseline", str(base))
        if saved.returncode != 0:
            print(saved.stderr, file=sys.stderr)
            return 1
        summary = json.loads(base.read_text())["results"][0]["summary"]
        print(f"# baseline: {summary['busbw_median']:.3f} GB/s per GPU over "
              f"{summary['iterations']} iterations")
        counts, tries = {}, {"unchanged": args.tries,
                             "slowed": args.slowed_tries or args.tries}
        for kind, burners, good in (("unchanged", 0, 0), ("slowed", args.burners, 1)):
            hits = 0
            for i in range(tries[kind]):
                if args.paired and measure(*auto, "--save-baseline", str(base)).returncode:
                    print(f"{kind} try {i + 1}: the baseline failed", flush=True)
                    continue
                code, row, seconds = gate(base, auto, args.tolerance, burners)
                hits += code == good
                print(f"{kind} try {i + 1}: exit {code} in {seconds:.1f} s: {row}", flush=True)
            counts[kind] = hits
    print("| run | tries | expected exit | got it | ratio |\n| --- | ---: | ---: | ---: | ---: |")
    for kind, good in (("unchanged", 0), ("slowed", 1)):
        print(f"| {kind} | {tries[kind]} | {good} | {counts[kind]} | "
              f"{counts[kind] / tries[kind]:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
