"""Probe: ways of running local's one-GPU step (chunks down to pinned host memory, each back up
behind an event), interleaved in windows so that every way sees the same drift of the machine:

  ce1      copy engines, one stream per direction (the mode today)
  ce2      copy engines, each chunk split over two streams per direction
  sm       both directions as copy kernels reading / writing the pinned memory through its device
           address (zero-copy)
  ce-sm    copies down by a copy engine, up by a kernel
  sm-ce    down by a kernel, up by a copy engine
  h2d, d2h one direction alone by a copy engine (what each direction allows by itself)

    PYTHONPATH=$PWD python benchmarks/probes/host_path_methods.py [--mb 256] [--rounds 12]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from bandwidth.hardware.rawcopy import kernel_copy


class _View:
    def __init__(self, t: torch.Tensor):
        self.__cuda_array_interface__ = {"shape": (t.numel(),), "typestr": "|u1",
                                         "data": (t.data_ptr(), False), "version": 3}


def device_view(host: torch.Tensor) -> torch.Tensor:
    """The pinned host buffer as a CUDA tensor (unified addressing: same pointer)."""
    return torch.as_tensor(_View(host), device="cuda")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--mb", type=int, default=256)
    p.add_argument("--chunk-mb", type=int, default=16)
    p.add_argument("--rounds", type=int, default=12)
    p.add_argument("--window-s", type=float, default=0.4)
    p.add_argument("--methods", default="ce1,ce2,sm,ce-sm,sm-ce,h2d,d2h")
    a = p.parse_args()
    nbytes = a.mb << 20
    host = torch.ones(nbytes, dtype=torch.uint8, pin_memory=True)
    hview = device_view(host)
    grads = torch.ones(nbytes, dtype=torch.uint8, device="cuda")
    outs = torch.zeros(nbytes, dtype=torch.uint8, device="cuda")
    downs = [torch.cuda.Stream() for _ in range(2)]
    ups = [torch.cuda.Stream() for _ in range(2)]
    chunk = a.chunk_mb << 20
    ranges = [(s, min(nbytes, s + chunk)) for s in range(0, nbytes, chunk)]
    events = [[torch.cuda.Event() for _ in ranges] for _ in range(2)]

    def down_ce(s, e, k):
        host[s:e].copy_(grads[s:e], non_blocking=True)

    def down_sm(s, e, k):
        kernel_copy(hview[s:e].view(torch.int32), grads[s:e].view(torch.int32))

    def up_ce(s, e, k):
        outs[s:e].copy_(host[s:e], non_blocking=True)

    def up_sm(s, e, k):
        kernel_copy(outs[s:e].view(torch.int32), hview[s:e].view(torch.int32))

    def make(down, up, streams=1):
        def step():
            for c, (s, e) in enumerate(ranges):
                cut = [(s + (e - s) * i // streams, s + (e - s) * (i + 1) // streams)
                       for i in range(streams)]
                for i, (s2, e2) in enumerate(cut):
                    if down:
                        with torch.cuda.stream(downs[i]):
                            down(s2, e2, i)
                            events[i][c].record(downs[i])
                    if up:
                        if down:
                            ups[i].wait_event(events[i][c])
                        with torch.cuda.stream(ups[i]):
                            up(s2, e2, i)
        return step

    methods = {"ce1": make(down_ce, up_ce), "ce2": make(down_ce, up_ce, 2),
               "sm": make(down_sm, up_sm), "ce-sm": make(down_ce, up_sm),
               "sm-ce": make(down_sm, up_ce), "h2d": make(None, up_ce),
               "d2h": make(down_ce, None)}
    chosen = a.methods.split(",")
    for name in chosen:              # warm-up and a check of the result
        outs.zero_()
        grads.fill_(7)
        methods[name]()
        torch.cuda.synchronize()
        if name not in ("h2d", "d2h"):
            assert bool((outs == 7).all()), name
    rates: dict[str, list[float]] = {n: [] for n in chosen}
    for r in range(a.rounds):
        for name in chosen:
            step = methods[name]
            torch.cuda.synchronize()
            start = time.perf_counter()
            n = 0
            while time.perf_counter() - start < a.window_s:
                for _ in range(4):
                    step()
                n += 4
                torch.cuda.synchronize()
            rates[name].append(nbytes * n / (time.perf_counter() - start) / 1e9)
    print(f"{a.mb} MB steps, {a.chunk_mb} MB chunks, {a.rounds} rounds of {a.window_s} s windows "
          f"per method, interleaved; GB/s each way")
    for name, vals in rates.items():
        print(f"{name:>6}: " + " ".join(f"{v:4.1f}" for v in vals)
              + f" | median {statistics.median(vals):5.1f} spread {max(vals) / min(vals):.3f}")


if __name__ == "__main__":
    main()
