"""Cross-process combination, written once: barrier, max, sum and gather over the ranks of a job.

A single-process run uses LocalGroup (one rank, every operation trivial); a run of one process per
device uses DistGroup over torch.distributed's default process group.

Nothing received from another process is unpickled: torch's ``all_gather_object`` and its kin
unpickle what peers send, so whoever can reach a rank's port could run code in the job. Values
cross as JSON text in uint8 tensors (``all_gather_json``), which can only ever decode to data.
"""

from __future__ import annotations

import json

import torch

MAX_JSON_BYTES = 16 << 20      # a gathered value is a host name or a summary line: a few KB


def all_gather_json(item, size: int, group=None, device: torch.device | None = None) -> list:
    """Every rank's ``item`` (any JSON value: tuples come back as lists), in rank order, on
    every rank: its UTF-8 JSON text's length, then the text padded to the longest, as tensors.
    A peer's text that is not JSON, or longer than MAX_JSON_BYTES, is a ValueError."""
    import torch.distributed as dist

    device = device or torch.device("cpu")
    data = json.dumps(item).encode()
    if len(data) > MAX_JSON_BYTES:
        raise ValueError(f"a gathered value of {len(data)} bytes (at most {MAX_JSON_BYTES})")
    lengths = [torch.zeros(1, dtype=torch.int64, device=device) for _ in range(size)]
    dist.all_gather(lengths, torch.tensor([len(data)], dtype=torch.int64, device=device),
                    group=group)
    sizes = [int(t.item()) for t in lengths]
    longest = max(sizes)
    if not 0 < longest <= MAX_JSON_BYTES or min(sizes) < 0:
        raise ValueError(f"a peer announced a gathered value of {longest} bytes")
    mine = torch.zeros(longest, dtype=torch.uint8, device=device)
    mine[:len(data)] = torch.frombuffer(bytearray(data), dtype=torch.uint8).to(device)
    texts = [torch.empty(longest, dtype=torch.uint8, device=device) for _ in range(size)]
    dist.all_gather(texts, mine, group=group)
    out = []
    for rank, (text, n) in enumerate(zip(texts, sizes)):
        try:
            out.append(json.loads(bytes(text[:n].cpu().tolist()).decode()))
        except (UnicodeDecodeError, ValueError, RecursionError):
            raise ValueError(f"rank {rank} sent a value that is not JSON text") from None
    return out


class LocalGroup:
    rank = 0
    size = 1
    backend = "none"

    def barrier(self) -> None:
        pass

    def max(self, value: float) -> float:
        return value

    def sum(self, value: float) -> float:
        return value

    def gather(self, item) -> list:
        return [item]


class DistGroup:
    """``group``: a torch.distributed group (default: every rank), e.g. only the workers of a
    parameter-server job."""

    def __init__(self, device: torch.device, group=None):
        import torch.distributed as dist

        self._dist = dist
        self._group = group
        self.rank = dist.get_rank(group)
        self.size = dist.get_world_size(group)
        self.backend = dist.get_backend(group)
        # NCCL reduces only device tensors; Gloo host tensors.
        self._device = device if self.backend == "nccl" else torch.device("cpu")

    def barrier(self) -> None:
        self._reduce(0.0, self._dist.ReduceOp.SUM)

    def max(self, value: float) -> float:
        return self._reduce(value, self._dist.ReduceOp.MAX)

    def sum(self, value: float) -> float:
        return self._reduce(value, self._dist.ReduceOp.SUM)

    def gather(self, item) -> list:
        """Every rank's ``item`` (a JSON value), in rank order, on every rank."""
        return all_gather_json(item, self.size, self._group, self._device)

    def _reduce(self, value: float, op) -> float:
        # A tiny all-reduce doubles as a barrier and works the same on NCCL and Gloo.
        t = torch.tensor([value], dtype=torch.float64, device=self._device)
        self._dist.all_reduce(t, op=op, group=self._group)
        return float(t.item())
