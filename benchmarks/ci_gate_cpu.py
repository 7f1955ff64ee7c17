"""The statistical gate's two targets on CPU devices, N tries each (issue 20): an unchanged rerun
passes (no false alarm), and a run slowed for real on the same cores is caught within --repeat
auto's budget (with its confirmation pass). Prints one line per try and a table; asserts nothing.

    flock /tmp/bandwidth-bench.lock python3 benchmarks/ci_gate_cpu.py --tries 20
    python3 benchmarks/ci_gate_cpu.py --slow cores:1 --tries 0 --slowed-tries 12 --base b.json

Each try is a fresh measure.py process (2 CPU devices, the local mode, --workload) gating
against a baseline saved by the same command at the start (--paired: right before the try; --base
FILE: kept in FILE and reused by later invocations), with a tolerance of 10 % unless --tolerance
says otherwise. Every measure.py process runs on --cores (default: all). How the slowed tries are
slowed (--slow):
  burn:K    K busy loops on the same cores (the load of the 2-core VM varies what they take);
  duty:D    one process per core of --cores, pinned to it, busy D % of every 10 ms: the
            measurement loses about D % of its CPU time (a competing process on the same cores);
  cores:N   the slowed try runs on the first N cores of --cores only (fewer cores);
  threads:N the slowed try runs with --cpu-threads N (fewer CPU threads than the baseline's);
  A+B       both (cores:1+burn:1: one core, shared with a busy loop).
Competing processes run on the cores of the slowed measurement. --workload mlp (a 9 ms step) is
the one to gate with: in the tiny mlp's 25 us step a competing process shows in the slow tail,
not in the median the gate judges (BENCHMARKS.md, 2026-11-24).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODE = ["--kv-store", "local", "--cpus", "2", "--no-reference"]
WORKLOADS = {
    # 0.44 MB: a step of ~25 us on the 2-core VM, dispatch-bound; the figure of the earlier runs
    "tiny": ["--network", "mlp", "--image-shape", "1,28,28", "--num-classes", "10",
             "--num-batches", "20"],
    # 77 MB: a step of ~9 ms, bound by host memory; longer than a scheduler's time slice, so a
    # competing process on the same cores slows every step, not a few
    "mlp": ["--network", "mlp", "--num-batches", "10"],
}
DUTY = """import os, sys, time
os.sched_setaffinity(0, {int(sys.argv[1])})
busy, period = float(sys.argv[2]) / 100 * 0.01, 0.01
while True:
    start = time.perf_counter()
    while time.perf_counter() - start < busy:
        pass
    time.sleep(max(0.0, period - (time.perf_counter() - start)))
"""


WORKLOAD = WORKLOADS["tiny"]


def measure(cores: set[int], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "bandwidth" / "measure.py"), *MODE,
                           *WORKLOAD, *args],
                          capture_output=True, text=True, timeout=600,
                          preexec_fn=lambda: os.sched_setaffinity(0, cores))


def competitors(slow: str, cores: list[int]) -> list[subprocess.Popen]:
    """The competing processes of ``slow`` (each part of a ``+``), on the measurement's cores."""
    procs = []
    for part in slow.split("+"):
        kind, _, value = part.partition(":")
        if kind == "burn":
            procs += [subprocess.Popen([sys.executable, "-c", "while True: pass"],
                                       preexec_fn=lambda: os.sched_setaffinity(0, set(cores)))
                      for _ in range(int(value))]
        elif kind == "duty":
            procs += [subprocess.Popen([sys.executable, "-c", DUTY, str(c), value])
                      for c in cores]
    return procs


