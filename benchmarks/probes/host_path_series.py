"""Probe: the duplex host path as a time series. local's one-GPU step (chunks down, each back up
behind an event) runs back to back for ``--seconds``; every step is timed by CUDA events, and the
steps are summarised in bins of ``--bin-ms``, with the run-median a run of a given length would
report (median of its steps), for several run lengths.

    PYTHONPATH=$PWD python benchmarks/probes/host_path_series.py [--mb 128] [--seconds 30]
"""

from __future__ import annotations

import argparse
import statistics

import torch


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--mb", type=int, default=128)
    p.add_argument("--chunk-mb", type=int, default=8)
    p.add_argument("--seconds", type=float, default=30)
    p.add_argument("--bin-ms", type=float, default=250)
    p.add_argument("--direction", default="duplex", choices=["duplex", "h2d", "d2h"])
    a = p.parse_args()
    nbytes = a.mb << 20
    host = torch.ones(nbytes, dtype=torch.uint8, pin_memory=True)
    grads = torch.ones(nbytes, dtype=torch.uint8, device="cuda")
    outs = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    down, up = torch.cuda.Stream(), torch.cuda.Stream()
    chunk = a.chunk_mb << 20
    ranges = [(s, min(nbytes, s + chunk)) for s in range(0, nbytes, chunk)]
    events = [torch.cuda.Event() for _ in ranges]
    main_stream = torch.cuda.current_stream()

    def step():
        for (s, e), ev in zip(ranges, events):
            if a.direction != "h2d":
                with torch.cuda.stream(down):
                    host[s:e].copy_(grads[s:e], non_blocking=True)
                    ev.record(down)
            if a.direction != "d2h":
                if a.direction == "duplex":
                    up.wait_event(ev)
                with torch.cuda.stream(up):
                    outs[s:e].copy_(host[s:e], non_blocking=True)

    for _ in range(5):
        step()
    torch.cuda.synchronize()
    per_step = []
    marks = []
    total_ms = 0.0
    while total_ms < a.seconds * 1000:
        batch = []
        for _ in range(20):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record(main_stream)
            down.wait_stream(main_stream)
            up.wait_stream(main_stream)
            step()
            main_stream.wait_stream(down)
            main_stream.wait_stream(up)
            end.record(main_stream)
            batch.append((start, end))
        torch.cuda.synchronize()
        for s, e in batch:
            ms = s.elapsed_time(e)
            per_step.append(ms)
            marks.append(total_ms)
            total_ms += ms
    rates = [nbytes / (ms / 1e3) / 1e9 for ms in per_step]
    print(f"{a.direction}, {a.mb} MB steps in {a.chunk_mb} MB chunks, {len(rates)} steps over "
          f"{total_ms / 1e3:.1f} s (GPU time, back to back); step median "
          f"{statistics.median(rates):.1f} GB/s, min {min(rates):.1f}, max {max(rates):.1f}")
    bins: dict[int, list[float]] = {}
    for t, r in zip(marks, rates):
        bins.setdefault(int(t // a.bin_ms), []).append(r)
    line = [f"{statistics.median(v):4.0f}" for _, v in sorted(bins.items())]
    print(f"median per {a.bin_ms:g} ms bin:")
    for i in range(0, len(line), 20):
        print("  " + " ".join(line[i:i + 20]))
    slow = sum(r < 0.95 * statistics.median(rates) for r in rates) / len(rates)
    print(f"steps below 0.95 x the median: {100 * slow:.1f} %")
    for run_ms in (200, 500, 1000, 2000, 4000):
        n = max(1, int(run_ms / statistics.median(per_step)))
        meds = [statistics.median(rates[i:i + n]) for i in range(0, len(rates) - n + 1, n)]
        if len(meds) >= 2:
            print(f"runs of {run_ms} ms ({n} steps): {len(meds)} runs, medians "
                  f"{min(meds):.1f}-{max(meds):.1f}, spread {max(meds) / min(meds):.3f}; "
                  f"spread of 5 consecutive runs, worst {worst5(meds):.3f}")


def worst5(meds: list[float]) -> float:
    return max(max(meds[i:i + 5]) / min(meds[i:i + 5]) for i in range(max(1, len(meds) - 4)))


if __name__ == "__main__":
    main()
