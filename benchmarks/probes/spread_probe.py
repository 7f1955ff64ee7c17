"""Why the run medians of one GPU's small `device --gpus 0,0` graphs and of `local --gpus 0` spread
from run to run (issue 17's stability target), one probe per hypothesis:

A. `device --gpus 0,0 --launch graph` on the small networks, rounds alternating over the networks:
   per round a *fresh* session (new buffers and a new graph, as every gpu_bench run) and a *kept*
   session (made once per network: the same addresses and the same graph every round). Each run
   times 50 steps after 20 warm-up steps exactly as bandwidth/measurement/protocol.py (prepare, synchronize,
   perf_counter around step + synchronize, error check after each), and beside the host clock the
   GPU time of the step by CUDA events. Printed: run medians (GB/s, busbw) of each kind, their
   spread, and the buffers' addresses of the fresh runs. If kept runs are steady and fresh ones
   spread, where the buffers land (L2 partitions, 50 MB) decides; if the event times are steady
   and the host clock's are not, the host's wake-up decides; if both spread alike, the GPU does
   (clocks: the nvidia-smi log beside this one).
B. `local --gpus 0` on three networks, rounds alternating: per round the duplex probe with buffers
   kept for the whole probe, the library's duplex probe (fresh pinned buffers), a fresh local
   session, a kept one, and a kept one with 4 x the iterations; every run's ratio to the duplex
   probe (kept buffers) taken right before it.
C. the small graphs again, kept sessions: the host time to issue a replay, the GPU time with the
   launch hidden behind a spin kernel, bursts of 10 replays, and a fixed host loop per round.
D. local on vgg: runs of 18 iterations (gpu_bench's) against runs of 250 (about 3 s).

    PYTHONPATH=$PWD python benchmarks/probes/spread_probe.py [--rounds 6] [--parts AB]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from bandwidth.ceiling.host import duplex_host_gbps
from bandwidth.config.options import Config
from bandwidth.processes.group import LocalGroup
from bandwidth.run import make_plan
from bandwidth.measurement.session import Session

SMALL = ["mobilenet", "googlenet", "inception-bn", "mlp"]
LOCAL = ["lenet", "bert-base", "vgg"]
T0 = time.time()


def stamp() -> str:
    return f"{time.time() - T0:7.2f}"


def session_for(config: Config):
    plan = make_plan(config)
    c = plan.config
    s = Session(c.kv_store, plan.shapes, plan.devices, list(range(plan.devices.n)), LocalGroup(),
                dtype=c.dtype, optimizer=c.optimizer, seed=c.seed, chunk_mb=c.chunk_mb,
                check=True, launch=plan.launch, owners=c.owners)
    return plan, s


def timed(session, plan, iterations: int, warmup: int) -> dict:
    """bandwidth/protocol.measure's loop, with CUDA events beside the host clock."""
    wall, gpu = [], []
    start_ev, end_ev = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for b in range(warmup + iterations):
        session.prepare()
        session.group.barrier()
        session.synchronize()
        start = time.perf_counter()
        start_ev.record()
        session.step()
        end_ev.record()
        session.synchronize()
        seconds = time.perf_counter() - start
        session.error()
        if b >= warmup:
            wall.append(seconds)
            gpu.append(start_ev.elapsed_time(end_ev) / 1e3)
    factor = plan.store_cls.bus_factor(plan.devices.n)
    nbytes = plan.nbytes

    def gbps(t):
        return nbytes * (factor if factor else 1.0) / t / 1e9

    return {"wall": gbps(statistics.median(wall)), "gpu": gbps(statistics.median(gpu)),
            "wall_iqr": statistics.quantiles(wall, n=4)[2] / statistics.quantiles(wall, n=4)[0]}


def spread(values):
    return max(values) / min(values)


def row(label, values):
    return f"{label:<34}" + " ".join(f"{v:7.1f}" for v in values) + f"   spread {spread(values):.3f}"


