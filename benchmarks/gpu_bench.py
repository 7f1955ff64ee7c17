"""The GPU benchmark for any GPU count: the toolkit's modes against the real reference tools and
the rates that bound them, every configuration measured 5 times in one call.

    PEERS_BIN=/tmp/peers bash peers/build.sh && source /tmp/peers/env.sh   # nccl-tests, p2p test
    python benchmarks/gpu_bench.py [--rounds 5] [--peers /tmp/peers] [--networks all|a,b,...]
        [--json F] [--log-tools F]

What it prints depends on the GPUs it finds:

- always: the rates each bound is made of, measured in this run, once per round: the GPU's own
  copy (read + write, p2pBandwidthLatencyTest's diagonal count) and add rates and the two at
  once, pinned host->device, device->host and both at once (duplex); p2pBandwidthLatencyTest's
  matrices (on one GPU its diagonal: a copy inside the GPU) beside the toolkit's copy rate;
- one GPU: per network, ``device --gpus 0,0`` with the graph and the eager launch against the bound
  of docs/formulas.md (2M / (7n), M the fastest of the copy, add and both-at-once rates of the
  call), the host time per step of each, and ``local`` on the GPU (algbw) against the duplex host
  path;
- several GPUs: ``device`` and ``nccl`` (graph and eager) over every GPU and ``local``, against
  nccl-tests' all_reduce_perf busbw at each network's byte count and dtype.

The networks: every network of ``--list-networks`` at its default shape with 16 MB or more in
float32, plus llama-1b in bfloat16. A configuration that does not fit the GPU's memory is listed as
skipped with the reason. Each configuration runs ``--rounds`` times (rounds alternate over all
configurations, so that a drift of the machine spreads over all of them; one round of every
configuration runs first and is discarded, ``--warmup-rounds``); a run's figure is the
median of its iterations (``local`` runs about ``--local-run-s`` seconds of them, counted from its
step in the warm-up round, since a step over PCIe takes 100 x longer than one inside the GPU,
and on one GPU between two short probes of the duplex host path: a run taken while the path
itself read more than 4 % below its fastest is measured once more after the rounds, and replaced
only by a run whose own probes were clean; the table counts both), the table shows the median
of the run medians and the spread of the run medians (max / min). It asserts nothing;
BENCHMARKS.md records its results.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import torch

import networks
from bandwidth.arrays.dtypes import DTYPE_BYTES
from bandwidth.backends.registry import store_class
from bandwidth.ceiling.bounds import PROBE_BYTES, one_gpu_rates
from bandwidth.ceiling.host import duplex_host_gbps, host_link_gbps
from bandwidth.config.options import Config
from bandwidth.errors import BandwidthError
from bandwidth.plan.plan import check_memory, make_plan
from bandwidth.run import run
# The tables (this script runs from benchmarks/, so its folder is on sys.path).
from gpu_bench_report import (PATH_DISTURBED, disturbed, mode_rows, print_modes,
                              print_rates, targets)

MIN_NETWORK_BYTES = 16 * 10**6
# local on one GPU: every run is bracketed by two short duplex probes (bursts of 5, fastest of 3);
# a run they show taken while the host path itself was slowed (gpu_bench_report.disturbed) is
# measured once more after the rounds.
PATH_PROBE = dict(repeats=3, burst=5)
EXTRA = [("llama-1b", "bfloat16")]          # the transformer in bf16


def network_list(wanted: str) -> list[tuple[str, str, int]]:
    """(network, dtype, bytes) of every network at its default shape with 16 MB or more in
    float32 (or the named ones), plus the bf16 transformer."""
    names = sorted(networks.NETWORKS) if wanted == "all" else wanted.split(",")
    out = []
    for name in names:
        try:
            shapes = networks.get_shapes(name)
        except ValueError:
            continue            # needs another image shape (inception-v3/v4 at 299)
        nbytes = networks.num_elements(shapes) * 4
        if wanted != "all" or nbytes >= MIN_NETWORK_BYTES:
            out.append((name, "float32", nbytes))
    for name, dtype in EXTRA:
        if wanted == "all" or name in names:
            out.append((name, dtype, networks.num_elements(networks.get_shapes(name))
                        * DTYPE_BYTES[dtype]))
    return out


def iterations_for(nbytes: int) -> int:
    """Measured iterations: 50 for networks up to 200 MB (a step of 50-500 us on one GPU, so that
    the run's median is steady), 10 from 1 GB, fewer for networks of gigabytes (local moves them
    at PCIe speed)."""
    return max(3, min(50, int(10e9 // max(nbytes, 1))))


def local_iterations(step_seconds: float, seconds: float) -> int:
    """local: iterations for about ``seconds`` of steps of ``step_seconds`` (measured in the
    warm-up round), 10 to 3,000. At 50 iterations (the other modes' count) a run of a 200 MB-1.2 GB
    network over one H200's PCIe took 0.2 s, and a dip of the host path shorter than that moved
    single runs by 5-7 % on a machine whose path was otherwise steady within 0.3 %
    (BENCHMARKS.md, 2026-11-24)."""
    return max(10, min(3000, int(seconds / max(step_seconds, 1e-9))))


def warmup_for(nbytes: int) -> int:
    """Untimed iterations first: 20 for the small networks, down to 2 from 1 GB. A small network's
    graph step on one H100 still ran 4-6 % slower in its first 10 iterations after a second of
    idling than from its 30th on (benchmarks/probes/graph_gap.py at 7d3c61a, part D)."""
    return max(2, min(20, int(2e9 // max(nbytes, 1))))


# -- the reference tools ---------------------------------------------------------------------------

def p2p_matrices(peers: Path | None, log: list[str]) -> dict[str, list[list[float]]]:
    """p2pBandwidthLatencyTest's matrices by title (empty where the tool is not built)."""
    tool = peers / "p2pBandwidthLatencyTest" if peers else None
    if tool is None or not tool.exists():
        return {}
    text = subprocess.run([str(tool)], capture_output=True, text=True, timeout=120).stdout
    log.append(text)
    matrices, title = {}, None
    for line in text.splitlines():
        if "Matrix" in line:
            title, matrices[line.strip()] = line.strip(), []
        elif title and re.match(r"^\s+\d+\s+[\d.]", line):
            matrices[title].append([float(x) for x in line.split()[1:]])
        elif title and not line.strip():
            title = None
    return matrices


def nccl_tests_busbw(peers: Path | None, gpus: int, nbytes: int, dtype: str,
                     log: list[str]) -> float | None:
    """all_reduce_perf's out-of-place busbw for one buffer of ``nbytes`` over ``gpus`` GPUs."""
    tool = peers / "all_reduce_perf" if peers else None
    if gpus < 2 or tool is None or not tool.exists():
        return None
    kind = {"float32": "float", "float16": "half", "bfloat16": "bfloat16"}[dtype]
    argv = [str(tool), "-b", str(nbytes), "-e", str(nbytes), "-g", str(gpus), "-d", kind,
            "-w", "5", "-n", "20"]
    text = subprocess.run(argv, capture_output=True, text=True, timeout=300).stdout
    log.append(" ".join(argv) + "\n" + text)
    for line in text.splitlines():
        cols = line.split()
        if len(cols) >= 8 and cols[0].isdigit() and cols[2] == kind:
            return float(cols[7])
    return None


# -- rates measured in this run
# ---------------------------------------------------------------------

def rates(gpu: int) -> dict[str, float]:
    return {**one_gpu_rates(gpu, PROBE_BYTES),
            "h2d": host_link_gbps(gpu, PROBE_BYTES, pinned=True, to_device=True),
            "d2h": host_link_gbps(gpu, PROBE_BYTES, pinned=True, to_device=False),
            "duplex": duplex_host_gbps(gpu, PROBE_BYTES)}


# -- the configurations
# ------------------------------------------------------------------------------

def configurations(gpus: int) -> list[tuple[str, dict]]:
    """(label, Config fields) of each mode measured per network."""
    if gpus == 1:
        return [("device 0,0 auto", dict(kv_store="device", gpus=(0, 0), launch="auto")),
                ("device 0,0 graph", dict(kv_store="device", gpus=(0, 0), launch="graph")),
                ("device 0,0 eager", dict(kv_store="device", gpus=(0, 0), launch="eager")),
                ("local 0", dict(kv_store="local", gpus=(0,)))]
    every = tuple(range(gpus))
    return [("device auto", dict(kv_store="device", gpus=every, launch="auto")),
            ("device graph", dict(kv_store="device", gpus=every, launch="graph")),
            ("device eager", dict(kv_store="device", gpus=every, launch="eager")),
            ("nccl auto", dict(kv_store="nccl", gpus=every, launch="auto")),
            ("nccl graph", dict(kv_store="nccl", gpus=every, launch="graph")),
            ("nccl eager", dict(kv_store="nccl", gpus=every, launch="eager")),
            ("local", dict(kv_store="local", gpus=every))]


def measure_once(config: Config) -> dict:
    result = run(config)
    s = result.summary
    return {"launch": result.launch, "busbw": s.busbw_median, "algbw": s.algbw_median,
            "seconds": s.seconds_median, "graph_steps": result.graph_steps,
            "host_seconds": s.host_seconds_median, "error": s.error_max}


def measure_bracketed(config: Config) -> dict:
    """measure_once, with a short duplex probe of GPU 0's host path just before and just after
    (``path``: the two rates)."""
    before = duplex_host_gbps(0, PROBE_BYTES, **PATH_PROBE)
    got = measure_once(config)
    got["path"] = (before, duplex_host_gbps(0, PROBE_BYTES, **PATH_PROBE))
    return got


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="gpu_bench.py", description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--warmup-rounds", type=int, default=1,
                        help="rounds of every configuration run first and discarded (default 1)")
    parser.add_argument("--peers", default="/tmp/peers", help="where build.sh put the tools")
    parser.add_argument("--networks", default="all")
    parser.add_argument("--budget-s", type=float, default=420.0,
                        help="start no round that would end after this many seconds (default "
                             "420: with the GPU tests, 90 s, and the rest of gpu_all.sh the call "
                             "stays under 10 minutes; one H100 needs about 380 for 5 rounds)")
    parser.add_argument("--local-max-mb", type=float, default=2000.0,
                        help="measure local only on networks up to this size (default 2000: "
                             "larger ones take seconds per step over PCIe)")
    parser.add_argument("--local-run-s", type=float, default=1.0,
                        help="about how long each run of local on the GPU lasts (default 1.0)")
    parser.add_argument("--max-mb", type=float, default=None,
                        help="leave out networks above this many MB (default: none); on "
                             "several GPUs the warm-up round of every network up to llama-8b "
                             "took 396 s on 2 x H200, so one device call may need it")
    parser.add_argument("--json", default=None)
    parser.add_argument("--log-tools", default=None, help="write the tools' raw output here")
    return parser.parse_args(argv)


