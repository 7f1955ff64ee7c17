"""Probe: which timing method makes this tool's ceilings read what the reference tools read on the
same machine (shared/docs/ceilings-h200x2.md). Prints one line per variant; nothing is asserted.

    PYTHONPATH=$PWD python3 benchmarks/probes/ceiling_methods.py [--parts coll,p2p,pageable,cpu]

coll      NCCL collectives through torch.distributed, 2 ranks, 1M..1G, four ways of timing a
          burst of 20 calls: CUDA events behind a spin kernel keeping the fastest rank (the
          tool's method so far) or the mean of ranks, a host clock around the burst with the
          mean of ranks (nccl-tests' default: -a 1), and one CUDA graph of the 20 calls replayed
          under a host clock (nccl-tests -G).
p2p       P2P=Disabled (peer access never enabled, copies staged by the driver), 160 MB x 5 as
          p2pBandwidthLatencyTest: unidirectional, and bidirectional issued alternately or as
          the reference issues them (all of one direction, then all of the other, behind a gate).
pageable  pageable host->device copies of 256 MB: as allocated, after binding to the GPU's NUMA
          node, with transparent huge pages, and smaller buffers.
cpu       the host's float32 add rate (3 x bytes): out-of-place and in place, thread counts.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import statistics
import subprocess
import sys
import time
from datetime import timedelta

import torch

from bandwidth.ceiling.timing import median_seconds

SIZES = [1 << 20, 1 << 24, 1 << 26, 1 << 28, 1 << 30]


# ----- collectives -----

def _coll_rank(rank: int, port: int) -> None:
    import torch.distributed as dist
    from bandwidth.ceiling.timing import GatedTimer
    dev = torch.device("cuda", rank)
    torch.cuda.set_device(dev)
    store = dist.TCPStore("127.0.0.1", port, is_master=rank == 0, world_size=2,
                          timeout=timedelta(seconds=120))
    dist.init_process_group("nccl", store=store, rank=rank, world_size=2, device_id=dev)
    n, iters = 2, 20

    def barrier():
        t = torch.zeros(1, device=dev)
        dist.all_reduce(t)
        t.item()

    def combine(x, op):
        t = torch.tensor([x], dtype=torch.float64, device=dev)
        dist.all_reduce(t, op=op)
        return float(t.item())

    for nbytes in SIZES:
        numel = nbytes // 4
        x = torch.zeros(numel, device=dev)
        shard = torch.zeros(numel // n, device=dev)
        calls = {
            "all_reduce": (lambda: dist.all_reduce(x), 2 * (n - 1) / n),
            "broadcast": (lambda: dist.broadcast(x, src=0), 1.0),
            "reduce_scatter": (lambda: dist.reduce_scatter_tensor(shard, x), (n - 1) / n),
            "all_gather": (lambda: dist.all_gather_into_tensor(x, shard), (n - 1) / n),
        }
        for name, (call, factor) in calls.items():
            for _ in range(5):
                call()

            def burst():
                for _ in range(iters):
                    call()
            results = {}
            timer = GatedTimer(torch.cuda.current_stream(dev))
            for label, op in (("gated_min", "min"), ("gated_mean", "mean")):
                times = []
                for k in range(6):
                    own = timer.sample(burst, sync=barrier, retry=False)
                    timer.gate_seconds = combine(timer.gate_seconds, dist.ReduceOp.MAX)
                    if op == "min":
                        t = -combine(-own, dist.ReduceOp.MAX)
                    else:
                        t = combine(own, dist.ReduceOp.SUM) / n
                    if k:
                        times.append(t / iters)
                results[label] = statistics.median(times)
            mean, slowest = [], []
            for _ in range(5):
                barrier()
                torch.cuda.synchronize(dev)
                t = time.perf_counter()
                burst()
                torch.cuda.synchronize(dev)
                t = time.perf_counter() - t
                mean.append(combine(t, dist.ReduceOp.SUM) / n / iters)
                slowest.append(combine(t, dist.ReduceOp.MAX) / iters)
            results["host_mean"] = statistics.median(mean)
            results["host_max"] = statistics.median(slowest)
            try:
                side = torch.cuda.Stream(dev)
                side.wait_stream(torch.cuda.current_stream(dev))
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph, stream=side):
                    burst()
                torch.cuda.synchronize(dev)
                times = []
                for _ in range(6):
                    barrier()
                    torch.cuda.synchronize(dev)
                    t = time.perf_counter()
                    graph.replay()
                    torch.cuda.synchronize(dev)
                    times.append(combine(time.perf_counter() - t, dist.ReduceOp.SUM) / n / iters)
                results["graph_host_mean"] = statistics.median(times[1:])
                del graph
            except Exception as exc:                     # report and go on: it is a probe
                if rank == 0:
                    print(f"coll {name} graph failed: {str(exc).splitlines()[0]}", flush=True)
            if rank == 0:
                cells = "  ".join(f"{k} {nbytes / s / 1e9 * factor:7.1f}"
                                  for k, s in results.items())
                print(f"coll {name:14s} {nbytes >> 20:5d} MiB busbw  {cells}", flush=True)
        x = shard = None            # free them before the next size
        torch.cuda.empty_cache()
    dist.destroy_process_group()


def collectives() -> None:
    import torch.multiprocessing as mp
    from bandwidth.launch.rendezvous import free_port
    mp.spawn(_coll_rank, args=(free_port(),), nprocs=2, join=True)


# ----- P2P disabled -----

def p2p_disabled() -> None:
    """Runs in a child process that never enables peer access."""
    from bandwidth.hardware import rawcopy
    for i, j in ((0, 1), (1, 0)):
        rawcopy.disable_peer_access(i, j)
    nbytes, repeat = 40_000_000 * 4, 5
    buf = {g: torch.zeros(nbytes, dtype=torch.uint8, device=f"cuda:{g}") for g in (0, 1)}
    s0 = {g: torch.cuda.Stream(device=g) for g in (0, 1)}
    s1 = {g: torch.cuda.Stream(device=g) for g in (0, 1)}

    def sync():
        torch.cuda.synchronize(0)
        torch.cuda.synchronize(1)
    for i, j in ((0, 1), (1, 0)):
        one = rawcopy.PeerCopy(buf[j], buf[i], s0[i])
        t = median_seconds(one, sync, 5, burst=repeat)
        print(f"p2p-disabled uni {i}->{j} host-burst {nbytes / t / 1e9:6.1f}", flush=True)
        there = rawcopy.PeerCopy(buf[j], buf[i], s0[i])
        back = rawcopy.PeerCopy(buf[i], buf[j], s1[j])

        def alternate():
            there()
            back()
        t = median_seconds(alternate, sync, 5, burst=repeat)
        print(f"p2p-disabled bi {i}<->{j} alternate host-burst {2 * nbytes / t / 1e9:6.1f}",
              flush=True)

        def reference_order():
            for _ in range(repeat):
                back()           # j -> i on stream1[j] first, as the reference
            for _ in range(repeat):
                there()
        t = median_seconds(reference_order, sync, 5)
        print(f"p2p-disabled bi {i}<->{j} ref-order host {2 * nbytes * repeat / t / 1e9:6.1f}",
              flush=True)
        # the reference's gate: stream1[j] waits on the start event of stream0[i], the end is
        # stream1[j]'s stop joined into stream0[i]
        start = torch.cuda.Event(enable_timing=True)
        stop_j = torch.cuda.Event()
        stop = torch.cuda.Event(enable_timing=True)
        for gate_ms in (5, 50):
            times = []
            for _ in range(4):
                sync()
                with torch.cuda.device(i), torch.cuda.stream(s0[i]):
                    torch.cuda._sleep(int(gate_ms * 1e-3 * 1.9e9))
                start.record(s0[i])
                s1[j].wait_event(start)
                reference_order()
                stop_j.record(s1[j])
                s0[i].wait_event(stop_j)
                stop.record(s0[i])
                stop.synchronize()
                times.append(start.elapsed_time(stop) / 1e3)
            t = statistics.median(times[1:])
            print(f"p2p-disabled bi {i}<->{j} ref-order gated {gate_ms} ms events "
                  f"{2 * nbytes * repeat / t / 1e9:6.1f}", flush=True)


# ----- pageable -----

def _gpu_cpus(gpu: int) -> set[int] | None:
    try:
        from bandwidth.hardware import rawcopy
        bus = rawcopy.pci_bus_id(gpu).lower()
        with open(f"/sys/bus/pci/devices/{bus}/local_cpulist") as f:
            text = f.read().strip()
    except Exception:
        return None
    cpus = set()
    for part in text.split(","):
        a, _, b = part.partition("-")
        cpus.update(range(int(a), int(b or a) + 1))
    return cpus


def pageable() -> None:
    for path in ("/sys/kernel/mm/transparent_hugepage/enabled",
                 "/sys/kernel/mm/transparent_hugepage/defrag"):
        try:
            print(f"pageable {path}: {open(path).read().strip()}")
        except OSError:
            pass
    print("pageable numa:", subprocess.run("ls -d /sys/devices/system/node/node* 2>/dev/null; "
                                           "cat /sys/devices/system/node/node*/cpulist",
                                           shell=True, capture_output=True,
                                           text=True).stdout.replace("\n", " "))
    print(f"pageable gpu0 local cpus: {_gpu_cpus(0)}  process affinity: "
          f"{len(os.sched_getaffinity(0))} cpus", flush=True)
    dev = torch.empty(256 * 10**6, dtype=torch.uint8, device="cuda:0")

    def rate(host, label, stream=None):
        d = dev[:host.numel()]

        def copy():
            if stream is None:
                d.copy_(host)
            else:
                with torch.cuda.stream(stream):
                    d.copy_(host)
        t = median_seconds(copy, lambda: torch.cuda.synchronize(0), 5, burst=3)
        print(f"pageable H2D {label}: {host.numel() / t / 1e9:6.2f} GB/s", flush=True)

    rate(torch.ones(256 * 10**6, dtype=torch.uint8), "256 MB torch.ones uint8")
    rate(torch.randn(64 * 10**6).view(torch.uint8), "256 MB torch.randn float32")
    rate(torch.ones(32 * 10**6, dtype=torch.uint8), "32 MB")
    rate(torch.ones(4 * 10**6, dtype=torch.uint8), "4 MB")
    libc = ctypes.CDLL("libc.so.6")
    x = torch.empty(256 * 10**6 + (2 << 20), dtype=torch.uint8)
    base = (x.data_ptr() + (2 << 20) - 1) & ~((2 << 20) - 1)
    off = base - x.data_ptr()
    rc = libc.madvise(ctypes.c_void_p(base), ctypes.c_size_t(256 * 10**6 // (2 << 20) * (2 << 20)),
                      14)
    y = x[off:off + 256 * 10**6]
    y.fill_(1)
    rate(y, f"256 MB MADV_HUGEPAGE (madvise rc {rc})")
    cpus = _gpu_cpus(0)
    if cpus and cpus != os.sched_getaffinity(0):
        os.sched_setaffinity(0, cpus)
        torch.set_num_threads(min(len(cpus), 16))
        rate(torch.ones(256 * 10**6, dtype=torch.uint8), "256 MB bound to GPU 0's node")
    torch.set_num_threads(1)
    rate(torch.ones(256 * 10**6, dtype=torch.uint8), "256 MB filled by 1 thread")


# ----- CPU add -----

def cpu_add() -> None:
    n = 256 * 10**6 // 4
    for threads in (os.cpu_count(), 32, 16, 8):
        torch.set_num_threads(threads)
        a, b, c = torch.ones(n), torch.ones(n), torch.empty(n)
        first = time.perf_counter()
        a.add_(b)
        first = time.perf_counter() - first
        t_out = median_seconds(lambda: torch.add(a, b, out=c), lambda: None, 5)
        t_in = median_seconds(lambda: a.add_(b), lambda: None, 5)
        print(f"cpu add {threads:3d} threads: out-of-place {3 * n * 4 / t_out / 1e9:6.1f}  "
              f"in place {3 * n * 4 / t_in / 1e9:6.1f}  first call in place "
              f"{3 * n * 4 / first / 1e9:6.1f} GB/s", flush=True)
        fresh_a, fresh_b = torch.empty(n), torch.empty(n)
        t = time.perf_counter()
        fresh_a.add_(fresh_b)
        t = time.perf_counter() - t
        print(f"cpu add {threads:3d} threads: in place on never-touched buffers "
              f"{3 * n * 4 / t / 1e9:6.1f} GB/s", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--parts", default="coll,p2p,pageable,cpu")
    parser.add_argument("--child", default=None)
    args = parser.parse_args()
    if args.child == "p2p":
        p2p_disabled()
        return 0
    parts = args.parts.split(",")
    if "cpu" in parts:
        cpu_add()
    if "p2p" in parts:
        subprocess.run([sys.executable, __file__, "--child", "p2p"], check=False, timeout=300)
    if "coll" in parts:
        collectives()
    if "pageable" in parts:          # last: it binds this process to one NUMA node
        pageable()
    return 0


if __name__ == "__main__":
    sys.exit(main())
