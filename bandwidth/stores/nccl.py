"""``nccl``: one all-reduce of every array across the devices, one process per device.

The modern replacement of MXNet's root-based nccl store: the arrays are views of one flat bucket
per device, so a single torch.distributed all-reduce (NCCL on GPUs) carries all of them; with an
optimizer each device then applies it to its own copy of the weights, as data-parallel training
does. The backward pass would write the gradients into the bucket; ``prepare`` plays that part,
untimed. On CPU devices Gloo's all-reduce stands in for NCCL.

On GPUs the step is captured once as a CUDA graph (``capture``: NCCL collectives can be captured
once the communicator exists) and replayed, so that the host's launch time does not pace it;
``--launch eager`` issues the all-reduce from the host every step, and the default (``auto``,
bandwidth.measurement.session) keeps whichever of the two a few trial steps show faster.
"""

from __future__ import annotations

import functools
import warnings
from dataclasses import replace

import torch
import torch.distributed as dist

from bandwidth.formulas import allreduce_factor
from bandwidth.stores.base import KVStore
from bandwidth.stores.costs import Costs
from bandwidth.stores.traits import Traits


class NcclCosts(Costs):
    def extra_bytes_per_device(self, nbytes, n, optimizer):
        return nbytes if optimizer else 0


class NcclStore(KVStore):
    name = "nccl"
    traits = Traits(
        summary=("all-reduce of one flat bucket through torch.distributed (NCCL; Gloo on CPU "
                 "devices)"),
        bound="flat all-reduce of the same bytes",
        bound_kind="flat all-reduce",
        process_per_device=True,
        graph_capable=True,
        alone_moves_nothing="one rank: an all-reduce over one process moves no byte",
        prepared_steps=True)        # the all-reduce sums the bucket in place
    costs = NcclCosts()

    @classmethod
    def unavailable(cls, devices, dtype):
        if devices.shares_gpu:
            return (f"--gpus {','.join(map(str, devices.ids))} lists a GPU twice, and NCCL cannot "
                    "hold one GPU twice in a communicator (one process per device); use --kv-store "
                    "device or local for replicas that share a GPU")
        if not dist.is_available():
            return "this torch build has no torch.distributed"
        if devices.is_cuda and not dist.is_nccl_available():
            return "this torch build has no NCCL; use --kv-store device or local"
        if not devices.is_cuda and not dist.is_gloo_available():
            return "this torch build has no Gloo, which the nccl mode needs on CPU devices"
        return None

    def __init__(self, replicas, layout, optimizer, group, chunk_elements, cpu_threads=None):
        super().__init__(replicas, layout, optimizer, group, chunk_elements, cpu_threads)
        (replica,) = replicas
        self.replica = replica
        if optimizer is None:
            self.bucket = replica.outputs          # the pulled value is the sum itself
        else:
            self.bucket = torch.empty_like(replica.grads)
            replica.outputs.zero_()                # outputs hold the weights

    def notes(self):
        backend = dist.get_backend() if dist.is_initialized() else "nccl"
        if self.replica.device.type == "cpu":
            return [f"CPU devices: Gloo all-reduce stands in for NCCL ({self.group.size} processes)"]
        return [f"{backend} all-reduce, {self.group.size} processes, one per GPU"]

    def prepare(self):
        self.bucket.copy_(self.replica.grads)

    def step(self):
        dist.all_reduce(self.bucket)
        if self.optimizer is not None:
            self.optimizer.apply(self.replica.outputs, self.bucket)

    def start(self):
        return functools.partial(self._finish, dist.all_reduce(self.bucket, async_op=True))

    def _finish(self, work) -> None:
        work.wait()
        if self.optimizer is not None:
            self.optimizer.apply(self.replica.outputs, self.bucket)

    def capture(self):
        device = self.replica.device
        # Warm-up outside the graph: the communicator and its kernels exist before capture. The
        # bucket is rewritten by every prepare; the weights (outputs) are not touched.
        dist.all_reduce(self.bucket)
        torch.cuda.synchronize(device)
        graph = torch.cuda.CUDAGraph()
        stream = torch.cuda.Stream(device=device)
        stream.wait_stream(torch.cuda.current_stream(device))
        with warnings.catch_warnings():
            # One rank: NCCL's all-reduce issues no kernel, so torch warns that the graph is
            # empty; the summary already says that one rank moves nothing.
            warnings.filterwarnings("ignore", message="The CUDA Graph is empty")
            with torch.cuda.graph(graph, stream=stream):
                self.record_step()
        torch.cuda.current_stream(device).wait_stream(stream)
        torch.cuda.synchronize(device)
        return graph

    def record_step(self):
        self.step()       # the all-reduce (and the optimizer) on the current stream


class DistNcclCosts(NcclCosts):
    traffic_words = ("sent", "received")

    def counted_devices(self, local, total):
        return total

    def network_nbytes(self, nbytes, local, total):
        return local * allreduce_factor(total) * nbytes

    def traffic_rule(self, local, total):
        return (f"the all-reduce moves 2(n-1)/n x S into and out of each device per step (n = "
                f"{total} devices in the job), so a worker of {local} devices sends and receives "
                f"{local} x 2(n-1)/n x S; bytes between a worker's own devices count too "
                "(busbw's accounting)")


class DistNcclStore(NcclStore):
    """``dist_nccl``: every GPU of every worker in one NCCL all-reduce (what Horovod and DDP do);
    Gloo on CPU devices. Each worker started by launch.py starts one process per device, and all
    of them meet at the launcher's rendezvous. Its ceiling is the nccl mode's: one flat all-reduce
    of the same bytes over the same processes, in the same run."""

    name = "dist_nccl"
    traits = replace(
        NcclStore.traits,
        summary=("one all-reduce across every device of every worker (NCCL; Gloo on CPU "
                 "devices), one process per device"),
        bound="the network between hosts (and the flat all-reduce of the same bytes)",
        distributed=True,
        graph_capable=False)    # issued eagerly: its graph path is not yet tested across hosts
    costs = DistNcclCosts()

    def __init__(self, replicas, layout, optimizer, group, chunk_elements, cpu_threads=None,
                 cluster=None):
        super().__init__(replicas, layout, optimizer, group, chunk_elements, cpu_threads)
