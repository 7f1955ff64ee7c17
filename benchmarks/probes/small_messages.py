"""Probe: the two ceiling figures still more than 5 % off the reference tools on 2 x H200.
Prints one line per variant; nothing is asserted.

    PYTHONPATH=$PWD python3 benchmarks/probes/small_messages.py [--parts nccl1p,nccl2p,latency]

nccl1p   NCCL collectives from ONE process driving every GPU through torch.cuda.nccl (PyTorch's
         own NCCL binding; nccl-tests' default set-up, ``-g N``, one thread), host clock around
         bursts of 20 calls between device synchronisations, median of 5 bursts. Through the
         public wrappers and through torch._C directly (no Python argument handling), in place
         and out of place.
nccl2p   one process per GPU with a torch.cuda.nccl communicator (mpirun -np 2 ... -g 1); on torch
         2.11 with Python 3.12 torch.cuda.nccl.init_rank fails ("PY_SSIZE_T_CLEAN macro must be
         defined"), so this part stops there.
latency  P2P=Disabled latency (16-byte cudaMemcpyPeerAsync staged by the driver), 100 copies,
         in a child process that never enabled peer access: the tool's adaptive gate, a fixed
         gate of the reference's 10^7 clocks, no gate, and the host's time per copy; five
         samples per direction, to see the spread.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

import torch

SIZES = [1 << 20, 2 << 20, 4 << 20, 8 << 20, 16 << 20, 64 << 20, 256 << 20, 1 << 30]


def _host_time(call, gpus, iters=20, warmup=5, repeats=5) -> float:
    def sync():
        for g in gpus:
            torch.cuda.synchronize(g)
    for _ in range(warmup):
        call()
    times = []
    for _ in range(repeats):
        sync()
        t = time.perf_counter()
        for _ in range(iters):
            call()
        sync()
        times.append((time.perf_counter() - t) / iters)
    return statistics.median(times)


def nccl1p() -> None:
    import torch.cuda.nccl as nccl
    gpus = list(range(torch.cuda.device_count()))
    n = len(gpus)
    print(f"nccl1p: {n} GPUs, NCCL {torch.cuda.nccl.version()}", flush=True)
    C = torch._C
    SUM = 0
    for nbytes in SIZES:
        numel = nbytes // 4 // n * n
        x = [torch.zeros(numel, device=f"cuda:{g}") for g in gpus]
        y = [torch.zeros(numel, device=f"cuda:{g}") for g in gpus]
        shard = [torch.zeros(numel // n, device=f"cuda:{g}") for g in gpus]
        streams = [torch.cuda.current_stream(g) for g in gpus]
        ar, sh = 2 * (n - 1) / n, (n - 1) / n
        variants = {
            "all_reduce in-place": (lambda: nccl.all_reduce(x), ar),
            "all_reduce out-of-place": (lambda: nccl.all_reduce(x, y), ar),
            "all_reduce _C oop": (lambda: C._nccl_all_reduce(x, y, SUM, streams, None), ar),
            "broadcast": (lambda: nccl.broadcast(x, 0), 1.0),
            "broadcast _C": (lambda: C._nccl_broadcast(x, 0, streams, None), 1.0),
            "reduce_scatter": (lambda: nccl.reduce_scatter(x, shard), sh),
            "reduce_scatter _C": (lambda: C._nccl_reduce_scatter(x, shard, SUM, streams, None),
                                  sh),
            "all_gather": (lambda: nccl.all_gather(shard, y), sh),
            "all_gather _C": (lambda: C._nccl_all_gather(shard, y, streams, None), sh),
        }
        cells = []
        for label, (call, factor) in variants.items():
            try:
                t = _host_time(call, gpus)
                cells.append(f"{label} {numel * 4 / t / 1e9 * factor:6.1f}")
            except Exception as exc:            # a probe: report and go on
                cells.append(f"{label} failed ({str(exc).splitlines()[0][:60]})")
        print(f"nccl1p {nbytes >> 20:5d} MiB busbw  " + " | ".join(cells), flush=True)
        # correctness of the out-of-place all_reduce on inputs g + 1
        for g, t in enumerate(x):
            t.fill_(g + 1)
        nccl.all_reduce(x, y)
        want = n * (n + 1) / 2
        bad = sum(int((t != want).sum().item()) for t in y)
        print(f"nccl1p {nbytes >> 20:5d} MiB all_reduce check: {bad} wrong", flush=True)
        x = y = shard = None
        torch.cuda.empty_cache()


def _nccl_rank(rank: int, port: int) -> None:
    """One process per GPU, a torch.cuda.nccl communicator (its id passed through a TCPStore),
    host clock around bursts of 20, mean of the ranks (mpirun -np 2 ... -g 1)."""
    import torch.cuda.nccl as nccl
    import torch.distributed as dist
    from datetime import timedelta
    n = 2
    torch.cuda.set_device(rank)
    store = dist.TCPStore("127.0.0.1", port, world_size=n, is_master=rank == 0,
                          timeout=timedelta(seconds=60))
    if rank == 0:
        store.set("uid", bytes(nccl.unique_id()))
    uid = store.get("uid")
    comm = nccl.init_rank(n, uid, rank)
    C = torch._C
    stream = [torch.cuda.current_stream(rank)]
    one = [torch.zeros(1, device=f"cuda:{rank}")]

    def barrier():
        C._nccl_all_reduce(one, one, 0, stream, [comm])
        torch.cuda.synchronize(rank)
    for nbytes in SIZES[:6]:
        numel = nbytes // 4
        x = [torch.zeros(numel, device=f"cuda:{rank}")]
        y = [torch.zeros(numel, device=f"cuda:{rank}")]
        shard = [torch.zeros(numel // n, device=f"cuda:{rank}")]
        calls = {
            "all_reduce": (lambda: C._nccl_all_reduce(x, y, 0, stream, [comm]), 1.0),
            "broadcast": (lambda: C._nccl_broadcast(x, 0, stream, [comm]), 1.0),
            "reduce_scatter": (lambda: C._nccl_reduce_scatter(x, shard, 0, stream, [comm]), 0.5),
            "all_gather": (lambda: C._nccl_all_gather(shard, y, stream, [comm]), 0.5),
        }
        cells = []
        for name, (call, factor) in calls.items():
            for _ in range(5):
                call()
            times = []
            for _ in range(5):
                barrier()
                t = time.perf_counter()
                for _ in range(20):
                    call()
                torch.cuda.synchronize(rank)
                t = (time.perf_counter() - t) / 20
                store.set(f"t{nbytes}{name}{len(times)}r{rank}", repr(t))
                other = float(store.get(f"t{nbytes}{name}{len(times)}r{1 - rank}"))
                times.append((t + other) / 2)
            cells.append(f"{name} {numel * 4 / statistics.median(times) / 1e9 * factor:6.1f}")
        if rank == 0:
            print(f"nccl2p {nbytes >> 20:5d} MiB busbw  " + " | ".join(cells), flush=True)


def nccl2p() -> None:
    import torch.multiprocessing as mp
    from bandwidth.launch.rendezvous import free_port
    mp.spawn(_nccl_rank, args=(free_port(),), nprocs=2, join=True)


def latency_child() -> None:
    from bandwidth.hardware import rawcopy
    from bandwidth.ceiling.timing import GatedTimer, cycles_per_second
    for i, j in ((0, 1), (1, 0)):
        rawcopy.disable_peer_access(i, j)
    tiny = {g: torch.zeros(16, dtype=torch.uint8, device=f"cuda:{g}") for g in (0, 1)}
    tiny2 = {g: torch.zeros(16, dtype=torch.uint8, device=f"cuda:{g}") for g in (0, 1)}
    streams = {g: torch.cuda.Stream(device=g) for g in (0, 1)}
    repeat = 100

    def sync():
        torch.cuda.synchronize(0)
        torch.cuda.synchronize(1)
    for i, j in ((0, 1), (1, 0)):
        copy = rawcopy.PeerCopy(tiny2[j], tiny[i], streams[i])

        def burst():
            for _ in range(repeat):
                copy()
        for _ in range(3):
            burst()
        sync()
        adaptive = []
        timer = GatedTimer(streams[i])
        for _ in range(6):
            adaptive.append(timer.sample(burst, sync) / repeat * 1e6)
        fixed, host = [], []
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        cycles = 10_000_000
        for _ in range(6):
            sync()
            with torch.cuda.device(i), torch.cuda.stream(streams[i]):
                torch.cuda._sleep(cycles)
            start.record(streams[i])
            t = time.perf_counter()
            burst()
            host.append((time.perf_counter() - t) / repeat * 1e6)
            stop.record(streams[i])
            stop.synchronize()
            fixed.append(start.elapsed_time(stop) * 1e3 / repeat)
        ungated = []
        for _ in range(6):
            sync()
            start.record(streams[i])
            burst()
            stop.record(streams[i])
            stop.synchronize()
            ungated.append(start.elapsed_time(stop) * 1e3 / repeat)
        gate_ms = cycles / cycles_per_second(i) * 1e3

        def show(v):
            return " ".join(f"{x:5.1f}" for x in v[1:]) + f"  (median {statistics.median(v[1:]):5.2f})"
        print(f"latency {i}->{j} adaptive gate (now {timer.gate_seconds * 1e3:.1f} ms): "
              f"{show(adaptive)}", flush=True)
        print(f"latency {i}->{j} fixed gate 1e7 cycles = {gate_ms:.1f} ms: {show(fixed)}",
              flush=True)
        print(f"latency {i}->{j} host enqueue per copy: {show(host)}", flush=True)
        print(f"latency {i}->{j} no gate: {show(ungated)}", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--parts", default="nccl1p,nccl2p,latency")
    parser.add_argument("--child", action="store_true")
    args = parser.parse_args()
    if args.child:
        latency_child()
        return 0
    parts = args.parts.split(",")
    if "latency" in parts:
        for _ in range(2):
            subprocess.run([sys.executable, __file__, "--child"], check=False, timeout=300)
    if "nccl1p" in parts:
        nccl1p()
    if "nccl2p" in parts:
        nccl2p()
    return 0


if __name__ == "__main__":
    sys.exit(main())
