"""The raw transport under the parameter-server modes: torch.distributed (Gloo) send and receive of
the same bytes between a worker and a server, both directions at once, nothing else.

    python launch.py -n 1 -s 1 python benchmarks/raw_sendrecv.py --bytes 102015648 --iters 10

Rank 0 (the worker) prints the median time and GB/s each way; with --json it writes them.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from datetime import timedelta

import torch
import torch.distributed as dist

from bandwidth.launch.contract import Role, join_store


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bytes", type=int, required=True)
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--message-bytes", type=int, default=8 * 10**6,
                        help="cut each direction into messages of this size, all in flight, as "
                             "the parameter-server modes do (default 8 MB)")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    role = Role.from_environ(os.environ)
    dist.init_process_group("gloo", store=join_store(role), rank=role.rank,
                            world_size=role.world_size, timeout=timedelta(seconds=120))
    out = torch.ones(args.bytes // 4)
    back = torch.empty_like(out)
    peer = 1 - role.rank
    times = []
    for i in range(args.warmup + args.iters):
        dist.barrier()
        start = time.perf_counter()
        step = max(1, args.message_bytes // 4)
        works = [dist.isend(out[i:i + step], dst=peer, tag=k)
                 for k, i in enumerate(range(0, out.numel(), step))]
        works += [dist.irecv(back[i:i + step], src=peer, tag=k)
                  for k, i in enumerate(range(0, back.numel(), step))]
        for work in works:
            work.wait()
        if i >= args.warmup:
            times.append(time.perf_counter() - start)
    seconds = statistics.median(times)
    if role.rank == 0:
        figures = {"bytes": args.bytes, "seconds": seconds, "gbps": args.bytes / seconds / 1e9}
        print(f"raw send+recv of {args.bytes / 1e6:.2f} MB each way: {seconds * 1e3:.2f} ms, "
              f"{figures['gbps']:.3f} GB/s each way")
        if args.json:
            with open(args.json, "w") as f:
                json.dump(figures, f)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