def part_a(rounds: int) -> None:
    print("\n== A. device --gpus 0,0 graph: run medians (GB/s busbw), fresh vs kept sessions, "
          "host clock (wall) vs CUDA events (gpu)", flush=True)
    kept = {}
    for name in SMALL:
        config = Config(network=name, kv_store="device", gpus=(0, 0), launch="graph",
                        num_batches=50, warmup=20, reference=False)
        kept[name] = (config,) + session_for(config)
    got = {(n, k): [] for n in SMALL for k in ("fresh", "kept")}
    addresses = {n: [] for n in SMALL}
    for r in range(rounds):
        for name in SMALL:
            config, plan, s = kept[name]
            fplan, fresh = session_for(config)
            addresses[name].append(tuple(rep.grads.data_ptr() for rep in fresh.replicas))
            got[(name, "fresh")].append(timed(fresh, fplan, 50, 20))
            fresh.close()
            del fresh
            torch.cuda.empty_cache()
            got[(name, "kept")].append(timed(s, plan, 50, 20))
            time.sleep(0.2)
        print(f"# {stamp()} s: round {r + 1} done", flush=True)
    for name in SMALL:
        for kind in ("fresh", "kept"):
            runs = got[(name, kind)]
            print(row(f"{name} {kind} wall", [x["wall"] for x in runs]))
            print(row(f"{name} {kind} gpu", [x["gpu"] for x in runs]))
            print(f"{'':<34}within-run q3/q1 of the wall times: "
                  + " ".join(f"{x['wall_iqr']:.3f}" for x in runs))
        print(f"{name} fresh addresses (MiB offset of grads, replica 0/1; mod 64 MiB): "
              + "; ".join("/".join(f"{(a >> 20) % 64}" for a in pair)
                          for pair in addresses[name]))
    for name in SMALL:
        kept[name][2].close()
    torch.cuda.empty_cache()


class KeptDuplex:
    """The duplex probe of bandwidth.ceiling.host with its buffers made once."""

    def __init__(self, nbytes=256 * 2**20):
        self.nbytes = nbytes
        self.host_in = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
        self.host_out = torch.ones(nbytes, dtype=torch.uint8, pin_memory=True)
        self.dev_in = torch.ones(nbytes, dtype=torch.uint8, device="cuda:0")
        self.dev_out = torch.empty(nbytes, dtype=torch.uint8, device="cuda:0")
        self.down, self.up = torch.cuda.Stream(), torch.cuda.Stream()

    def __call__(self, repeats=5, burst=5) -> float:
        seconds = []
        for i in range(repeats + 1):
            torch.cuda.synchronize()
            start = time.perf_counter()
            for _ in range(burst):
                with torch.cuda.stream(self.down):
                    self.host_in.copy_(self.dev_in, non_blocking=True)
                with torch.cuda.stream(self.up):
                    self.dev_out.copy_(self.host_out, non_blocking=True)
            torch.cuda.synchronize()
            if i:
                seconds.append((time.perf_counter() - start) / burst)
        return self.nbytes / min(seconds) / 1e9


