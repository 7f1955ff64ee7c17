"""``device``: reduce on the GPUs over peer-to-peer copies, as MXNet's CommDevice.

Each key is owned by one device: keys are taken largest first and each goes to the device with the
fewest elements so far (MXNet's greedy rule). The flat buffers hold the keys grouped by owner, so
owner o's keys form one contiguous region. A step then has three phases, all enqueued at once and
run asynchronously:

1. pull: every other device copies its slice of o's region into a receive buffer on o;
2. sum: o adds its own gradients and the received ones (and applies the optimizer, if any);
3. push: o copies the result into the same region of every other device's outputs.

Each phase is cut into chunks so that sums and pushes of early chunks overlap pulls of later ones.
Copies from device i to device j run in order on a stream of their own on i, ordered against the
sums by events, so the two directions of a link, and different links, are busy at the same time.
The copies go straight to the CUDA runtime (bandwidth.rawcopy) to keep host time per copy small.
Per step each device sends and receives 2(n-1)/n of the bytes, which is where MXNet's formula
comes from.
"""

from __future__ import annotations

import math

import torch

from bandwidth import devices as dev
from bandwidth import rawcopy
from bandwidth.kvstores.base import KVStore
from bandwidth.layout import chunk_ranges


def assign_owners(numels: list[int], n: int) -> list[int]:
    """MXNet's rule: keys by size, largest first, each onto the least-loaded device.

    Ties go to the lower key and the lower device, so the placement is reproducible.
    """
    load = [0] * n
    owner = [0] * len(numels)
    for key in sorted(range(len(numels)), key=lambda k: (-numels[k], k)):
        target = min(range(n), key=lambda d: (load[d], d))
        owner[key] = target
        load[target] += numels[key]
    return owner


