"""``local``: reduce on the CPU, as MXNet's CommCPU.

On GPUs every device's gradients are copied into pinned host buffers, summed there by torch's CPU
threads, the optimizer (if any) runs on the host copy of the weights, and the result is copied
back to every device. The flat buffer is cut into equal chunks whatever the key boundaries (a key
larger than a chunk is split over several, so every chunk and every link direction carries the
same bytes): copies down of chunk c+1 overlap the summation of chunk c and the copies up of chunk
c-1, each direction of PCIe on its own stream, so the step is bound by the slowest of PCIe down,
CPU summation and PCIe up rather than by their sum. With one GPU and no optimizer there is
nothing to sum: each chunk goes back up as soon as it is down, ordered on the GPU by an event, so
the host paces nothing and the step runs at the duplex host path (both directions at once).

On CPU devices the replicas already live in host memory, so nothing is staged: the gradients are
summed straight into the first replica's outputs and copied from there into the others'. By
default that is one call each over the whole buffer: cache-sized tiles (``--chunk-mb``) save one
re-read of the sum from memory, but on a host whose cores are shared every extra call waits for
all of torch's threads to be scheduled, and the few large calls were 3-6 x faster there.
"""

from __future__ import annotations

import torch

from bandwidth.arrays.layout import chunk_ranges
from bandwidth.hardware import devices as dev
from bandwidth.hardware import rawcopy
from bandwidth.stores.base import KVStore
from bandwidth.stores.costs import Costs
from bandwidth.stores.traits import Traits

# GPUs: the buffer in about this many chunks, so that filling and draining the pipeline costs
# about 1/GPU_CHUNKS of a step, each chunk between these sizes: large enough that a copy's fixed
# cost (a few microseconds) vanishes against its transfer, small enough to overlap well.
GPU_CHUNKS = 16
GPU_MIN_CHUNK_BYTES = 2 * 10**6
GPU_MAX_CHUNK_BYTES = 32 * 10**6


