"""The device mode's plan of a step (bandwidth.stores.device): each owner's runs of the flat
buffers cut into chunks, the copy streams, the events that order copies against sums, and every
slice and copy a step touches, made once so that a step only issues them.

The plan is a part of ``DeviceStore``: it reads the store's ``replicas``, ``ranges`` (the runs of
the flat buffers each owner reduces) and ``recv`` (the receive buffers on each owner), and sets
the attributes named in ``PLAN_FIELDS``, which the store saves and restores around a capture with
another plan (``record_step``).
"""

from __future__ import annotations

import torch

from bandwidth.arrays.layout import chunk_ranges
from bandwidth.hardware import devices as dev
from bandwidth.hardware import rawcopy

# The plan of a step (``_schedule``), saved and restored around a capture with another plan.
PLAN_FIELDS = ("chunks", "recv_at", "send", "push_send", "pulled", "summed", "pulls", "rounds",
               "via_torch", "kernel_copies", "sum_lanes")

# Fewer, larger copies are faster (each copy and each event costs microseconds on the GPU), but a
# pipeline needs at least two stages: by default each owner region goes in two chunks, or in
# chunks of at most 256 MB for very large networks.
AUTO_MAX_CHUNK_BYTES = 256 * 10**6


def auto_chunk(region_numel: int, sample: torch.Tensor) -> int:
    max_elements = AUTO_MAX_CHUNK_BYTES // sample.element_size()
    pieces = max(2, -(-region_numel // max_elements))
    return max(1, -(-region_numel // pieces))


class DevicePlan:
    """The chunks, streams, events and views of a device-mode step (module docstring)."""

    def _schedule(self, chunk: list[int], send, via_torch: bool = False, push=None,
                  kernel: bool = False) -> None:
        """Cut each owner's runs into chunks of at most ``chunk[o]`` elements, take ``send`` as
        the copy streams (``push``: other streams for the pushes), and plan every copy and sum of
        a step (``_plan_views``; ``via_torch``: its copies as torch's ``copy_``; ``kernel``: as
        elementwise kernels, rawcopy.kernel_copy)."""
        self.via_torch = via_torch
        self.kernel_copies = kernel
        self.sum_lanes = False       # True: owner o sums on compute[o], not the current stream
        self.push_send = push or send
        n = len(self.replicas)
        devices = [r.device for r in self.replicas]
        self.chunks, self.recv_at = [], []
        for o in range(n):
            self.chunks.append([c for s, e in self.ranges[o] for c in chunk_ranges(s, e, chunk[o])])
            starts = [0]
            for s, e in self.chunks[o]:
                starts.append(starts[-1] + e - s)
            self.recv_at.append(starts[:-1])       # where chunk c lands in the receive buffer
        self.send = send
        self.pulled = [[[dev.new_event(devices[o]) for _ in self.chunks[o]] for _ in range(n)]
                       for o in range(n)]
        self.summed = [[dev.new_event(devices[o]) for _ in self.chunks[o]] for o in range(n)]
        self._plan_views()

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
                                                                 self.send[j][o],
                                                                 self.via_torch,
                                                                 self.kernel_copies)))
        self.rounds = []
        for c in range(max(len(chunks) for chunks in self.chunks)):
            for o in range(n):
                if c < len(self.chunks[o]):
                    s, e = self.chunks[o][c]
                    received = [self._received(o, j, c) for j in range(n) if j != o]
                    pushes = [(j, rawcopy.Copy(reps[j].outputs[s:e], reps[o].outputs[s:e],
                                               self.push_send[o][j], self.via_torch,
                                               self.kernel_copies))
                              for j in range(n) if j != o]
                    self.rounds.append((o, c, reps[o].grads[s:e], reps[o].outputs[s:e], received,
                                        pushes))

    def _received(self, o: int, j: int, c: int) -> torch.Tensor:
        s, e = self.chunks[o][c]
        at = self.recv_at[o][c]
        return self.recv[o][j][at:at + e - s]
