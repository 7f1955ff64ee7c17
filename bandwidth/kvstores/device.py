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

import logging
import math

import torch

from bandwidth import devices as dev
from bandwidth import rawcopy
from bandwidth.kvstores.base import KVStore
from bandwidth.layout import chunk_ranges

log = logging.getLogger(__name__)


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


def peer_warning(peers: list[list[bool]], ids: list[int]) -> str | None:
    """The warning for GPU pairs without direct access (None: every pair has it, or no GPUs).

    ``peers[i][j]``: device ``ids[i]`` can access device ``ids[j]`` directly. Pairs are named by
    GPU id: ``0<->2`` neither way, ``0->2`` only 0 cannot access 2.
    """
    n = len(peers)
    pairs = n * (n - 1)
    enabled = sum(peers[i][j] for i in range(n) for j in range(n) if i != j)
    if enabled == pairs:
        return None
    lacking = []
    for i in range(n):
        for j in range(i + 1, n):
            if not peers[i][j] and not peers[j][i]:
                lacking.append(f"{ids[i]}<->{ids[j]}")
            elif not peers[i][j]:
                lacking.append(f"{ids[i]}->{ids[j]}")
            elif not peers[j][i]:
                lacking.append(f"{ids[j]}->{ids[i]}")
    return (f"only {enabled} out of {pairs} GPU pairs have direct (peer-to-peer) access; the "
            f"others are staged through host memory (a->b: GPU a cannot access GPU b): "
            f"{', '.join(lacking)}")


class DeviceStore(KVStore):
    name = "device"
    summary = ("reduce on the GPUs over peer-to-peer copies: each key summed on its owner GPU, "
               "then broadcast")
    bound = "peer-to-peer link (unidirectional copy rate)"
    bound_on_cpu = "host memory copy rate (the replicas share one memory)"
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
        # ranges[o]: the runs of the flat buffer that owner o reduces (one run in this mode, where
        # the keys are grouped by owner; several when the parameter-server modes lay the buffer
        # out by server).
        self.ranges = [[] for _ in range(n)]
        for seg in layout.segments:
            runs = self.ranges[owner[seg.key]]
            if runs and runs[-1][1] == seg.offset:
                runs[-1] = (runs[-1][0], seg.offset + seg.length)
            else:
                runs.append((seg.offset, seg.offset + seg.length))
        self.key_counts = [sum(1 for k in owner if k == o) for o in range(n)]
        self.owned = [sum(e - s for s, e in runs) for runs in self.ranges]
        self.chunks, self.recv_at = [], []
        for o in range(n):
            chunk = chunk_elements or _auto_chunk(self.owned[o], replicas[0].grads)
            self.chunks.append([c for s, e in self.ranges[o] for c in chunk_ranges(s, e, chunk)])
            starts = [0]
            for s, e in self.chunks[o]:
                starts.append(starts[-1] + e - s)
            self.recv_at.append(starts[:-1])       # where chunk c lands in the receive buffer
        devices = [r.device for r in replicas]
        dtype = replicas[0].grads.dtype
        # recv[o][j]: j's copy of what o owns, received on o (None where j == o).
        self.recv = [[None if j == o else torch.empty(self.owned[o], dtype=dtype, device=devices[o])
                      for j in range(n)] for o in range(n)]
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
        self.peer_warning = peer_warning(self.peers, [d.index if d.index is not None else k
                                                      for k, d in enumerate(devices)])
        if self.peer_warning:
            # On stderr before the first iteration, as MXNet's LOG(WARNING) at start-up; the
            # summary repeats it as a note with the access matrix.
            log.warning(self.peer_warning)
        for i in range(n):             # let torch enable peer access for every pair once
            for j in range(n):
                if i != j:
                    replicas[j].outputs[:1].copy_(replicas[i].outputs[:1])

    def _plan_views(self) -> None:
        """Every slice and copy a step touches, made once: (owner, peer, chunk, copy) for the
        pulls, and per (chunk, owner) the sum's operands and the pushes."""
        reps, n = self.replicas, len(self.replicas)
        # Chunk-major, so that the first copy of every link direction is queued before any
        # second one: a step starts every link at once (queuing all of one owner's chunks first
        # started the other direction some 20 us late, and a single step ends with its last link).
        self.pulls = []
        for c in range(max(len(chunks) for chunks in self.chunks)):
            for o in range(n):
                if c >= len(self.chunks[o]):
                    continue
                s, e = self.chunks[o][c]
                for j in range(n):
                    if j != o:
                        self.pulls.append((o, j, c, rawcopy.Copy(self._received(o, j, c),
                                                                 reps[j].grads[s:e],
                                                                 self.send[j][o])))
        self.rounds = []
        for c in range(max(len(chunks) for chunks in self.chunks)):
            for o in range(n):
                if c < len(self.chunks[o]):
                    s, e = self.chunks[o][c]
                    received = [self._received(o, j, c) for j in range(n) if j != o]
                    pushes = [(j, rawcopy.Copy(reps[j].outputs[s:e], reps[o].outputs[s:e],
                                               self.send[o][j])) for j in range(n) if j != o]
                    self.rounds.append((o, c, reps[o].grads[s:e], reps[o].outputs[s:e], received,
                                        pushes))

    def _received(self, o: int, j: int, c: int) -> torch.Tensor:
        s, e = self.chunks[o][c]
        at = self.recv_at[o][c]
        return self.recv[o][j][at:at + e - s]

    def notes(self):
        n = len(self.replicas)
        placement = ", ".join(f"{o}: {count} keys, {owned} elements" for o, (count, owned)
                              in enumerate(zip(self.key_counts, self.owned)))
        lines = [f"owner GPU of each key: {placement}"]
        if self.peer_warning:
            lines.append(f"WARNING: {self.peer_warning}")
            lines.extend("  " + " ".join("v" if x else "." for x in row) for row in self.peers)
        elif self.peers:
            lines.append(f"peer access: all {n * (n - 1)} GPU pairs")
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
                    dev.wait(self.send[o][j], self.summed[o][c])
                    copy()

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
