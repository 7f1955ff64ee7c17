"""``local``: reduce on the CPU, as MXNet's CommCPU.

Every device's gradients are copied into pinned host buffers, summed there by torch's CPU threads,
the optimizer (if any) runs on the host copy of the weights, and the result is copied back to every
device. The buffer is cut into chunks so that the copies of chunk c+1 overlap the summation of
chunk c and the copies back of chunk c-1: the step is bound by the slowest of PCIe down, CPU
summation and PCIe up rather than by their sum.
"""

from __future__ import annotations

import torch

from bandwidth import devices as dev
from bandwidth.kvstores.base import KVStore
from bandwidth.layout import chunk_ranges

# Small enough that copies and summation overlap well, large enough that per-chunk costs vanish.
DEFAULT_CHUNK_BYTES = 32 * 10**6


class LocalStore(KVStore):
    name = "local"
    summary = "copy to pinned host memory, sum on the CPU (threads), optimizer on the CPU, copy back"
    bound = "PCIe (host<->device copies) and CPU summation"
    bound_on_cpu = "host memory copies and CPU summation"
    bound_kind = "host path"

    def __init__(self, replicas, layout, optimizer, group, chunk_elements, cpu_threads=None):
        super().__init__(replicas, layout, optimizer, group, chunk_elements, cpu_threads)
        if cpu_threads is not None:
            torch.set_num_threads(cpu_threads)
        numel = layout.numel
        first = replicas[0].grads
        pinned = first.is_cuda
        host = torch.device("cpu")
        self.host_in = [dev.empty(numel, first.dtype, host, pinned) for _ in replicas]
        self.host_sum = dev.empty(numel, first.dtype, host, pinned)
        self.host_weights = None
        if optimizer is not None:
            self.host_weights = dev.empty(numel, first.dtype, host, pinned)
            self.host_weights.zero_()
        self.chunks = chunk_ranges(0, numel, chunk_elements
                                   or DEFAULT_CHUNK_BYTES // first.element_size())
        self.down = [dev.new_stream(r.device) for r in replicas]
        self.up = [dev.new_stream(r.device) for r in replicas]
        self.arrived = [[dev.new_event(r.device) for _ in self.chunks] for r in replicas]

    def notes(self) -> list[str]:
        return [f"CPU summation with {torch.get_num_threads()} threads in "
                f"{len(self.chunks)} chunk(s)"]

    def step(self) -> None:
        replicas = self.replicas
        for c, (s, e) in enumerate(self.chunks):
            for d, replica in enumerate(replicas):
                with dev.on_streams(self.down[d]):
                    self.host_in[d][s:e].copy_(replica.grads[s:e], non_blocking=True)
                dev.record(self.arrived[d][c], self.down[d])
        for c, (s, e) in enumerate(self.chunks):
            for d in range(len(replicas)):
                dev.host_wait(self.arrived[d][c])
            total = self.host_sum[s:e]
            if len(replicas) == 1:
                total.copy_(self.host_in[0][s:e])
            else:
                torch.add(self.host_in[0][s:e], self.host_in[1][s:e], out=total)
                for more in self.host_in[2:]:
                    total.add_(more[s:e])
            source = total
            if self.optimizer is not None:
                self.optimizer.apply(self.host_weights[s:e], total)
                source = self.host_weights[s:e]
            for d, replica in enumerate(replicas):
                with dev.on_streams(self.up[d]):
                    replica.outputs[s:e].copy_(source, non_blocking=True)