def gate(base: Path, auto: list[str], tolerance: str, cores: list[int], slow: str | None
         ) -> tuple[int, str, str, float]:
    mine, threads = list(cores), []
    for part in (slow or "").split("+"):
        if part.startswith("cores:"):
            mine = cores[:int(part.split(":")[1])]
        if part.startswith("threads:"):
            threads = ["--cpu-threads", part.split(":")[1]]
    procs = competitors(slow, mine) if slow else []
    try:
        time.sleep(0.2 if procs else 0)               # the competitors are running
        start = time.perf_counter()
        proc = measure(set(mine), *auto, *threads, "--baseline", str(base), "--tolerance",
                       tolerance)
        seconds = time.perf_counter() - start
    finally:
        for p in procs:
            p.kill()
            p.wait()
    lines = proc.stdout.splitlines()
    row = next((line for line in lines if line.startswith("local mlp")), "")
    note = next((line for line in lines if line.startswith("# note: local mlp")
                 and "pass" in line), "")
    if not row:                                       # no verdict: say why (stderr's last line)
        row = "no verdict: " + (proc.stderr.strip().splitlines() or ["(no output)"])[-1][:300]
    return proc.returncode, re.sub(r"\s+", " ", row), note.removeprefix("# note: "), seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tries", type=int, default=20)
    parser.add_argument("--slowed-tries", type=int, default=None,
                        help="tries of the slowed run (default: --tries; 0: none)")
    parser.add_argument("--tolerance", default="10%")
    parser.add_argument("--budget", default="10", help="--time-budget of each run, seconds")
    parser.add_argument("--paired", action="store_true",
                        help="save a fresh baseline right before every try (the machine's other "
                             "load changes over minutes; a pair measures both under the same)")
    parser.add_argument("--base", default=None,
                        help="the baseline file: saved there if missing, else reused")
    parser.add_argument("--cores", default=None,
                        help="cores of every measure.py process, e.g. 0,1 (default: all)")
    parser.add_argument("--confirm", default=None,
                        help="measure.py's --confirm N of the gated tries (default: its own)")
    parser.add_argument("--workload", default="tiny", choices=sorted(WORKLOADS),
                        help="tiny: the 0.44 MB mlp (a ~25 us step); mlp: the 77 MB one (~9 ms)")
    parser.add_argument("--baseline-processes", default=None,
                        help="measure.py's --baseline-processes K of the baseline (default: its "
                             "own)")
    parser.add_argument("--slow", default="burn:6",
                        help="how slowed tries are slowed: burn:K, duty:D or cores:N")
    args = parser.parse_args()
    global WORKLOAD
    WORKLOAD = WORKLOADS[args.workload]
    processes = [] if args.baseline_processes is None else \
        ["--baseline-processes", args.baseline_processes]
    cores = sorted(int(c) for c in args.cores.split(",")) if args.cores else \
        sorted(os.sched_getaffinity(0))
    auto = ["--repeat", "auto", "--time-budget", args.budget]
    confirm = [] if args.confirm is None else ["--confirm", args.confirm]
    print(f"# {time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime())} UTC; loadavg "
          f"{open('/proc/loadavg').read().split()[:3]}; cores {cores}; slowed by {args.slow}; "
          f"tolerance {args.tolerance}; --time-budget {args.budget}; workload {args.workload} "
          f"{' '.join(WORKLOAD)}"
          + (f"; --confirm {args.confirm}" if confirm else ""), flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(args.base) if args.base else Path(tmp) / "base.json"
        if not base.exists() or args.paired:
            saved = measure(set(cores), *auto, *processes, "--save-baseline", str(base))
            if saved.returncode != 0:
                print(saved.stderr, file=sys.stderr)
                return 1
        results = json.loads(base.read_text())["results"]
        print(f"# baseline: {len(results)} process(es): " + ", ".join(
            f"{r['summary']['busbw_median']:.3f} GB/s per GPU over {r['summary']['iterations']} "
            f"iterations with {r.get('cpu_threads', '?')} CPU threads" for r in results),
            flush=True)
        counts, confirmed_away, tries = {}, {}, {
            "unchanged": args.tries,
            "slowed": args.tries if args.slowed_tries is None else args.slowed_tries}
        for kind, slow, good in (("unchanged", None, 0), ("slowed", args.slow, 1)):
            hits = saved_by_confirmation = 0
            for i in range(tries[kind]):
                if args.paired and measure(set(cores), *auto, *processes,
                                           "--save-baseline", str(base)).returncode:
                    print(f"{kind} try {i + 1}: the baseline failed", flush=True)
                    continue
                code, row, note, seconds = gate(base, auto + confirm, args.tolerance, cores,
                                                slow)
                hits += code == good
                saved_by_confirmation += "not confirmed" in row
                print(f"{kind} try {i + 1}: exit {code} in {seconds:.1f} s: {row}"
                      + (f" [{note}]" if note else ""), flush=True)
            counts[kind], confirmed_away[kind] = hits, saved_by_confirmation
    print(f"# loadavg at the end {open('/proc/loadavg').read().split()[:3]}")
    print("| run | tries | expected exit | got it | ratio | first pass failed, not confirmed |\n"
          "| --- | ---: | ---: | ---: | ---: | ---: |")
    for kind, good in (("unchanged", 0), ("slowed", 1)):
        if tries[kind]:
            print(f"| {kind} | {tries[kind]} | {good} | {counts[kind]} | "
                  f"{counts[kind] / tries[kind]:.2f} | {confirmed_away[kind]} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