def fitting(args: argparse.Namespace, nets: list[tuple[str, str, int]],
            modes: list[tuple[str, dict]]) -> tuple[dict, list[str]]:
    """The Config of every (network, dtype, mode label) that is planned and fits the GPU's
    memory, and why each of the others is skipped."""
    plans, skipped = {}, []
    for name, dtype, nbytes in nets:
        if args.max_mb is not None and nbytes > args.max_mb * 1e6:
            skipped.append(f"{name} {dtype}: above --max-mb {args.max_mb:g}")
            continue
        for label, fields in modes:
            if fields["kv_store"] == "local" and nbytes > args.local_max_mb * 1e6:
                skipped.append(f"{name} {dtype} {label}: above --local-max-mb "
                               f"{args.local_max_mb:g}")
                continue
            config = Config(network=name, dtype=dtype, num_batches=iterations_for(nbytes),
                            warmup=warmup_for(nbytes), reference=False, **fields)
            try:
                plan = make_plan(config, store_class)
                check_memory(plan)
                plans[(name, dtype, label)] = config
            except BandwidthError as exc:
                skipped.append(f"{name} {dtype} {label}: {exc}")
    return plans, skipped


def warmup_rounds(args: argparse.Namespace, plans: dict, gpus: int,
                  started: float) -> list[dict[int, dict]]:
    """--warmup-rounds rounds of every configuration, their figures discarded; local's
    iterations in ``plans`` set from its step here (``local_iterations``). Returns each round's
    rates."""
    warm_rates: list[dict[int, dict]] = []
    for w in range(args.warmup_rounds):
        # Every configuration once, its figures discarded: the first runs of a call on the one-GPU
        # machine read up to 17 % below the later ones (BENCHMARKS.md, 2026-11-23). The rates of
        # the round are kept for the bounds, which take the fastest of every probe of the call
        # (the copy probe read 2,975 GB/s in a call's first round and 2,520-2,560 after it).
        warm_rates.append({g: rates(g) for g in range(gpus)})
        took = []
        for key, config in plans.items():
            begun = time.perf_counter()
            try:
                got = measure_once(config)
                if config.kv_store == "local":
                    plans[key] = dataclasses.replace(config, num_batches=local_iterations(
                        got["seconds"], args.local_run_s))
            except BandwidthError:
                pass
            gc.collect()
            torch.cuda.empty_cache()
            took.append((time.perf_counter() - begun, " ".join(key)))
        slowest = ", ".join(f"{label} {seconds:.0f} s" for seconds, label in sorted(took)[::-1][:5])
        print(f"# warm-up round {w + 1} (discarded) done at "
              f"{time.perf_counter() - started:.0f} s; slowest configurations: {slowest}",
              flush=True)
    return warm_rates


