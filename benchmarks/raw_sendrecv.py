"""The raw transport under the parameter-server modes, for W workers x S servers: every worker
sends each server its share of the bytes as the modes do (a contiguous run per server, cut into
messages of at most --message-bytes, all in flight at once) and each server sends every message
straight back to the worker it came from as soon as it has arrived; torch.distributed (Gloo)
isend/irecv, nothing else (no summation, no copies to or from devices).

    PYTHONPATH=$PWD python launch.py -n 1 -s 1 python benchmarks/raw_sendrecv.py --bytes 102015648
    --iters 10
    PYTHONPATH=$PWD python launch.py -n 2 -s 2 python benchmarks/raw_sendrecv.py --network resnet
    --num-layers 200

With --network the bytes are split over the servers as the modes split that network (MXNet's
rule, bandwidth.stores.dist.ps_layout); with --bytes evenly. Ranks as launch.py numbers them:
the workers, then the servers. Worker 0 prints each worker's median time and GB/s each way (the
bytes it sends per second, = bytes it receives), the slowest worker's figure (what a synchronous
step waits for), and with --json writes them ("seconds" and "gbps": the slowest worker's, as
before for one worker; "worker_seconds", "worker_gbps": each worker's).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

import networks
from bandwidth.arrays.layout import chunk_ranges
from bandwidth.launch.contract.environment import SERVER, WORKER, ContractError, Role, join_store
from bandwidth.processes.group import all_gather_json
from bandwidth.stores.dist import ps_layout, split_evenly


def parse(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--bytes", type=int, help="bytes each worker sends (and receives) per step")
    what.add_argument("--network", help="the bytes and per-server split of this network")
    parser.add_argument("--num-layers", type=int, default=None)
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--message-bytes", type=int, default=8 * 10**6,
                        help="largest message, all in flight at once (default 8 MB, the modes')")
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    if args.bytes is not None and args.bytes < 4:
        parser.error(f"--bytes must be at least 4; got {args.bytes}")
    if args.iters < 1 or args.warmup < 0 or args.message_bytes < 4:
        parser.error("--iters must be >= 1, --warmup >= 0 and --message-bytes >= 4")
    return args


def server_ranges(args, num_servers: int) -> list[tuple[int, int]]:
    """[start, stop) float32 elements of each server's share."""
    if args.network:
        shapes = networks.get_shapes(args.network, num_layers=args.num_layers)
        return ps_layout(shapes, num_servers, 1, by_owner=False)[1]
    ranges, cursor = [], 0
    for length in split_evenly(args.bytes // 4, num_servers):
        ranges.append((cursor, cursor + length))
        cursor += length
    return ranges


def exchange(role: Role, plan, buffers: dict) -> float:
    """One step: the worker's sends and receives, or the server's echo; returns seconds."""
    workers = role.job.num_workers
    start = time.perf_counter()
    if role.name == WORKER:
        out, back = buffers["out"], buffers["back"]
        # Receives first, so that every answer has somewhere to land the moment it comes.
        works = [dist.irecv(back[s:e], src=workers + server, tag=tag)
                 for tag, (server, s, e) in enumerate(plan)]
        works += [dist.isend(out[s:e], dst=workers + server, tag=tag)
                  for tag, (server, s, e) in enumerate(plan)]
        for work in works:
            work.wait()
    else:
        inbox = buffers["inbox"]
        mine = [(tag, s, e) for tag, (server, s, e) in enumerate(plan) if server == role.task_id]
        arriving = [(w, tag, s, e, dist.irecv(inbox[w][s:e], src=w, tag=tag))
                    for tag, s, e in mine for w in range(workers)]
        answers = []
        for w, tag, s, e, work in arriving:
            work.wait()
            answers.append(dist.isend(inbox[w][s:e], dst=w, tag=tag))
        for work in answers:
            work.wait()
    return time.perf_counter() - start


def main(argv=None) -> int:
    args = parse(argv)
    try:
        role = Role.from_environ(os.environ)
    except ContractError as exc:
        print(f"raw_sendrecv.py: run under launch.py ({exc})", file=sys.stderr)
        return 2
    if role.name not in (WORKER, SERVER):
        return 0                                   # a scheduler has nothing to do here
    if role.job.num_servers < 1:
        print("raw_sendrecv.py: needs at least one server (launch.py -s 1 or more)",
              file=sys.stderr)
        return 2
    dist.init_process_group("gloo", store=join_store(role, args.timeout), rank=role.rank,
                            world_size=role.world_size, timeout=timedelta(seconds=args.timeout))
    try:
        ranges = server_ranges(args, role.job.num_servers)
        numel = ranges[-1][1]
        limit = max(1, args.message_bytes // 4)
        plan = [(server, s, e) for server, (a, b) in enumerate(ranges)
                for s, e in chunk_ranges(a, b, limit)]     # (server, start, stop); index = tag
        buffers = ({"out": torch.ones(numel), "back": torch.empty(numel)} if role.name == WORKER
                   else {"inbox": [torch.empty(numel) for _ in range(role.job.num_workers)]})
        times = []
        for i in range(args.warmup + args.iters):
            dist.barrier()
            seconds = exchange(role, plan, buffers)
            if i >= args.warmup:
                times.append(seconds)
        median = statistics.median(times) if role.name == WORKER else None
        every = all_gather_json(median, role.world_size)     # JSON, never pickle
        if role.rank == 0:
            report(args, role, numel * 4, ranges, every[:role.job.num_workers], len(plan))
        dist.barrier()
    finally:
        dist.destroy_process_group()
    return 0


def report(args, role: Role, nbytes: int, ranges, medians: list[float], count: int) -> None:
    gbps = [nbytes / m / 1e9 for m in medians]
    shares = ", ".join(f"{(b - a) * 4 / 1e6:.2f}" for a, b in ranges)
    print(f"raw send+recv, {role.job.num_workers} worker(s) x {role.job.num_servers} server(s): "
          f"{nbytes / 1e6:.2f} MB each way per worker (per server: {shares} MB), {count} "
          f"messages of at most {args.message_bytes / 1e6:g} MB")
    for w, (m, g) in enumerate(zip(medians, gbps)):
        print(f"  worker {w}: {m * 1e3:.2f} ms, {g:.3f} GB/s each way")
    print(f"  slowest worker: {min(gbps):.3f} GB/s each way; all workers together "
          f"{sum(gbps):.3f} GB/s each way")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"workers": role.job.num_workers, "servers": role.job.num_servers,
                       "bytes": nbytes, "seconds": max(medians), "gbps": min(gbps),
                       "worker_seconds": medians, "worker_gbps": gbps}, f)


if __name__ == "__main__":
    raise SystemExit(main())