def default_chunk_bytes(nbytes: int, on_gpu: bool) -> int:
    """The mode's chunk for a buffer of ``nbytes`` (``--chunk-mb`` overrides it)."""
    if not on_gpu:
        return nbytes                     # CPU devices: one call per operation (module docstring)
    return min(GPU_MAX_CHUNK_BYTES, max(GPU_MIN_CHUNK_BYTES, nbytes // GPU_CHUNKS))


class LocalTraits(Traits):
    def can_capture(self, devices, optimizer: str = "none") -> bool:
        """One GPU without an optimizer: the step is copies ordered by events on the GPU (nothing
        for the host to sum), so it can be captured as a CUDA graph (``LocalStore.capture``)."""
        return devices.is_cuda and devices.n == 1 and optimizer == "none"


class LocalCosts(Costs):
    def staging_bytes(self, nbytes, n, optimizer, on_gpu):
        # GPUs: a pinned host copy per device; CPU devices: nothing staged. With an optimizer the
        # host weights, and on CPU devices one chunk of scratch (by default the whole buffer).
        if on_gpu:
            return (n + 1) * nbytes if optimizer else n * nbytes
        return 2 * nbytes if optimizer else 0


class LocalStore(KVStore):
    name = "local"
    traits = LocalTraits(
        summary=("copy to pinned host memory, sum on the CPU (threads), optimizer on the CPU, "
                 "copy back"),
        summary_on_cpu=("sum the replicas where they are in host memory (CPU threads), optimizer "
                        "on the CPU, copy the result to every replica"),
        one_gpu_measures="the host path",      # one GPU: algbw against the duplex host path
        bound="PCIe (host<->device copies, both directions at once) and CPU summation",
        bound_on_cpu="host memory: every gradient read and every output written once",
        bound_kind="host path",
        # One GPU: ``--launch graph`` captures the step (``capture``), but ``auto`` stays eager.
        # The eager step issues each copy with a few us of host time (rawcopy), well inside a
        # chunk's transfer time, and a graph launch costs about 3 us of host time per
        # host<->device copy node, so the graph gained nothing on an H100 (16.8-77 MB: within the
        # runs' spread, benchmarks/probes/graph_gap.py at 7d3c61a).
        auto_graph=False)
    costs = LocalCosts()

    def __init__(self, replicas, layout, optimizer, group, chunk_elements, cpu_threads=None):
        super().__init__(replicas, layout, optimizer, group, chunk_elements, cpu_threads)
        if cpu_threads is not None:
            torch.set_num_threads(cpu_threads)
        numel = layout.numel
        first = replicas[0].grads
        self.on_gpu = first.is_cuda
        element = first.element_size()
        chunk = chunk_elements or max(1, default_chunk_bytes(numel * element, self.on_gpu)
                                      // element)
        self.chunks = chunk_ranges(0, numel, chunk)
        host = torch.device("cpu")
        self.host_weights = None
        if optimizer is not None:
            self.host_weights = dev.empty(numel, first.dtype, host, self.on_gpu)
            self.host_weights.zero_()
            self.weights.append(self.host_weights)
        if not self.on_gpu:
            # One chunk of scratch for the sum when an optimizer turns it into weights.
            self.scratch = (None if optimizer is None else
                            torch.empty(max(e - s for s, e in self.chunks), dtype=first.dtype))
            return
        self.host_in = [dev.empty(numel, first.dtype, host, True) for _ in replicas]
        # The sum lands in the first device's host copy (in place): no buffer of its own.
        self.down = [dev.new_stream(r.device) for r in replicas]
        self.up = [dev.new_stream(r.device) for r in replicas]
        self.arrived = [[dev.new_event(r.device) for _ in self.chunks] for r in replicas]
        if self.host_free:
            # Planned once: each chunk's copy down, its event, and its copy up, as direct
            # cudaMemcpyAsync calls (rawcopy: no torch fences, a few us of host time per copy).
            down, up = self.down[0], self.up[0]
            host, grads, out = self.host_in[0], replicas[0].grads, replicas[0].outputs
            self.home_device = torch.cuda.current_device()
            self.plan = [(rawcopy.Copy(host[s:e], grads[s:e], down), self.arrived[0][c],
                          rawcopy.Copy(out[s:e], host[s:e], up))
                         for c, (s, e) in enumerate(self.chunks)]

    def capture(self):
        """The one-GPU step (``host_free``) as a CUDA graph: its copies down and up and the events
        between them, on the two copy streams forked from a capture stream and joined back."""
        if not self.host_free:
            raise RuntimeError("local captures its step only on one GPU without an optimizer")
        device = self.replicas[0].device
        self.step()                       # one eager step first, untimed
        torch.cuda.synchronize(device)
        graph = torch.cuda.CUDAGraph()
        capture = torch.cuda.Stream(device=device)
        capture.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.device(device), torch.cuda.graph(graph, stream=capture):
            self.record_step()
        torch.cuda.current_stream(device).wait_stream(capture)
        torch.cuda.synchronize(device)
        return graph

    def record_step(self):
        capture = torch.cuda.current_stream(self.replicas[0].device)
        side = (self.down[0], self.up[0])
        for stream in side:
            stream.wait_stream(capture)
        self._step_gpu()
        for stream in side:
            capture.wait_stream(stream)

    @property
    def host_free(self) -> bool:
        """One GPU, no optimizer: each chunk goes straight back up, ordered on the GPU."""
        return self.on_gpu and len(self.replicas) == 1 and self.optimizer is None

    def notes(self) -> list[str]:
        size = f"{len(self.chunks)} chunk(s) of up to {self._chunk_mb():.3g} MB"
        if not self.on_gpu:
            return [f"CPU devices: summed in place into the outputs in {size}, no staging copies, "
                    f"{torch.get_num_threads()} threads"]
        if self.host_free:
            return [f"one GPU: {size}, each copied up as soon as it is down (nothing to sum)"]
        return [f"CPU summation with {torch.get_num_threads()} threads in {size}"]

    def _chunk_mb(self) -> float:
        s, e = self.chunks[0]
        return (e - s) * self.replicas[0].grads.element_size() / 1e6

    def step(self) -> None:
        if self.on_gpu:
            self._step_gpu()
        else:
            self._step_cpu()

    def _step_cpu(self) -> None:
        replicas = self.replicas
        for s, e in self.chunks:
            grads = [r.grads[s:e] for r in replicas]
            if self.optimizer is None:
                total = replicas[0].outputs[s:e]
            else:
                total = self.scratch[:e - s]
            _sum_into(total, grads)
            source = total
            if self.optimizer is not None:
                self.optimizer.apply(self.host_weights[s:e], total)
                source = self.host_weights[s:e]
            for replica in replicas:
                target = replica.outputs[s:e]
                if target.data_ptr() != source.data_ptr():
                    target.copy_(source)

    def _step_gpu(self) -> None:
        replicas = self.replicas
        if self.host_free:
            # Interleaved (down c, then up c behind it): the copy up of chunk c is queued while
            # the GPU still copies down later chunks. Queuing every copy down first left the
            # copies up waiting for the host (about 45 us per chunk pair in torch) and cost up to
            # 20 % on 45-77 MB buffers (benchmarks/probes/local_schedule.py at 7d3c61a, H100).
            down, up = self.down[0], self.up[0]
            with rawcopy.keep_device(self.home_device):
                for copy_down, arrived, copy_up in self.plan:
                    copy_down()
                    arrived.record(down)
                    up.wait_event(arrived)
                    copy_up()
            return
        for c, (s, e) in enumerate(self.chunks):
            for d, replica in enumerate(replicas):
                with dev.on_streams(self.down[d]):
                    self.host_in[d][s:e].copy_(replica.grads[s:e], non_blocking=True)
                dev.record(self.arrived[d][c], self.down[d])
        for c, (s, e) in enumerate(self.chunks):
            for d in range(len(replicas)):
                dev.host_wait(self.arrived[d][c])
            total = self.host_in[0][s:e]
            if len(replicas) > 1:
                _sum_into(total, [h[s:e] for h in self.host_in])
            source = total
            if self.optimizer is not None:
                self.optimizer.apply(self.host_weights[s:e], total)
                source = self.host_weights[s:e]
            for d, replica in enumerate(replicas):
                with dev.on_streams(self.up[d]):
                    replica.outputs[s:e].copy_(source, non_blocking=True)


def _sum_into(total: torch.Tensor, parts: list[torch.Tensor]) -> None:
    """total = sum(parts); ``total`` may be ``parts[0]`` itself (summed in place)."""
    if len(parts) == 1:
        if total.data_ptr() != parts[0].data_ptr():
            total.copy_(parts[0])
        return
    torch.add(parts[0], parts[1], out=total)
    for more in parts[2:]:
        total.add_(more)