def timed_rounds(args: argparse.Namespace, plans: dict, gpus: int, started: float,
                 skipped: list[str]) -> tuple[dict[tuple, list[dict]], list[dict[int, dict]]]:
    """--rounds rounds of every configuration, each round's rates first; none that would end
    past --budget-s. Returns the runs of each configuration and each round's rates; a failed
    run is added to ``skipped``."""
    runs: dict[tuple, list[dict]] = {key: [] for key in plans}
    round_rates: list[dict[int, dict]] = []
    rounds_from = time.perf_counter()
    for r in range(args.rounds):
        elapsed = time.perf_counter() - started
        per_round = (time.perf_counter() - rounds_from) / max(r, 1)
        if r and elapsed + per_round * 1.1 > args.budget_s:
            print(f"# stopped after {r} rounds: another would end past --budget-s "
                  f"{args.budget_s:g}", flush=True)
            break
        round_rates.append({g: rates(g) for g in range(gpus)})
        for key, config in plans.items():
            measure = (measure_bracketed if gpus == 1 and config.kv_store == "local"
                       else measure_once)
            try:
                runs[key].append(measure(config))
            except BandwidthError as exc:
                skipped.append(f"{' '.join(key)} round {r + 1}: {exc}")
            gc.collect()
            torch.cuda.empty_cache()
        print(f"# round {r + 1}/{args.rounds} done at {time.perf_counter() - started:.0f} s",
              flush=True)
    return runs, round_rates


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not torch.cuda.is_available():
        print("gpu_bench.py: no CUDA GPU here", file=sys.stderr)
        return 2
    started = time.perf_counter()
    gpus = torch.cuda.device_count()
    peers = Path(args.peers) if args.peers and Path(args.peers).is_dir() else None
    tool_log: list[str] = []
    print(f"# gpu_bench: {gpus} x {torch.cuda.get_device_name(0)}, torch {torch.__version__}, "
          f"{args.rounds} rounds; reference tools: {peers or 'not built'}")
    nets = network_list(args.networks)
    modes = configurations(gpus)
    plans, skipped = fitting(args, nets, modes)
    # The reference tools first (they need the GPUs to themselves).
    matrices = p2p_matrices(peers, tool_log)
    nccl_ref = {}
    for name, dtype, nbytes in nets:
        busbw = nccl_tests_busbw(peers, gpus, nbytes, dtype, tool_log)
        if busbw is not None:
            nccl_ref[(name, dtype)] = busbw
    warm_rates = warmup_rounds(args, plans, gpus, started)
    runs, round_rates = timed_rounds(args, plans, gpus, started, skipped)
    every_rates = round_rates + warm_rates
    fastest_path = max([rr[0]["duplex"] for rr in every_rates]
                       + [p for got in runs.values() for x in got for p in x.get("path", ())],
                       default=0.0)
    repeated = makeup(plans, runs, fastest_path, started, args.budget_s)
    print_rates(gpus, every_rates, matrices)
    table = mode_rows(nets, modes, runs, repeated, gpus, every_rates, fastest_path, nccl_ref)
    print_modes(table)
    if gpus == 1:
        targets(table)
    for line in skipped:
        print(f"# skipped: {line}")
    print(f"# gpu_bench: {time.perf_counter() - started:.0f} s")
    if args.json:
        Path(args.json).write_text(json.dumps({"gpus": gpus, "name": torch.cuda.get_device_name(0),
                                               "rates": round_rates,
                                               "warmup_rates": warm_rates, "p2p": matrices,
                                               "nccl_tests": {f"{k[0]} {k[1]}": v for k, v
                                                              in nccl_ref.items()},
                                               "table": table, "skipped": skipped}, indent=1))
    if args.log_tools:
        Path(args.log_tools).write_text("\n".join(tool_log))
    return 0


