"""Probe: does the kind of pinned host memory set the duplex host path's rate, and its steadiness?

Several buffer pairs of each kind are measured in interleaved rounds (every pair once per round),
so a rate that follows the buffer shows as a steady row and one that follows the time as a
steady column. Kinds: torch's pinned allocator (cudaHostAlloc), anonymous memory with 2 MB
transparent huge pages registered with cudaHostRegister, the same with 4 KB pages, and
cudaHostAlloc write-combined. The pattern is local's one-GPU step: chunks copied down and each
copied back up behind an event, on two streams.

    PYTHONPATH=$PWD python benchmarks/probes/host_alloc_probe.py [--mb 512] [--pairs 3] [--rounds 8]
"""

from __future__ import annotations

import argparse
import ctypes
import mmap
import statistics
import time

import torch

from bandwidth.hardware import rawcopy


def cudart():
    lib = rawcopy._runtime()
    lib.cudaHostRegister.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint]
    lib.cudaHostAlloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t, ctypes.c_uint]
    return lib


def huge_pages_kb() -> int:
    with open("/proc/self/smaps_rollup") as f:
        for line in f:
            if line.startswith("AnonHugePages:"):
                return int(line.split()[1])
    return -1


KEEP = []


def host_buffer(kind: str, nbytes: int) -> torch.Tensor:
    if kind == "torch":
        return torch.ones(nbytes, dtype=torch.uint8, pin_memory=True)
    lib = cudart()
    if kind == "wc":
        ptr = ctypes.c_void_p()
        assert lib.cudaHostAlloc(ctypes.byref(ptr), nbytes, 4) == 0   # cudaHostAllocWriteCombined
        array = (ctypes.c_uint8 * nbytes).from_address(ptr.value)
        KEEP.append(array)
        t = torch.frombuffer(array, dtype=torch.uint8)
        t.fill_(1)
        return t
    m = mmap.mmap(-1, nbytes + (2 << 20), flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    m.madvise(mmap.MADV_HUGEPAGE if kind == "huge" else mmap.MADV_NOHUGEPAGE)
    KEEP.append(m)
    t = torch.frombuffer(m, dtype=torch.uint8)
    # 2 MB-aligned start inside the mapping
    offset = (-t.data_ptr()) % (2 << 20)
    t = t[offset:offset + nbytes]
    t.fill_(1)
    assert lib.cudaHostRegister(t.data_ptr(), nbytes, 0) == 0
    return t


def step_rate(host: torch.Tensor, grads, outs, down, up, chunk: int, burst: int) -> float:
    n = host.numel()
    ranges = [(s, min(n, s + chunk)) for s in range(0, n, chunk)]
    events = [torch.cuda.Event() for _ in ranges]

    def step():
        for (s, e), ev in zip(ranges, events):
            with torch.cuda.stream(down):
                host[s:e].copy_(grads[s:e], non_blocking=True)
                ev.record(down)
            up.wait_event(ev)
            with torch.cuda.stream(up):
                outs[s:e].copy_(host[s:e], non_blocking=True)

    step()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(burst):
        step()
    torch.cuda.synchronize()
    return n * burst / (time.perf_counter() - start) / 1e9


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--mb", type=int, default=512)
    p.add_argument("--pairs", type=int, default=3)
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--burst", type=int, default=10)
    p.add_argument("--chunk-mb", type=int, default=32)
    p.add_argument("--kinds", default="torch,huge,small,wc")
    a = p.parse_args()
    nbytes = a.mb << 20
    grads = torch.ones(nbytes, dtype=torch.uint8, device="cuda")
    outs = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    down, up = torch.cuda.Stream(), torch.cuda.Stream()
    buffers = {}
    for kind in a.kinds.split(","):
        before = huge_pages_kb()
        buffers[kind] = [host_buffer(kind, nbytes) for _ in range(a.pairs)]
        print(f"{kind}: {a.pairs} x {a.mb} MB, AnonHugePages +{(huge_pages_kb() - before) >> 10} MB",
              flush=True)
    rates = {(k, i): [] for k in buffers for i in range(a.pairs)}
    for r in range(a.rounds):
        for kind, bufs in buffers.items():
            for i, host in enumerate(bufs):
                rates[(kind, i)].append(step_rate(host, grads, outs, down, up, a.chunk_mb << 20,
                                                  a.burst))
    print(f"rates GB/s (one direction), {a.rounds} rounds across, local's chunked step, "
          f"{a.chunk_mb} MB chunks")
    for (kind, i), vals in rates.items():
        print(f"{kind:>6} {i}: " + " ".join(f"{v:5.1f}" for v in vals)
              + f"  median {statistics.median(vals):5.1f} spread {max(vals) / min(vals):.3f}")
    for kind in buffers:
        meds = [statistics.median(rates[(kind, i)]) for i in range(a.pairs)]
        allv = [v for i in range(a.pairs) for v in rates[(kind, i)]]
        print(f"{kind:>6}: medians {' '.join(f'{m:5.1f}' for m in meds)}, all {min(allv):5.1f}-"
              f"{max(allv):5.1f} ({max(allv) / min(allv):.3f})")


if __name__ == "__main__":
    main()
