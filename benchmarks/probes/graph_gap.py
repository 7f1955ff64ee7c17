"""Why the graph of `device --gpus 0,0` ran slower than its eager step, and what one GPU's small
networks need (issue 17). Four parts, each printed as a table:

A. each operation of the one-GPU step (sizes of vgg-16's two owner halves) alone, GPU time by CUDA
   events, issued eagerly and replayed from a graph: copies as memcpy (torch copy_) and as an
   elementwise kernel (rawcopy.kernel_copy), and the add; then the whole sequential step both ways;
   and a torch.profiler trace of one replay (the names and times of what ran);
B. `device --gpus 0,0` through the real code for a few networks: eager against the graph captured
   with each schedule and copy kind (DeviceStore.SHARED_GRAPH_*), median of a few runs;
C. `local --gpus 0` eager against graph, and a few chunk sizes, for the small networks;
D. the drift of a small network's step over 300 iterations (how much warm-up a run needs);
E. the spread of small networks' run medians with a short and a long warm-up;
F. local runs in a row beside the duplex host probe before each (does the path itself move?).

    PYTHONPATH=$PWD python benchmarks/probes/graph_gap.py [--parts ABCD]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from bandwidth.hardware import rawcopy
from bandwidth.ceiling.host import duplex_host_gbps
from bandwidth.config.options import Config
from bandwidth.stores import device as device_mode
from bandwidth.run import run


def gpu_ms(fn, reps=20):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(reps):
        torch.cuda.synchronize()
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def graph_of(fn):
    fn()
    torch.cuda.synchronize()
    g, s = torch.cuda.CUDAGraph(), torch.cuda.Stream()
    with torch.cuda.graph(g, stream=s):
        fn()
    torch.cuda.synchronize()
    return g


def part_a(nbytes: int):
    n = nbytes // 4
    h = n // 2
    g0, g1 = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    o0, o1 = torch.zeros(n, device="cuda"), torch.zeros(n, device="cuda")
    r0, r1 = torch.empty(h, device="cuda"), torch.empty(n - h, device="cuda")
    memcpy = lambda d, s: d.copy_(s)                         # noqa: E731
    kernel = rawcopy.kernel_copy

    def step(copy):
        def run_it():
            copy(r0, g1[:h])
            copy(r1, g0[h:])
            torch.add(g0[:h], r0, out=o0[:h])
            copy(o1[:h], o0[:h])
            torch.add(g1[h:], r1, out=o1[h:])
            copy(o0[h:], o1[h:])
        return run_it

    mb = h * 4 / 1e6
    print(f"\n== A. one-GPU step ops at {nbytes / 1e6:.1f} MB (halves of {mb:.1f} MB): GPU ms "
          f"eager / graph, GB/s of traffic")
    ops = [("copy memcpy  g1[:h]->r0", lambda: memcpy(r0, g1[:h]), 2),
           ("copy kernel  g1[:h]->r0", lambda: kernel(r0, g1[:h]), 2),
           ("copy memcpy  o0[:h]->o1", lambda: memcpy(o1[:h], o0[:h]), 2),
           ("copy kernel  o0[:h]->o1", lambda: kernel(o1[:h], o0[:h]), 2),
           ("add g0[:h]+r0->o0", lambda: torch.add(g0[:h], r0, out=o0[:h]), 3),
           ("step seq memcpy", step(memcpy), 1),
           ("step seq kernel", step(kernel), 1)]
    bound_bytes = 4 * 2 * h * 4 + 2 * 3 * h * 4
    for name, fn, factor in ops:
        e = gpu_ms(fn)
        g = graph_of(fn)
        gr = gpu_ms(g.replay)
        traffic = factor * h * 4 if not name.startswith("step") else bound_bytes
        print(f"{name:<26} eager {e:8.4f} ms {traffic / e / 1e6:8.1f} GB/s   graph {gr:8.4f} ms "
              f"{traffic / gr / 1e6:8.1f} GB/s")
    for label, copy in (("memcpy", memcpy), ("kernel", kernel)):
        g = graph_of(step(copy))
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            for _ in range(3):
                g.replay()
            torch.cuda.synchronize()
            for _ in range(3):
                step(copy)()
            torch.cuda.synchronize()
        print(f"-- profiler, 3 replays then 3 eager steps, {label} copies:")
        for ev in prof.events():
            if ev.device_type == torch.autograd.DeviceType.CUDA:
                print(f"   {ev.name[:70]:<70} {ev.device_time:9.1f} us")
    torch.cuda.empty_cache()


def measure(config: Config) -> tuple[float, float, str, list[float]]:
    result = run(config)
    s = result.summary
    return s.busbw_median if config.kv_store == "device" else s.algbw_median, \
        s.host_seconds_median or 0.0, result.launch or "?", [x.seconds for x in result.samples]


def part_b(nets: list[str], reps: int, iters: int):
    print(f"\n== B. device --gpus 0,0: GB/s busbw (median of {reps} runs of {iters} iterations; "
          f"min-max), host us per step")
    variants = [("eager", None, None)] + [(f"graph {s} {c}", s, c) for s in
                                          ("sequential", "parallel", "concurrent")
                                          for c in ("memcpy", "kernel")]
    for net in nets:
        for label, sched, copy in variants:
            if sched:
                device_mode.SHARED_GRAPH_SCHEDULE, device_mode.SHARED_GRAPH_COPY = sched, copy
            got = [measure(Config(network=net, kv_store="device", gpus=(0, 0),
                                  launch="eager" if sched is None else "graph",
                                  num_batches=iters, warmup=10, reference=False))
                   for _ in range(reps)]
            figs = [x[0] for x in got]
            print(f"{net:<14} {label:<26} {statistics.median(figs):8.1f} "
                  f"({min(figs):.1f}-{max(figs):.1f})  host {1e6 * got[0][1]:6.1f} us  "
                  f"[{got[0][2]}]", flush=True)
            torch.cuda.empty_cache()


def part_c(nets: list[str], reps: int, iters: int):
    print(f"\n== C. local --gpus 0: algbw GB/s (median of {reps} runs; min-max), host us; duplex "
          f"{duplex_host_gbps(0, 256 * 10**6):.1f} GB/s")
    for net in nets:
        for launch in ("eager", "graph"):
            for chunk in (None, 0.5, 1.0, 2.0, 4.0):
                if launch == "eager" and chunk not in (None, 1.0):
                    continue
                got = [measure(Config(network=net, kv_store="local", gpus=(0,), launch=launch,
                                      chunk_mb=chunk, num_batches=iters, warmup=10,
                                      reference=False)) for _ in range(reps)]
                figs = [x[0] for x in got]
                print(f"{net:<14} {launch:<6} chunk {chunk or 'auto'!s:<5} "
                      f"{statistics.median(figs):7.2f} ({min(figs):.2f}-{max(figs):.2f})  "
                      f"host {1e6 * got[0][1]:7.1f} us [{got[0][2]}]", flush=True)
    print(f"duplex again: {duplex_host_gbps(0, 256 * 10**6):.1f} GB/s")


def part_d():
    print("\n== D. drift over 300 iterations: median step us of iterations 1-10, 11-30, 31-100, "
          "101-300")
    for kv, net, gpus in (("device", "mobilenet", (0, 0)), ("device", "inception-bn", (0, 0)),
                          ("local", "mobilenet", (0,))):
        time.sleep(1.0)          # idle first, as between configurations of a benchmark
        _, _, launch, secs = measure(Config(network=net, kv_store=kv, gpus=gpus, launch="graph",
                                            num_batches=300, warmup=0, reference=False))
        parts = [secs[:10], secs[10:30], secs[30:100], secs[100:]]
        print(f"{kv} {net} [{launch}]: " + "  ".join(f"{1e6 * statistics.median(p):8.1f}"
                                                      for p in parts))


def part_e(reps: int):
    print("\n== E. run-to-run spread of small device graphs: run medians (GB/s) for warm-up 20 "
          "and 400 iterations, each run after 0.3 s of idling with a local run in between")
    for net in ("mobilenet", "inception-bn", "mlp"):
        for warm in (20, 400):
            figs = []
            for _ in range(reps):
                measure(Config(network="lenet", kv_store="local", gpus=(0,), num_batches=3,
                               warmup=1, reference=False))
                time.sleep(0.3)
                figs.append(measure(Config(network=net, kv_store="device", gpus=(0, 0),
                                           launch="graph", num_batches=50, warmup=warm,
                                           reference=False))[0])
            print(f"{net:<14} warm-up {warm:>4}: " + " ".join(f"{x:6.1f}" for x in figs)
                  + f"  spread {max(figs) / min(figs):.3f}", flush=True)


def part_f(reps: int):
    print("\n== F. local runs in a row (algbw GB/s of each run) beside the duplex probe before "
          "each")
    for net in ("lenet", "vgg"):
        rows = []
        for _ in range(reps):
            duplex = duplex_host_gbps(0, 256 * 10**6)
            fig = measure(Config(network=net, kv_store="local", gpus=(0,), num_batches=20,
                                 warmup=2, reference=False))[0]
            rows.append(f"{fig:5.1f}/{duplex:5.1f}")
        print(f"{net:<8} " + " ".join(rows), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--parts", default="ABCD")
    ap.add_argument("--nets", default="mobilenet,inception-bn,mlp,alexnet,vgg")
    ap.add_argument("--local-nets", default="mobilenet,googlenet,inception-bn,mlp")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--iters", type=int, default=40)
    a = ap.parse_args()
    print(f"# {torch.cuda.get_device_name(0)}, torch {torch.__version__}")
    t0 = time.perf_counter()
    if "A" in a.parts:
        part_a(553_430_000)
        part_a(16_840_000)
    if "B" in a.parts:
        part_b(a.nets.split(","), a.reps, a.iters)
    print(f"# {time.perf_counter() - t0:.0f} s", flush=True)
    if "C" in a.parts:
        part_c(a.local_nets.split(","), a.reps, a.iters)
    if "D" in a.parts:
        part_d()
    if "E" in a.parts:
        part_e(a.reps)
    if "F" in a.parts:
        part_f(a.reps)
    print(f"# {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