def makeup(plans: dict, runs: dict, fastest: float, started: float, budget_s: float) -> dict:
    """Measure every disturbed run (``disturbed``) once more, within ``budget_s`` of the call
    plus a tenth; the new run replaces it only if its own probes were clean. Returns the count
    replaced per configuration."""
    replaced: dict[tuple, int] = {}
    todo = [(key, i) for key, got in runs.items() for i, x in enumerate(got)
            if disturbed(x, fastest)]
    for key, i in todo:
        if time.perf_counter() - started > 1.1 * budget_s:
            print(f"# makeup runs stopped at --budget-s: {len(todo)} disturbed runs, "
                  f"{sum(replaced.values())} replaced", flush=True)
            break
        try:
            again = measure_bracketed(plans[key])
        except BandwidthError:
            continue
        first = runs[key][i]
        clean = not disturbed(again, fastest)
        print(f"# {' '.join(key)} round {i + 1}: {first['algbw']:.2f} GB/s between probes of "
              f"{first['path'][0]:.1f} and {first['path'][1]:.1f}; again {again['algbw']:.2f} "
              f"between {again['path'][0]:.1f} and {again['path'][1]:.1f}: "
              f"{'replaced' if clean else 'kept (the path was slow again)'}", flush=True)
        if clean:
            again["replaced"] = first       # kept in the JSON beside the run that replaced it
            runs[key][i] = again
            replaced[key] = replaced.get(key, 0) + 1
        gc.collect()
        torch.cuda.empty_cache()
    if todo:
        print(f"# {len(todo)} runs of local taken while the host path read more than "
              f"{100 * PATH_DISTURBED:g} % below its fastest ({fastest:.1f} GB/s) were measured "
              f"again: {sum(replaced.values())} replaced by a clean run", flush=True)
    return replaced


if __name__ == "__main__":
    sys.exit(main())
