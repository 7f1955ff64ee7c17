"""``ddp``: PyTorch DistributedDataParallel's reducer, for the all-reduce modes.

DDP puts the gradients into buckets in the order they become ready (reverse parameter order when
backward runs last layer first), closing a bucket as soon as it holds at least its cap: the first
bucket's cap is ``first_bucket_bytes`` (DDP's ``_DEFAULT_FIRST_BUCKET_BYTES``, 1 MiB, so that the
first all-reduce starts early), every later one ``bucket_bytes`` (``bucket_cap_mb``, 25 MiB by
default). An array is never split: the array that reaches the cap stays in the bucket, which may
therefore exceed it. Each bucket is all-reduced as soon as its last gradient is ready, and the
next forward waits for every bucket (DDP's ``finalize_backward``). ``ddp_buckets`` is the rule of
the reducer's ``compute_bucket_assignment_by_size`` as ``rebuild_buckets`` applies it after the
first iteration; tests/test_ddp_buckets.py compares it with real DDP.

Caps count MiB (2^20 bytes), as ``bucket_cap_mb`` does. Real DDP's first-bucket cap is 1 MiB when
``bucket_cap_mb`` is left at its default; torch 2.13's DDP gives an explicitly passed
``bucket_cap_mb`` to the first bucket as well (``--first-bucket-mb`` says which one to follow).
"""

from __future__ import annotations

import math

from bandwidth.schedules.base import (
    BACKWARD, EXCHANGE, FORWARD, WAIT, Event, Part, Schedule)

MIB = 1 << 20
DEFAULT_BUCKET_MB = 25.0          # DDP's bucket_cap_mb
DEFAULT_FIRST_BUCKET_MB = 1.0     # DDP's _DEFAULT_FIRST_BUCKET_BYTES


def ddp_buckets(nbytes: list[int], bucket_bytes: int, first_bucket_bytes: int) -> list[list[int]]:
    """Buckets of DDP's reducer over arrays of ``nbytes`` given in the order their gradients
    become ready: lists of indices into ``nbytes``, in that order. A bucket closes once it holds
    at least its cap (the first bucket's ``first_bucket_bytes``, the others' ``bucket_bytes``);
    what remains at the end is the last bucket."""
    buckets, current, size = [], [], 0
    limit = first_bucket_bytes
    for index, count in enumerate(nbytes):
        current.append(index)
        size += count
        if size >= limit:
            buckets.append(current)
            current, size, limit = [], 0, bucket_bytes
    if current:
        buckets.append(current)
    return buckets


class Ddp(Schedule):
    name = "ddp"
    summary = ("DDP's reducer: buckets of --bucket-mb in reverse parameter order, each "
               "all-reduced when its last gradient is ready")
    modes = ("nccl", "dist_nccl")
    modes_why = "DDP all-reduces its buckets"
    framework = "DistributedDataParallel"
    framework_api = ("torch.nn.parallel", "DistributedDataParallel")

    def framework_bytes(self, nbytes: int, n: int) -> int:
        # the module's parameters, the gradients handed to backward, DDP's buckets
        return 3 * nbytes

    def make_parts(self) -> list[Part]:
        bucket_bytes = int(self.options.get("bucket_mb", DEFAULT_BUCKET_MB) * MIB)
        first = int(self.options.get("first_bucket_mb", DEFAULT_FIRST_BUCKET_MB) * MIB)
        ready = list(reversed(range(len(self.shapes))))
        sizes = [math.prod(self.shapes[k][1]) * self.element_bytes for k in ready]
        buckets = [sorted(ready[i] for i in bucket)
                   for bucket in ddp_buckets(sizes, bucket_bytes, first)]
        # Parts are numbered in key order; bucket b (DDP's b-th, ready b-th) is part
        # len(buckets) - 1 - b.
        parts = []
        for index, keys in enumerate(reversed(buckets)):
            bucket = len(buckets) - 1 - index
            parts.append(Part(index, tuple(keys), self.nbytes(keys), f"bucket {bucket}"))
        return parts

    def events(self) -> list[Event]:
        # A bucket is ready when the backward slot of the unit holding its lowest key ends.
        unit_of = self.unit_of_key()
        ready_after: dict[int, list[int]] = {}
        for part in self.parts:
            ready_after.setdefault(unit_of[min(part.keys)], []).append(part.index)
        out: list[Event] = []
        for unit in reversed(self.units):
            out.append(Event(BACKWARD, unit=unit.index))
            for part in sorted(ready_after.get(unit.index, []), reverse=True):
                out.append(Event(EXCHANGE, part=part))
        out += [Event(WAIT, part=p.index) for p in reversed(self.parts)]
        out += [Event(FORWARD, unit=u.index) for u in self.units]
        return out
