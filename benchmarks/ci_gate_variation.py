"""Where the CI gate's CPU-device figure varies (issue 20): within one process, from one process
to the next, and with the machine's load over time. Prints one line per process and a table of
the variance components; asserts nothing.

    flock /tmp/bandwidth-bench.lock python3 benchmarks/ci_gate_variation.py --processes 12

Each process (a fresh python, on --cores) measures the gate's workload (--workload, as in
ci_gate_cpu.py: local, 2 CPU devices, the tiny mlp or the 77 MB one) --repeats times in a row, each repeat a
fresh session (new buffers, and a new thread choice where threads are auto), as one --repeat auto
pass does. The processes cycle through the thread settings of --threads (auto, 1, 2: --cpu-threads),
so that drift of the machine's load falls on every setting alike. Per setting the table gives:

  within    the spread of repeat medians inside a process (pooled standard deviation, % of the
            mean): what one process's samples see;
  between   the standard deviation of the processes' medians (every repeat's iterations pooled),
            % of the mean, and the part of it not explained by within / sqrt(repeats): what a
            baseline from one process cannot see;
  choice    how often auto chose each thread count, and the median figure under each choice;
  drift     the rank correlation of the process medians with their start time.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

# The gate benchmark's mode and workloads (this script runs from benchmarks/, so its folder is on
# sys.path): what is measured here is what ci_gate_cpu.py gates.
from ci_gate_cpu import MODE, ROOT, WORKLOADS  # noqa: E402


def worker(repeats: int, threads: str, workload: str, extra: list[str]) -> None:
    """In the child: ``repeats`` measurements of the workload, one JSON line each."""
    sys.path.insert(0, str(ROOT))
    from bandwidth.backends.registry import store_class
    from bandwidth.execution.commandline import build_parser, job_from_args
    from bandwidth.formulas import busbw_gbps
    from bandwidth.plan.plan import make_plan
    from bandwidth.run import run

    argv = MODE + WORKLOADS[workload] + extra + ([] if threads == "auto" else ["--cpu-threads", threads])
    job = job_from_args(build_parser().parse_args(argv))
    plan = make_plan(job.configs[0], store_class)
    for _ in range(repeats):
        result = run(plan.config, plan=plan)
        note = next((n for n in result.notes if "CPU threads" in n), "")
        chosen = str(result.cpu_threads) if threads == "auto" else threads
        s = result.summary
        samples = [busbw_gbps(s.nbytes, x.seconds, s.bus_factor) for x in result.samples]
        print(json.dumps({"median": result.summary.busbw_median, "threads": chosen,
                          "samples": samples, "note": note}), flush=True)


def spawn(cores: set[int], repeats: int, threads: str, workload: str, extra: list[str]
          ) -> list[dict]:
    proc = subprocess.run([sys.executable, __file__, "--worker", str(repeats), threads, workload,
                           *extra],
                          capture_output=True, text=True, timeout=600,
                          preexec_fn=lambda: os.sched_setaffinity(0, cores))
    if proc.returncode:
        raise SystemExit(proc.stderr[-2000:])
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


def spearman(x: list[float], y: list[float]) -> float:
    def ranks(v):
        order = sorted(range(len(v)), key=v.__getitem__)
        r = [0.0] * len(v)
        for rank, i in enumerate(order):
            r[i] = rank
        return r
    if len(x) < 3:
        return float("nan")
    rx, ry = ranks(x), ranks(y)
    mx, my = statistics.fmean(rx), statistics.fmean(ry)
    num = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    den = (sum((a - mx) ** 2 for a in rx) * sum((b - my) ** 2 for b in ry)) ** 0.5
    return num / den if den else float("nan")


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5:])
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--processes", type=int, default=12, help="processes per setting")
    parser.add_argument("--repeats", type=int, default=8, help="measurements per process")
    parser.add_argument("--threads", default="auto,1,2", help="settings cycled through")
    parser.add_argument("--cores", default=None, help="cores of every process (default: all)")
    parser.add_argument("--workload", default="tiny", choices=sorted(WORKLOADS))
    parser.add_argument("--extra", default="", help="more measure.py flags, one string")
    args = parser.parse_args()
    if args.processes < 2 or args.repeats < 2:
        # The table's spreads are variances: of the process medians, and of each one's repeats.
        print("ci_gate_variation.py: --processes and --repeats must be at least 2 (the spreads "
              "between processes and within one need two of each)", file=sys.stderr)
        return 2
    cores = {int(c) for c in args.cores.split(",")} if args.cores else os.sched_getaffinity(0)
    settings = args.threads.split(",")
    extra = args.extra.split()
    print(f"# {time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime())} UTC; loadavg "
          f"{open('/proc/loadavg').read().split()[:3]}; cores {sorted(cores)}; {args.processes} "
          f"processes per setting x {args.repeats} repeats; settings {settings}; workload "
          f"{args.workload} {WORKLOADS[args.workload]}; extra {extra}",
          flush=True)
    start = time.perf_counter()
    got: dict[str, list[tuple[float, list[dict]]]] = {s: [] for s in settings}
    for k in range(args.processes):
        for s in settings:
            t = time.perf_counter() - start
            reps = spawn(cores, args.repeats, s, args.workload, extra)
            got[s].append((t, reps))
            pooled = statistics.median(x for r in reps for x in r["samples"])
            print(f"process {k + 1} threads {s} at {t:.0f} s: pooled median {pooled:.3f}; "
                  "repeats " + " ".join(f"{r['median']:.2f}/{r['threads']}" for r in reps)
                  + f"; load {open('/proc/loadavg').read().split()[0]}", flush=True)
    print(f"# loadavg at the end {open('/proc/loadavg').read().split()[:3]}")
    print("| threads | processes | mean GB/s | within % (repeat medians) | between % "
          "(process medians) | between beyond within % | min-max of process medians | "
          "auto chose (count: median) | drift (rank corr. with time) |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | --- | --- | ---: |")
    for s in settings:
        procs = got[s]
        medians = [statistics.median(x for r in reps for x in r["samples"]) for _, reps in procs]
        mean = statistics.fmean(medians)
        within_var = statistics.fmean(statistics.variance([r["median"] for r in reps])
                                      for _, reps in procs)
        between = statistics.stdev(medians)
        beyond = max(0.0, between ** 2 - within_var / args.repeats) ** 0.5
        choices: dict[str, list[float]] = {}
        for _, reps in procs:
            for r in reps:
                choices.setdefault(r["threads"], []).append(r["median"])
        chose = ", ".join(f"{t} ({len(v)}: {statistics.median(v):.2f})"
                          for t, v in sorted(choices.items()))
        drift = spearman([t for t, _ in procs], medians)
        print(f"| {s} | {len(procs)} | {mean:.3f} | {100 * within_var ** 0.5 / mean:.1f} | "
              f"{100 * between / mean:.1f} | {100 * beyond / mean:.1f} | "
              f"{min(medians):.2f}-{max(medians):.2f} | {chose} | {drift:+.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