class DeviceStore(KVStore):
    name = "device"
    summary = ("reduce on the GPUs over peer-to-peer copies: each key summed on its owner GPU, "
               "then broadcast")
    bound = "peer-to-peer link (unidirectional copy rate)"
    bound_kind = "peer link"

    @classmethod
    def key_order(cls, shapes, n):
        numels = [math.prod(shape) for _, shape in shapes]
        owner = assign_owners(numels, n)
        return sorted(range(len(shapes)), key=lambda k: (owner[k], k))

    @classmethod
    def extra_bytes_per_device(cls, nbytes, n, optimizer):
        # Receive buffers: n-1 copies of the largest owner region (about nbytes/n each).
        return (n - 1) * (nbytes // max(n, 1) + 1) * 2 if n > 1 else 0

    def __init__(self, replicas, layout, optimizer, group, chunk_elements, cpu_threads=None):
        super().__init__(replicas, layout, optimizer, group, chunk_elements, cpu_threads)
        n = len(replicas)
        owner = assign_owners([layout.key_numel(k) for k in range(len(layout.shapes))], n)
        self.regions = []
        for o in range(n):
            keys = [k for k in layout.order if owner[k] == o]
            start = layout.offsets[keys[0]] if keys else 0
            stop = max((layout.offsets[k] + layout.key_numel(k) for k in keys), default=start)
            self.regions.append((start, stop))
        self.key_counts = [sum(1 for k in owner if k == o) for o in range(n)]
        self.chunks = [chunk_ranges(s, e, chunk_elements or _auto_chunk(e - s, replicas[0].grads))
                       for s, e in self.regions]
        devices = [r.device for r in replicas]
        dtype = replicas[0].grads.dtype
        # recv[o][j]: j's slice of o's region, received on o (None where j == o).
        self.recv = [[None if j == o else torch.empty(e - s, dtype=dtype, device=devices[o])
                      for j in range(n)] for o, (s, e) in enumerate(self.regions)]
        # send[i][j]: the stream on device i that runs every copy i -> j, in order.
        self.send = [[dev.new_stream(devices[i]) if i != j else None for j in range(n)]
                     for i in range(n)]
        # Sums run on each device's current stream: no stream switching inside the timed step.
        self.compute = [dev.current_stream(d) for d in devices]
        self.pulled = [[[dev.new_event(devices[o]) for _ in self.chunks[o]] for _ in range(n)]
                       for o in range(n)]
        self.summed = [[dev.new_event(devices[o]) for _ in self.chunks[o]] for o in range(n)]
        if optimizer is not None:
            for r in replicas:
                r.outputs.zero_()     # the owner's output region doubles as its weight store
        self.home_device = torch.cuda.current_device() if devices[0].type == "cuda" else None
        self._plan_views()
        self.peers = dev.peer_matrix(devices)
        for i in range(n):             # let torch enable peer access for every pair once
            for j in range(n):
                if i != j:
                    replicas[j].outputs[:1].copy_(replicas[i].outputs[:1])

    def _plan_views(self) -> None:
        """Every slice and copy a step touches, made once: (owner, peer, chunk, copy) for the
        pulls, and per (chunk, owner) the sum's operands and the pushes."""
        reps, n = self.replicas, len(self.replicas)
        self.pulls = []
        for o in range(n):
            base = self.regions[o][0]
            for j in range(n):
                if j != o:
                    self.pulls += [(o, j, c, rawcopy.Copy(self.recv[o][j][s - base:e - base],
                                                          reps[j].grads[s:e], self.send[j][o]))
                                   for c, (s, e) in enumerate(self.chunks[o])]
        self.rounds = []
        for c in range(max(len(chunks) for chunks in self.chunks)):
            for o in range(n):
                if c < len(self.chunks[o]):
                    s, e = self.chunks[o][c]
                    base = self.regions[o][0]
                    received = [self.recv[o][j][s - base:e - base] for j in range(n) if j != o]
                    pushes = [(j, rawcopy.Copy(reps[j].outputs[s:e], reps[o].outputs[s:e],
                                               self.send[o][j])) for j in range(n) if j != o]
                    self.rounds.append((o, c, reps[o].grads[s:e], reps[o].outputs[s:e], received,
                                        pushes))

    def notes(self):
        n = len(self.replicas)
        placement = ", ".join(f"{o}: {count} keys, {e - s} elements" for o, (count, (s, e))
                              in enumerate(zip(self.key_counts, self.regions)))
        lines = [f"owner GPU of each key: {placement}"]
        if self.peers:
            pairs = n * (n - 1)
            enabled = sum(self.peers[i][j] for i in range(n) for j in range(n) if i != j)
            if enabled < pairs:
                lines.append(f"WARNING: only {enabled} out of {pairs} GPU pairs have direct "
                             "(peer-to-peer) access; the others are staged through host memory")
                lines.extend("  " + " ".join("v" if x else "." for x in row) for row in self.peers)
            else:
                lines.append(f"peer access: all {pairs} GPU pairs")
        return lines

    def step(self):
        if len(self.replicas) == 1:
            self._single()
            return
        with rawcopy.keep_device(self.home_device):
            self._exchange()

    def _exchange(self) -> None:
        # 1. pull every other device's slice of each owner's region (all enqueued at once).
        for o, j, c, pull in self.pulls:
            pull()
            dev.record(self.pulled[o][j][c], self.send[j][o])
        # 2 and 3, chunk by chunk: sum on the owner (on its current stream, compute[o]) once the
        # chunk has arrived from everyone, then push the result to every other device.
        for o, c, own_grads, own_out, received, pushes in self.rounds:
            for j in range(len(self.replicas)):
                if j != o:
                    dev.wait(self.compute[o], self.pulled[o][j][c])
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
            for j, push in pushes:
                dev.wait(self.send[o][j], self.summed[o][c])
                push()

    def _single(self):
        (replica,) = self.replicas
        if self.optimizer is None:
            replica.outputs.copy_(replica.grads)
        else:
            self.optimizer.apply(replica.outputs, replica.grads)


# Fewer, larger copies are faster (each copy and each event costs microseconds on the GPU), but a
# pipeline needs at least two stages: by default each owner region goes in two chunks, or in
# chunks of at most 256 MB for very large networks.
AUTO_MAX_CHUNK_BYTES = 256 * 10**6


def _auto_chunk(region_numel: int, sample: torch.Tensor) -> int:
    max_elements = AUTO_MAX_CHUNK_BYTES // sample.element_size()
    pieces = max(2, -(-region_numel // max_elements))
    return max(1, -(-region_numel // pieces))
