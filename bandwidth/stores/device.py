"""``device``: reduce on the GPUs over peer-to-peer copies, as MXNet's CommDevice.

Each element of the arrays is owned by one device, which sums it and sends the result back. Two
placement rules (``--owners``):

- ``balanced`` (default): keys of at most ``SPLIT_BOUND`` elements (1,000,000, MXNet's big-array
  bound) stay whole and are placed by MXNet's greedy rule below (the rules: bandwidth.stores.owners); then the larger keys, taken in key
  order as one stream of elements, are cut into consecutive pieces that fill every device up to the
  same load (water-filling: each device gets ``L - load`` elements, with ``L`` the common level,
  rounded so that loads differ by at most one element). Whenever the large keys hold at least the
  greedy imbalance of the small ones (at most ``SPLIT_BOUND`` elements), every device owns the same
  number of elements to within one, so every link direction carries the same bytes per step.
- ``greedy``: MXNet's rule. Whole keys, largest first, each onto the device with the fewest
  elements so far (ties: lower key, lower device). A large key sits whole on one owner, so that
  owner's links carry more (vgg-16: 411 MB on one GPU, 142 MB on the other).

The flat buffers hold the pieces grouped by owner, so owner o's elements form one contiguous
region. A step then has three phases, all enqueued at once and run asynchronously:

1. pull: every other device copies its slice of o's region into a receive buffer on o;
2. sum: o adds its own gradients and the received ones (and applies the optimizer, if any);
3. push: o copies the result into the same region of every other device's outputs.

Each phase is cut into chunks so that sums and pushes of early chunks overlap pulls of later ones
(the plan of a step: bandwidth.stores.deviceplan).
Copies from device i to device j run in order on a stream of their own on i, ordered against the
sums by events, so the two directions of a link, and different links, are busy at the same time.
The copies go straight to the CUDA runtime (bandwidth.hardware.rawcopy) to keep host time per copy
small.
Per step each device sends and receives 2(n-1)/n of the bytes, which is where MXNet's formula
comes from.

On GPUs the whole step is captured once as a CUDA graph (``capture``) and replayed, so that the
host's launch time (tens of copies, kernels and events per step) does not pace it; ``--launch
eager`` issues them from the host every step, as a framework without graphs does, and the default
(``auto``, bandwidth.measurement.session) keeps the graph unless a few trial steps show the eager
step clearly
faster. Two replicas may share a GPU (``--gpus 0,0``): their copies then run inside that GPU's
memory, and the graph is captured with each owner's pull, sum and push on a stream of its own and
the copies as elementwise kernels (``_shared_schedule``): captured as memcpy nodes, a copy inside
one H100 ran 11 % slower than the same ``cudaMemcpyAsync`` issued on a stream (2,345 against
2,645 GB/s for 277 MB), while the kernel copy replayed from a graph ran at 2,894 GB/s
(benchmarks/probes/graph_gap.py at 7d3c61a); that was the graph path's 10-12 % deficit from ~200 MB
up.
"""

from __future__ import annotations

import logging
import math

import torch

from bandwidth.arrays.layout import Layout
from bandwidth.hardware import devices as dev
from bandwidth.hardware import rawcopy
from bandwidth.stores.base import KVStore
from bandwidth.stores.costs import Costs
from bandwidth.stores.deviceplan import PLAN_FIELDS, DevicePlan, auto_chunk
from bandwidth.stores.owners import SPLIT_BOUND, owner_pieces, owner_runs
from bandwidth.stores.traits import Traits
from bandwidth.words import counted

log = logging.getLogger(__name__)


# Replicas sharing one GPU: the schedule and the kind of copies their graph is captured with
# (DeviceStore._shared_schedule).
# "parallel" with "kernel" copies was the fastest of the six on an H100 for every network measured
# (benchmarks/probes/graph_gap.py at 7d3c61a, BENCHMARKS.md 2026-11-23): vgg-16 415 GB/s against
# 362 for the
# sequential schedule with memcpy nodes, mobilenet 253 against 209.
SHARED_GRAPH_SCHEDULE = "parallel"
SHARED_GRAPH_COPY = "kernel"
# A part of a scheduled step (a layer's arrays under ``backward``, a bucket under ``ddp``) on a
# shared GPU: "sequential", one kernel at a time on the stream that issues the part. Inside a
# whole step with compute it left the exposed time at 0.10-0.13 ms against 0.19-0.24 with
# "parallel", whose owner lanes fork and join around every part (one H200, resnet-50 at batch 32,
# float32 and bfloat16, BENCHMARKS.md 2026-11-27).
PART_GRAPH_SCHEDULE = "sequential"


