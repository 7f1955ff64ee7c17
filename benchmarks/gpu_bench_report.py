"""The tables of benchmarks/gpu_bench.py, from what its rounds measured: the rates each bound is
made of (``print_rates``), one row per network and mode against its bound (``mode_rows``,
``print_modes``) and, on one GPU, issue 17's targets row by row (``targets``). A run of ``local``
on one GPU taken while the host path itself was slowed is ``disturbed``: gpu_bench.py measures it
again after the rounds, and the rows count both.
"""

from __future__ import annotations

import statistics

from bandwidth.formulas import one_gpu_device_bound_gbps

# local on one GPU: a run whose two duplex probes both read more than PATH_DISTURBED below the
# fastest duplex rate of the call was taken while the host path itself was slowed (on the lent
# machines by minute-long phases, BENCHMARKS.md 2026-11-24); after the rounds it is measured once
# more, and the new run replaces it only if its own probes were clean. The table counts both.
PATH_DISTURBED = 0.04


def disturbed(run: dict, fastest: float) -> bool:
    """Was ``run`` taken while the host path read more than PATH_DISTURBED below ``fastest``
    (both its probes)? Runs without probes never are."""
    return "path" in run and max(run["path"]) < (1 - PATH_DISTURBED) * fastest


def spread(values: list[float]) -> str:
    return f"{max(values) / min(values):.3f}" if values and min(values) > 0 else "n/a"


def path_spread(got: list[dict]) -> float | None:
    """local on one GPU: the spread (max/min) of each run's figure over the mean of the two
    duplex probes around it, which separates the mode's steadiness from the host path's own drift
    (None for runs without probes)."""
    if not got or any("path" not in x for x in got):
        return None
    ratios = [x["algbw"] / statistics.fmean(x["path"]) for x in got]
    return max(ratios) / min(ratios)


def print_rates(gpus: int, every_rates: list[dict[int, dict]], matrices: dict) -> None:
    """The rates of every round (the warm-up rounds' included) per GPU, and
    p2pBandwidthLatencyTest's matrices beside the toolkit's copy rate."""
    print("\n== rates measured in this run (GB/s; median and fastest over rounds, the warm-up "
          "round's included, spread = max/min); the bounds below take the fastest")
    print(f"{'GPU':>3}  {'rate':<44} {'median':>9} {'fastest':>9} {'spread':>7}")
    words = {"copy": "copy inside the GPU (read + write)",
             "add": "add a + b -> c (3 x bytes)",
             "both": "a copy and an add at once (all traffic)", "h2d": "pinned host -> device",
             "d2h": "device -> pinned host", "duplex": "both at once, each way"}
    for g in range(gpus):
        for key, text in words.items():
            values = [rr[g][key] for rr in every_rates]
            print(f"{g:>3}  {text:<44} {statistics.median(values):>9.1f} {max(values):>9.1f} "
                  f"{spread(values):>7}")
    for title, matrix in matrices.items():
        if "Bandwidth" in title:
            print(f"p2pBandwidthLatencyTest {title}: "
                  + "; ".join(" ".join(f"{x:.1f}" for x in row) for row in matrix))
    diag = matrices.get("Unidirectional P2P=Enabled Bandwidth (P2P Writes) Matrix (GB/s)")
    if diag:
        ours = max(rr[0]["copy"] for rr in every_rates)
        print(f"GPU 0 diagonal: toolkit {ours:.1f} GB/s, p2pBandwidthLatencyTest {diag[0][0]:.1f}"
              f" GB/s, ratio {ours / diag[0][0]:.3f}")


def bound_of(label: str, network: tuple[str, str], gpus: int, every_rates: list[dict[int, dict]],
             fastest_path: float, nccl_ref: dict) -> tuple[float | None, str]:
    """The bound a mode's figure is held against, and its name: on one GPU the device mode's
    memory bound and local's duplex host path, on several nccl-tests' busbw at the network's
    (name, dtype); (None, "") where there is none."""
    if gpus == 1 and label.startswith("device"):
        # A bound is an upper bound: the fastest rates of the run (others only slow a
        # probe down), as bandwidth.ceiling.bounds takes the fastest of its repeats.
        bound = one_gpu_device_bound_gbps(
            2, max(rr[0][k] for rr in every_rates for k in ("copy", "add", "both")))
        return bound, "memory bound (fastest rate of the run)"
    if gpus == 1 and label.startswith("local 0"):
        return fastest_path, "duplex host path (fastest probe of the run)"
    if network in nccl_ref:
        return nccl_ref[network], "nccl-tests busbw"
    return None, ""


