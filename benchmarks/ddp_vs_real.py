"""The ddp schedule's exchange against real DistributedDataParallel's all-reduce of the same
buckets, on CPU devices (Gloo, two processes), in one run (issue 26's target: within 10 %).

Each rank builds the toolkit's ``nccl`` mode under ``--schedule ddp`` (exchange alone: no
compute) and two real DDP models over parameters of the network's shapes
(bandwidth/schedules/realddp.py): one that all-reduces its buckets (DDP's default, no hook) and
one whose comm hook moves nothing. DDP's all-reduce time is the difference of their backward
times (what the all-reduce adds to a backward that is otherwise the same), the toolkit's is its
step. The rounds interleave the three, so that each sees the host as the others do; medians.
First it checks that DDP's rebuilt buckets are the schedule's.

    PYTHONPATH=. flock /tmp/heavy.lock python benchmarks/ddp_vs_real.py --network resnet \
        --num-layers 50
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

import networks
from bandwidth.hardware.devices import DeviceSet
from bandwidth.measurement.session import Session
from bandwidth.processes.group import DistGroup
from bandwidth.schedules.ddp import Ddp
from bandwidth.schedules.realddp import ShapesModule, no_all_reduce


def timed(fn) -> float:
    dist.barrier()
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def rank_main(rank: int, port: int, args, out) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    torch.set_num_threads(1)
    shapes = networks.get_shapes(args.network, num_layers=args.num_layers)
    schedule = Ddp(shapes, 4)                       # DDP's defaults: 25 MiB, the first 1 MiB
    session = Session("nccl", shapes, DeviceSet("cpu", (0, 1)), [rank],
                      DistGroup(torch.device("cpu")), dtype="float32", optimizer="none", seed=0,
                      chunk_mb=None, replicas=2, schedule=schedule, check=False)
    real = nn.parallel.DistributedDataParallel(ShapesModule(shapes), init_sync=False,
                                               gradient_as_bucket_view=True)
    quiet = nn.parallel.DistributedDataParallel(ShapesModule(shapes), init_sync=False,
                                                gradient_as_bucket_view=True)
    quiet.register_comm_hook(None, no_all_reduce)
    x = torch.zeros(1)
    for _ in range(3):                               # DDP rebuilds its buckets, then logs them
        real(x).sum().backward()
        quiet(x).sum().backward()
    rebuilt = str(real._get_ddp_logging_data()["rebuilt_bucket_sizes"])
    ours = ", ".join(str(p.nbytes) for p in reversed(schedule.parts))
    times = {"schedule": [], "ddp": [], "ddp_no_comm": []}
    for _ in range(args.rounds):
        session.prepare()
        times["schedule"].append(timed(session.step))
        loss = real(x).sum()
        times["ddp"].append(timed(loss.backward))
        loss = quiet(x).sum()
        times["ddp_no_comm"].append(timed(loss.backward))
    session.close()
    if rank == 0:
        out.put({"rebuilt": rebuilt, "ours": ours, "buckets": len(schedule.parts),
                 **{k: statistics.median(v) for k, v in times.items()}})
    dist.destroy_process_group()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--network", default="resnet")
    parser.add_argument("--num-layers", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=rank_main, args=(r, port, args, out)) for r in range(2)]
    for p in procs:
        p.start()
    result = out.get(timeout=1200)
    for p in procs:
        p.join(timeout=60)
    same = result["rebuilt"] == result["ours"]
    ddp = result["ddp"] - result["ddp_no_comm"]
    print(f"# {args.network}-{args.num_layers}, float32, 2 Gloo processes on CPU devices, "
          f"{result['buckets']} buckets (25 MiB, first 1 MiB); rebuilt buckets equal: {same}")
    print(f"# load average before/after: {LOAD_BEFORE} / {os.getloadavg()}")
    print(f"{'what':42} {'median s':>10}")
    print(f"{'toolkit ddp schedule, exchange alone':42} {result['schedule']:10.4f}")
    print(f"{'real DDP backward with its all-reduce':42} {result['ddp']:10.4f}")
    print(f"{'real DDP backward, comm hook moving nothing':42} {result['ddp_no_comm']:10.4f}")
    print(f"{'real DDP all-reduce (difference)':42} {ddp:10.4f}")
    print(f"ratio toolkit / real DDP all-reduce: {result['schedule'] / ddp:.3f}")
    return 0 if same else 1


LOAD_BEFORE = os.getloadavg()

if __name__ == "__main__":
    sys.exit(main())
