"""Join the launcher's rendezvous and all-reduce ``rank + 1`` over Gloo; write the sum.

Usage (under the launcher): allreduce.py OUTDIR [store|env] [--skip-rank R]
``store``: join with environment.join_store; ``env``: init_process_group("gloo") via env://.
``--skip-rank R``: rank R never joins (it sleeps), to test the rendezvous deadline.
"""

import argparse
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist

from bandwidth.launch.contract.environment import Role, join_store

parser = argparse.ArgumentParser()
parser.add_argument("outdir")
parser.add_argument("how", nargs="?", default="store", choices=["store", "env"])
parser.add_argument("--skip-rank", type=int, default=-1)
args = parser.parse_args()
role = Role.from_environ(os.environ)
if role.rank == args.skip_rank:
    time.sleep(600)
if args.how == "store":
    store = join_store(role, timeout_s=60)
    dist.init_process_group("gloo", store=store, rank=role.rank, world_size=role.world_size)
else:
    dist.init_process_group("gloo")
value = torch.tensor([float(role.rank + 1)])
dist.all_reduce(value)
Path(args.outdir, f"rank-{role.rank}.txt").write_text(f"{value.item():g}")
dist.destroy_process_group()