def mode_rows(nets: list[tuple[str, str, int]], modes: list[tuple[str, dict]], runs: dict,
              repeated: dict, gpus: int, every_rates: list[dict[int, dict]],
              fastest_path: float, nccl_ref: dict) -> list[dict]:
    """One row per network and mode that ran: the median of its run medians (local on one GPU:
    algbw, else busbw), their spread, the ratio to its bound (``bound_of``), the host and step
    time per step, and the runs measured again after a disturbed host path."""
    table = []
    for name, dtype, nbytes in nets:
        for label, _ in modes:
            got = runs.get((name, dtype, label)) or []
            if not got:
                continue
            one_device = label.startswith("local 0")
            figure = [x["algbw" if one_device else "busbw"] for x in got]
            bound, bound_name = bound_of(label, (name, dtype), gpus, every_rates, fastest_path,
                                         nccl_ref)
            median = statistics.median(figure)
            table.append({"network": name, "dtype": dtype, "mbytes": nbytes / 1e6, "mode": label,
                          "unit": "algbw" if one_device else "busbw", "median": median,
                          "runs": figure, "spread": max(figure) / min(figure),
                          "bound": bound, "bound_name": bound_name,
                          "ratio": median / bound if bound else None,
                          "host_us": 1e6 * statistics.median(x["host_seconds"] for x in got),
                          "step_us": 1e6 * statistics.median(x["seconds"] for x in got),
                          "error": max(x["error"] for x in got),
                          "chosen": "/".join(sorted({x["launch"] or "?" for x in got})),
                          "graph_steps": sorted({x.get("graph_steps", 1) for x in got}),
                          "path_spread": path_spread(got),
                          "paths": [x.get("path") for x in got],
                          "repeated": repeated.get((name, dtype, label), 0),
                          "replaced_runs": [x["replaced"]["algbw"] for x in got
                                            if "replaced" in x],
                          "disturbed": sum(disturbed(x, fastest_path) for x in got)})
    return table


def print_modes(table: list[dict]) -> None:
    print("\n== modes: median of the run medians (GB/s; local on one GPU: algbw), spread of the "
          "run medians (max/min), ratio to the bound of the same run, host time per step (us) "
          "beside the step's time; both per step, where an iteration replays the graph several times")
    print(f"{'network':<20} {'dtype':<8} {'MB':>9}  {'mode':<17} {'GB/s':>9} {'spread':>7} "
          f"{'bound':>9} {'ratio':>6}  {'host us':>8} {'step us':>9}  bound")
    for row in table:
        bound = f"{row['bound']:9.1f}" if row["bound"] else f"{'n/a':>9}"
        ratio = f"{row['ratio']:6.3f}" if row["ratio"] else f"{'n/a':>6}"
        chosen = f" (auto chose {row['chosen']})" if row["mode"].endswith("auto") else ""
        if row["graph_steps"] != [1]:
            chosen += f" (graph steps {'/'.join(map(str, row['graph_steps']))})"
        print(f"{row['network']:<20} {row['dtype']:<8} {row['mbytes']:>9.1f}  {row['mode']:<17} "
              f"{row['median']:>9.1f} {row['spread']:>7.3f} {bound} {ratio}  "
              f"{row['host_us']:>8.1f} {row['step_us']:>9.1f}  {row['bound_name']}{chosen}")


def targets(table: list[dict]) -> None:
    """Issue 17's one-GPU targets, row by row: device --gpus 0,0 at >= 0.8 of its bound from
    64 MB, >= 0.6 from 16 MB, for the graph path and for the default (auto) path; local on the GPU
    at >= 0.85 of the duplex host path from 64 MB, >= 0.6 from 16 MB; every row's run medians
    within 5 % (max/min <= 1.05)."""
    for mode in ("device 0,0 graph", "device 0,0 auto"):
        target_rows(mode, [r for r in table if r["mode"] == mode], 0.8)
    target_rows("local 0", [r for r in table if r["mode"] == "local 0"], 0.85)


def target_rows(mode: str, rows: list[dict], large: float) -> None:
    print(f"\n== targets ({mode}: ratio >= {large} from 64 MB, >= 0.6 from 16 MB; spread <= "
          f"1.05)")
    met = 0
    for row in rows:
        need = large if row["mbytes"] >= 64 else 0.6
        ok = row["ratio"] is not None and row["ratio"] >= need and row["spread"] <= 1.05
        met += ok
        beside = (f" (runs over the duplex probes around them: spread "
                  f"{row['path_spread']:.3f}; {row['repeated']} run(s) measured again after a "
                  f"disturbed path, {row['disturbed']} still disturbed)"
                  if row.get("path_spread") else "")
        print(f"{row['network']:<20} {row['dtype']:<8} ratio {row['ratio']:.3f} (>= {need}) "
              f"spread {row['spread']:.3f}: {'met' if ok else 'NOT met'}{beside}")
    print(f"# {met} of {len(rows)} rows meet the targets")