def part_b(rounds: int) -> None:
    print("\n== B. local --gpus 0: run medians (algbw GB/s) and each run's ratio to the kept duplex "
          "probe right before it", flush=True)
    probe = KeptDuplex()
    kept, configs = {}, {}
    for name in LOCAL:
        nbytes = make_plan(Config(network=name, kv_store="local", gpus=(0,))).nbytes
        iters = max(3, min(50, int(10e9 // nbytes)))
        configs[name] = iters
        config = Config(network=name, kv_store="local", gpus=(0,), num_batches=iters,
                        warmup=2, reference=False)
        kept[name] = (config,) + session_for(config)
    kinds = ("fresh", "kept", "kept 4x")
    got = {(n, k): [] for n in LOCAL for k in kinds}
    probes = {(n, k): [] for n in LOCAL for k in kinds}
    lib_probe, kept_probe = [], []
    for r in range(rounds):
        lib_probe.append(duplex_host_gbps(0, 256 * 2**20))
        kept_probe.append(probe())
        for name in LOCAL:
            config, plan, s = kept[name]
            iters = configs[name]
            probes[(name, "fresh")].append(probe())
            fplan, fresh = session_for(config)
            got[(name, "fresh")].append(timed(fresh, fplan, iters, 2)["wall"])
            fresh.close()
            del fresh
            torch.cuda.empty_cache()
            probes[(name, "kept")].append(probe())
            got[(name, "kept")].append(timed(s, plan, iters, 2)["wall"])
            probes[(name, "kept 4x")].append(probe())
            got[(name, "kept 4x")].append(timed(s, plan, 4 * iters, 2)["wall"])
        print(f"# {stamp()} s: round {r + 1} done", flush=True)
    print(row("duplex, library (fresh buffers)", lib_probe))
    print(row("duplex, kept buffers", kept_probe))
    for name in LOCAL:
        for kind in kinds:
            runs, before = got[(name, kind)], probes[(name, kind)]
            print(row(f"{name} {kind}", runs))
            print(row(f"{name} {kind} / probe before", [100 * a / b for a, b in zip(runs, before)])
                  + "  (% of the probe)")
    for name in LOCAL:
        kept[name][2].close()


def host_loop_us() -> float:
    """A fixed piece of host work (pure Python), to see whether the host itself slows down."""
    start = time.perf_counter()
    x = 0
    for i in range(200000):
        x += i
    return 1e6 * (time.perf_counter() - start)


def part_c(rounds: int) -> None:
    print("\n== C. device --gpus 0,0 graph, kept sessions: per run the protocol's wall median, "
          "the host time to issue one replay (us), the GPU time with the launch hidden behind a "
          "spin kernel (events), a burst of 10 replays between two synchronisations (wall / 10), "
          "and a fixed host loop (us)", flush=True)
    names = SMALL[:3]
    kept = {}
    for name in names:
        config = Config(network=name, kv_store="device", gpus=(0, 0), launch="graph",
                        num_batches=50, warmup=20, reference=False)
        kept[name] = session_for(config)
    cols = ("wall", "issue_us", "hidden", "burst10")
    got = {(n, c): [] for n in names for c in cols}
    loop = []
    start_ev, end_ev = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for r in range(rounds):
        loop.append(host_loop_us())
        for name in names:
            plan, s = kept[name]
            nbytes = plan.nbytes * plan.store_cls.bus_factor(plan.devices.n)
            wall, issue, hidden = [], [], []
            for b in range(70):
                s.prepare()
                s.synchronize()
                start = time.perf_counter()
                s.step()
                issued = time.perf_counter()
                s.synchronize()
                done = time.perf_counter()
                s.error()
                if b >= 20:
                    wall.append(done - start)
                    issue.append(issued - start)
            for b in range(50):
                s.prepare()
                s.synchronize()
                torch.cuda._sleep(200000)          # ~100 us of spin: the replay is queued behind it
                start_ev.record()
                s.step()
                end_ev.record()
                s.synchronize()
                s.error()
                hidden.append(start_ev.elapsed_time(end_ev) / 1e3)
            bursts = []
            for b in range(12):
                s.prepare()
                s.synchronize()
                start = time.perf_counter()
                for _ in range(10):
                    s.step()
                s.synchronize()
                bursts.append((time.perf_counter() - start) / 10)
            s.error()
            got[(name, "wall")].append(nbytes / statistics.median(wall) / 1e9)
            got[(name, "issue_us")].append(1e6 * statistics.median(issue))
            got[(name, "hidden")].append(nbytes / statistics.median(hidden) / 1e9)
            got[(name, "burst10")].append(nbytes / statistics.median(bursts[2:]) / 1e9)
            time.sleep(0.2)
        print(f"# {stamp()} s: round {r + 1} done", flush=True)
    print(row("host loop (us)", loop))
    for name in names:
        for c in cols:
            print(row(f"{name} {c}", got[(name, c)]))
    for name in names:
        kept[name][1].close()
    torch.cuda.empty_cache()


def part_d(rounds: int) -> None:
    print("\n== D. local --gpus 0 on vgg, kept session: runs of the default 18 iterations against "
          "runs of 250 (about 3 s), each after the kept duplex probe (GB/s; % of that probe)",
          flush=True)
    probe = KeptDuplex()
    config = Config(network="vgg", kv_store="local", gpus=(0,), num_batches=18, warmup=2,
                    reference=False)
    plan, s = session_for(config)
    got = {k: [] for k in ("18", "250")}
    pct = {k: [] for k in got}
    for r in range(rounds):
        for k in got:
            before = probe()
            got[k].append(timed(s, plan, int(k), 2)["wall"])
            pct[k].append(100 * got[k][-1] / before)
        print(f"# {stamp()} s: round {r + 1} done", flush=True)
    for k in got:
        print(row(f"vgg {k} iterations", got[k]))
        print(row(f"vgg {k} iterations / probe (%)", pct[k]))
    s.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--parts", default="AB")
    args = parser.parse_args()
    print(f"# {torch.cuda.get_device_name(0)}, torch {torch.__version__}, {args.rounds} rounds")
    if "A" in args.parts:
        part_a(args.rounds)
    if "B" in args.parts:
        part_b(args.rounds)
    if "C" in args.parts:
        part_c(args.rounds)
    if "D" in args.parts:
        part_d(args.rounds)
    print(f"# {stamp()} s")


if __name__ == "__main__":
    main()