class DeviceCosts(Costs):
    def extra_bytes_per_device(self, nbytes, n, optimizer):
        # Receive buffers: n-1 copies of the largest owner region (about nbytes/n each).
        return (n - 1) * (nbytes // max(n, 1) + 1) * 2 if n > 1 else 0


class DeviceStore(DevicePlan, KVStore):
    name = "device"
    traits = Traits(
        summary=("reduce on the GPUs over peer-to-peer copies: each key summed on its owner GPU, "
                 "then broadcast"),
        summary_on_cpu=("reduce on the devices with copies between them: each key summed on its "
                        "owner device, then broadcast"),
        bound="peer-to-peer link (unidirectional copy rate)",
        bound_on_cpu="host memory copy rate (the replicas share one memory)",
        bound_kind="peer link",
        graph_capable=True,
        takes_owners=True,
        replicas_on_one_gpu=2,    # one GPU by default: the step inside its memory (--gpus 0,0)
        part_options={"shared_schedule": PART_GRAPH_SCHEDULE})
    costs = DeviceCosts()
    shared_schedule = None      # a part of a schedule's step: PART_GRAPH_SCHEDULE (part_options)

    @classmethod
    def make_layout(cls, shapes, n, cluster=None, owners="greedy"):
        numels = [math.prod(shape) for _, shape in shapes]
        return Layout.from_pieces(shapes, [(key, start, length) for key, start, length, _
                                           in owner_pieces(numels, n, owners)])

    def __init__(self, replicas, layout, optimizer, group, chunk_elements, cpu_threads=None,
                 owners="greedy", shared_schedule=None):
        """``owners``: the placement rule; the session passes --owners (default balanced). The
        parameter-server modes build this store on their own layout, grouped by MXNet's greedy
        owners (dist.ps_layout), and keep the greedy default. ``shared_schedule``: the graph
        schedule on a shared GPU where it is not SHARED_GRAPH_SCHEDULE (a schedule's part:
        ``traits.part_options``)."""
        super().__init__(replicas, layout, optimizer, group, chunk_elements, cpu_threads)
        if shared_schedule is not None:
            self.shared_schedule = shared_schedule
        n = len(replicas)
        self.owners = owners
        pieces = owner_pieces([layout.key_numel(k) for k in range(len(layout.shapes))], n, owners)
        # ranges[o]: the runs of the flat buffer that owner o reduces.
        self.ranges = owner_runs(layout, pieces, n)
        self.key_counts = [len({key for key, _, _, o in pieces if o == owner})
                           for owner in range(n)]
        self.split_keys = len({key for key, start, length, _ in pieces
                               if start > 0 or length < layout.key_numel(key)})
        self.owned = [sum(e - s for s, e in runs) for runs in self.ranges]
        devices = [r.device for r in replicas]
        dtype = replicas[0].grads.dtype
        # recv[o][j]: j's copy of what o owns, received on o (None where j == o).
        self.recv = [[None if j == o else torch.empty(self.owned[o], dtype=dtype, device=devices[o])
                      for j in range(n)] for o in range(n)]
        # Sums run on each device's current stream: no stream switching inside the timed step.
        self.compute = [dev.current_stream(d) for d in devices]
        # send[i][j]: the stream on device i that runs every copy i -> j, in order.
        self._schedule([chunk_elements or auto_chunk(self.owned[o], replicas[0].grads)
                        for o in range(n)],
                       [[dev.new_stream(devices[i]) if i != j else None for j in range(n)]
                        for i in range(n)])
        if optimizer is not None:
            for r in replicas:
                r.outputs.zero_()     # the owner's output region doubles as its weight store
        self.home_device = torch.cuda.current_device() if devices[0].type == "cuda" else None
        self.peers = dev.peer_matrix(devices)
        self.peer_warning = dev.peer_warning(self.peers, [d.index if d.index is not None else k
                                                      for k, d in enumerate(devices)])
        if self.peer_warning:
            # On stderr before the first iteration, as MXNet's LOG(WARNING) at start-up; the
            # summary repeats it as a note with the access matrix.
            log.warning(self.peer_warning)
        for i in range(n):             # let torch enable peer access for every pair once
            for j in range(n):
                if i != j:
                    replicas[j].outputs[:1].copy_(replicas[i].outputs[:1])

    def notes(self):
        n = len(self.replicas)
        placement = ", ".join(f"{o}: {counted(count, 'key')}, {owned} elements" for o, (count, owned)
                              in enumerate(zip(self.key_counts, self.owned)))
        rule = (f"balanced, {counted(self.split_keys, 'key')} of more than {SPLIT_BOUND:,} elements split"
                if self.owners == "balanced" else "greedy, MXNet's rule")
        on_gpus = self.replicas[0].device.type == "cuda"
        lines = [f"owner {'GPU' if on_gpus else 'device'} of each key ({rule}): {placement}"]
        gpus = len({r.device for r in self.replicas})
        if self.peer_warning:
            lines.append(f"WARNING: {self.peer_warning}")
            lines.extend("  " + " ".join("v" if x else "." for x in row) for row in self.peers)
        elif self.peers and gpus == 1 and n > 1:
            lines.append(f"peer access: not used ({n} replicas on 1 GPU: every copy stays "
                         "inside its memory)")
        elif self.peers and gpus > 1:
            pairs = gpus * (gpus - 1)
            lines.append(f"peer access: all {pairs} GPU pairs" + (
                f" ({n} replicas on {gpus} GPUs)" if gpus < n else ""))
        return lines

    def step(self):
        if len(self.replicas) == 1:
            self._single()
            return
        with rawcopy.keep_device(self.home_device):
            self._pull()
            self._sum(push=True)

    def reduce(self) -> None:
        """Only the reduce half: each owner ends with the sum of what it owns in its outputs
        (the parameter-server modes then send that to the servers)."""
        if len(self.replicas) == 1:
            self._single()
            return
        with rawcopy.keep_device(self.home_device):
            self._pull()
            self._sum(push=False)

    def broadcast(self) -> None:
        """Only the broadcast half: each owner's outputs to every other device. The caller orders
        it after whatever wrote the owners' outputs (a device synchronisation)."""
        with rawcopy.keep_device(self.home_device):
            for _, _, _, _, _, pushes in self.rounds:
                for _, push in pushes:
                    push()

    def _pull(self) -> None:
        # Every other device's copy of each owner's elements (all enqueued at once).
        for o, j, c, pull in self.pulls:
            pull()
            dev.record(self.pulled[o][j][c], self.send[j][o])

    def _sum(self, push: bool) -> None:
        # Chunk by chunk: sum on the owner (on its current stream, compute[o]) once the chunk has
        # arrived from everyone, then push the result to every other device.
        for o, c, own_grads, own_out, received, pushes in self.rounds:
            for j in range(len(self.replicas)):
                if j != o:
                    dev.wait(self.compute[o], self.pulled[o][j][c])
            with dev.on_streams(self.compute[o]) if self.sum_lanes else _same_stream():
                if self.optimizer is None:
                    torch.add(own_grads, received[0], out=own_out)
                    for more in received[1:]:
                        own_out.add_(more)
                else:
                    total = received[0]
                    total.add_(own_grads)
                    for more in received[1:]:
                        total.add_(more)
                    self.optimizer.apply(own_out, total)
            dev.record(self.summed[o][c], self.compute[o])
            if push:
                for j, copy in pushes:
                    dev.wait(self.push_send[o][j], self.summed[o][c])
                    copy()

    def capture(self):
        """The step as one CUDA graph, captured on a stream of the first replica's GPU
        (``record_step``). One eager step first: every kernel is loaded and every peer mapping
        made before capture."""
        devices = [r.device for r in self.replicas]
        home = devices[0]
        self.step()
        for d in set(devices):
            torch.cuda.synchronize(d)
        if self.optimizer is not None:
            for r in self.replicas:
                r.outputs.zero_()     # the weights start from zero, as __init__ left them
        graph = torch.cuda.CUDAGraph()
        capture = torch.cuda.Stream(device=home)
        capture.wait_stream(torch.cuda.current_stream(home))
        with torch.cuda.device(home), torch.cuda.graph(graph, stream=capture):
            self.record_step()
        torch.cuda.current_stream(home).wait_stream(capture)
        for d in set(devices):
            torch.cuda.synchronize(d)
        return graph

    def record_step(self):
        """The step on the first replica's GPU's current stream, which is being captured: every
        stream the step uses (the copy streams, a sum stream on each other GPU) is forked from
        it and joined back, so that the graph holds the whole step across every GPU. Replicas
        that all share one GPU are captured with the schedule of ``_shared_schedule``. The eager
        plan is restored afterwards, so that eager steps (``--launch auto``'s trial) still run
        the eager schedule."""
        devices = [r.device for r in self.replicas]
        home = devices[0]
        capture = torch.cuda.current_stream(home)
        eager_plan = {name: getattr(self, name) for name in PLAN_FIELDS}
        eager = self.compute
        sums = {d: capture if d == home else torch.cuda.Stream(device=d) for d in set(devices)}
        compute = [sums[d] for d in devices]
        try:
            if len(set(devices)) == 1 and len(devices) > 1:
                compute = self._shared_schedule(capture)
            side = {s for matrix in (self.send, self.push_send) for row in matrix for s in row
                    if s is not None and s is not capture}
            side = list(side | {s for s in compute if s is not capture})
            with torch.cuda.device(home):
                with dev.on_streams(*[s for d, s in sums.items() if d != home]):
                    self.compute = compute
                    for stream in side:
                        stream.wait_stream(capture)
                    with rawcopy.keep_device(home.index):
                        if len(self.replicas) == 1:
                            self._single()
                        else:
                            self._pull()
                            self._sum(push=True)
                    for stream in side:
                        capture.wait_stream(stream)
        finally:
            self.compute = eager
            for name, value in eager_plan.items():
                setattr(self, name, value)

    def _shared_schedule(self, capture) -> list:
        """The plan captured for replicas that all share one GPU (``--gpus 0,0``): no link to
        pipeline over, every copy and sum goes through the same memory. ``SHARED_GRAPH_SCHEDULE``:
        "sequential", one chunk per owner, every copy and sum one after another on the capture
        stream; "parallel", one chunk per owner, each owner's pull, sum and push in order on a
        stream of its own (the owners' chains run side by side); "concurrent", the eager
        schedule (chunks, one stream per copy direction). ``SHARED_GRAPH_COPY``: "kernel" copies
        as elementwise kernels (rawcopy.kernel_copy), "memcpy" as memcpy nodes. Returns the
        stream each owner sums on. A part of a schedule's step takes ``PART_GRAPH_SCHEDULE``
        (``traits.part_options``)."""
        n = len(self.replicas)
        kernel = SHARED_GRAPH_COPY == "kernel"
        whole = [self.chunk_elements or max(1, self.owned[o]) for o in range(n)]
        schedule = self.shared_schedule or SHARED_GRAPH_SCHEDULE
        if schedule == "parallel":
            lanes = [capture] + [torch.cuda.Stream(device=capture.device) for _ in range(n - 1)]
            self._schedule(whole, [[lanes[j] if i != j else None for j in range(n)]
                                   for i in range(n)],
                           push=[[lanes[i] if i != j else None for j in range(n)]
                                 for i in range(n)], kernel=kernel)
            self.sum_lanes = True
            return lanes
        if schedule == "concurrent":
            self._schedule([self.chunk_elements or auto_chunk(self.owned[o],
                                                              self.replicas[0].grads)
                            for o in range(n)], self.send, kernel=kernel)
            return [capture] * n
        self._schedule(whole, [[capture if i != j else None for j in range(n)] for i in range(n)],
                       kernel=kernel)
        return [capture] * n

    def _single(self):
        (replica,) = self.replicas
        if self.optimizer is None:
            replica.outputs.copy_(replica.grads)
        else:
            self.optimizer.apply(replica.outputs, replica.grads)


class _same_stream:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False
