"""Real ``torch.nn.parallel.DistributedDataParallel`` over a network's parameter shapes, the
reference the ``ddp`` schedule is held to (tests/test_ddp_buckets.py compares the buckets,
benchmarks/ddp_vs_real.py the all-reduce time): a module whose parameters have the network's
shapes and whose backward produces their gradients last parameter first, and the buckets DDP
rebuilt after its first iteration. Not used by a measurement."""

import os

import torch
import torch.distributed as dist
from torch import nn


class ShapesModule(nn.Module):
    """One parameter per array, in the network's order. The forward adds one element of each
    parameter to a running sum, in order, so autograd reaches the last parameter first and every
    gradient becomes ready one after another, last to first, as a network's backward does."""

    def __init__(self, shapes, dtype=torch.float32):
        super().__init__()
        self.params = nn.ParameterList(nn.Parameter(torch.empty(shape, dtype=dtype))
                                       for _, shape in shapes)

    def forward(self, x):
        for p in self.params:
            x = x + p.view(-1)[:1].float()
        return x


def no_all_reduce(state, bucket):
    """A comm hook that leaves each bucket as it is: the bucket plan is DDP's own either way,
    and the test needs no data moved."""
    future = torch.futures.Future()
    future.set_result(bucket.buffer())
    return future


def rebuilt_buckets(shapes, bucket_cap_mb, dtype=torch.float16) -> tuple[list[int],
                                                                         list[list[int]]]:
    """DDP's buckets from its second iteration on: (sizes in bytes, parameter indices of each
    bucket in DDP's order), for ``bucket_cap_mb`` (None: DDP's default) and parameters of
    ``dtype`` (float16 by default: half the memory and copying of float32, the same rule)."""
    model = ShapesModule(shapes, dtype)
    ddp = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=bucket_cap_mb,
                                              init_sync=False, gradient_as_bucket_view=True)
    ddp.register_comm_hook(None, no_all_reduce)
    for _ in range(3):                  # DDP rebuilds its buckets at the second forward and logs
        # them at the third
        ddp(torch.zeros(1)).sum().backward()
    data = ddp._get_ddp_logging_data()
    sizes = [int(s) for s in str(data["rebuilt_bucket_sizes"]).split(",")]
    members = [[int(i) for i in bucket.split()]
               for bucket in str(data["rebuilt_per_bucket_param_indices"]).split(",")]
    del ddp, model
    return sizes, members


def run_pair(rank: int, port: int, jobs, results) -> None:
    """Rank ``rank`` of two Gloo processes: every (label, shapes, cap) of ``jobs`` through real
    DDP; rank 0 puts (label, sizes, members) into ``results``."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    try:
        for label, shapes, cap in jobs:
            sizes, members = rebuilt_buckets(shapes, cap)
            if rank == 0:
                results.put((label, sizes, members))
    except BaseException as exc:
        results.put(("failed", repr(exc), []))
        raise
    finally:
        dist.destroy_process_group()
