"""Collective bus bandwidth over a size sweep, as nccl-tests measures it, through torch.distributed
(NCCL on GPUs; Gloo stands in for it on CPU devices), one process per device.

    rows = sweep(DeviceSet("cuda", (0, 1)), sizes=size_sweep(1 << 20, 1 << 30, 2))
    rows[-1]["results"]["all_reduce"]["busbw_gbps"]

Each collective is one table line (its bus factor, buffers, call and expected result). Per size S
(bytes of float32, the whole array as nccl-tests counts it) and collective: ``warmup`` untimed
calls, then ``repeats`` timed bursts of ``iters`` back-to-back calls, each after a barrier and a
device synchronisation and ended by one, timed with ``perf_counter``; the ranks' times are
averaged (nccl-tests' default timing: host clock, ``-a 1``) and the median burst gives the time
of one call. Measured against nccl-tests 2.19.6 on 2 x H200 this agrees within 5 % from 16 MiB
up; below that a call takes less GPU time than torch.distributed's host cost per call (about
40 us), so the host's pace is the figure (torch's own, not NCCL's from C): such rows are marked
``host_paced``. Then every result is checked once: inputs are rank + 1, so the sum is n(n+1)/2.

algbw = S / t; busbw = algbw x factor: all_reduce 2(n-1)/n, reduce_scatter and all_gather
(n-1)/n, broadcast 1 (nccl-tests' doc/PERFORMANCE.md). all_reduce and broadcast run in place
(torch.distributed has no other form); reduce_scatter and all_gather out of place.
"""

from __future__ import annotations

import functools
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

from bandwidth.devices import DeviceSet
from bandwidth.formulas import algbw_gbps, allreduce_factor
from bandwidth.spawn import run_ranks

DTYPE_BYTES = 4              # float32, nccl-tests' default type


def _shard_factor(n: int) -> float:
    return (n - 1) / n if n > 0 else 0.0


@dataclass(frozen=True)
class Collective:
    name: str
    bus_factor: Callable[[int], float]
    # (elements of the whole array, ranks, device) -> (input, output or None)
    buffers: Callable[[int, int, torch.device], tuple[torch.Tensor, torch.Tensor | None]]
    call: Callable[[torch.Tensor, torch.Tensor | None], None]
    # (input, output) -> the tensor to check; (its numel, rank, n) -> expected values
    result: Callable[[torch.Tensor, torch.Tensor | None], torch.Tensor]
    expected: Callable[[int, int, int], torch.Tensor | float]


def _whole(numel, n, device):
    return torch.empty(numel, device=device), None


def _full_to_shard(numel, n, device):
    return torch.empty(numel, device=device), torch.empty(numel // n, device=device)


def _shard_to_full(numel, n, device):
    return torch.empty(numel // n, device=device), torch.empty(numel, device=device)


def _reduce_scatter(x, y):
    # torch 2.13 renamed reduce_scatter_tensor (same arguments) and warns on the old name
    (getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor)(y, x)


def _all_gather(x, y):
    (getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor)(y, x)


COLLECTIVES = {c.name: c for c in (
    Collective("all_reduce", allreduce_factor, _whole,
               lambda x, _: dist.all_reduce(x), lambda x, _: x,
               lambda numel, rank, n: n * (n + 1) / 2),
    Collective("reduce_scatter", _shard_factor,
               _full_to_shard, _reduce_scatter, lambda _, y: y,
               lambda numel, rank, n: n * (n + 1) / 2),
    Collective("all_gather", _shard_factor,
               _shard_to_full, _all_gather, lambda _, y: y,
               lambda numel, rank, n: torch.arange(1, n + 1, dtype=torch.float32)
               .repeat_interleave(numel // n)),
    Collective("broadcast", lambda n: 1.0, _whole,
               lambda x, _: dist.broadcast(x, src=0), lambda x, _: x,
               lambda numel, rank, n: 1.0),
)}


def aligned_numel(nbytes: int, n: int) -> int:
    """Elements of the whole array for a size of ``nbytes``: float32, a multiple of n (every rank
    gets an equal shard), at least n."""
    return max(n, nbytes // DTYPE_BYTES // n * n)


def figures(name: str, nbytes: int, seconds: float, n: int) -> dict:
    """algbw and busbw (GB/s) of one call of ``name`` on ``nbytes`` taking ``seconds``."""
    algbw = algbw_gbps(nbytes, seconds)
    return {"seconds": seconds, "algbw_gbps": algbw,
            "busbw_gbps": algbw * COLLECTIVES[name].bus_factor(n)}


def sweep(devices: DeviceSet, sizes: list[int], names: tuple[str, ...] = tuple(COLLECTIVES),
          iters: int = 20, warmup: int = 5, repeats: int = 5,
          timeout_s: float = 600.0) -> list[dict]:
    """One row per size: ``{"nbytes", "count", "dtype", "results": {name: {"seconds",
    "algbw_gbps", "busbw_gbps", "wrong"}}}``, measured by one process per device."""
    spec = {"kind": devices.kind, "ids": list(devices.ids), "sizes": list(sizes),
            "names": list(names), "iters": iters, "warmup": warmup, "repeats": repeats}
    out = run_ranks({"tasks": ["collectives"], "collectives": spec}, devices.n, timeout_s)
    return out["collectives"]


# ----- the rank side (bandwidth.worker's "collectives" task) -----

def rank_task(spec: dict, rank: int, world_size: int, port: int, timeout_s: float) -> list[dict]:
    device = (torch.device("cuda", spec["ids"][rank]) if spec["kind"] == "cuda"
              else torch.device("cpu"))
    if device.type == "cuda":
        torch.cuda.set_device(device)
    timeout = timedelta(seconds=timeout_s)
    store = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timeout)
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo", store=store, rank=rank,
                            world_size=world_size, timeout=timeout,
                            device_id=device if device.type == "cuda" else None)
    try:
        return [_row(spec, nbytes, device, rank, world_size) for nbytes in spec["sizes"]]
    finally:
        dist.destroy_process_group()


def _row(spec: dict, nbytes: int, device: torch.device, rank: int, n: int) -> dict:
    numel = aligned_numel(nbytes, n)
    row = {"nbytes": numel * DTYPE_BYTES, "count": numel, "dtype": "float32", "results": {}}
    for name in spec["names"]:
        coll = COLLECTIVES[name]
        x, y = coll.buffers(numel, n, device)
        x.zero_()                    # timed calls on zeros: an in-place sum stays finite
        seconds, host_paced = _time(functools.partial(coll.call, x, y), device, spec)
        row["results"][name] = figures(name, numel * DTYPE_BYTES, seconds, n)
        row["results"][name]["host_paced"] = host_paced
        row["results"][name]["wrong"] = _check(coll, x, y, rank, n)
        x = y = None                 # free them before the next collective's buffers
    return row


def _barrier(device: torch.device) -> None:
    """A tiny all-reduce read back on the host: a barrier that also drains the device."""
    t = torch.zeros(1, device=device)
    dist.all_reduce(t)
    t.item()


def _combine(seconds: float, device: torch.device, op) -> float:
    t = torch.tensor([seconds], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=op)
    return float(t.item())


def _time(call: Callable[[], None], device: torch.device, spec: dict) -> tuple[float, bool]:
    """Seconds of one call (median burst, mean of ranks) and whether the host's enqueue pace,
    not the collective, set the time on any rank in most bursts."""
    iters = spec["iters"]
    for _ in range(spec["warmup"]):
        call()
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
    times, paced = [], 0
    for _ in range(spec["repeats"]):
        _barrier(device)
        sync()
        start = time.perf_counter()
        for _ in range(iters):
            call()
        queued = time.perf_counter() - start
        sync()
        seconds = time.perf_counter() - start
        # The device finished within a tenth of the burst after the host queued the last call:
        # the calls ran as fast as they were queued.
        paced += queued > 0.9 * seconds
        times.append(_combine(seconds, device, dist.ReduceOp.SUM) / dist.get_world_size() / iters)
    paced = _combine(float(paced), device, dist.ReduceOp.MAX)
    return statistics.median(times), device.type == "cuda" and paced > spec["repeats"] / 2


def _check(coll: Collective, x: torch.Tensor, y: torch.Tensor | None, rank: int, n: int) -> int:
    """Wrong elements over all ranks after one call on inputs rank + 1."""
    x.fill_(rank + 1)
    if y is not None:
        y.fill_(-1)
    coll.call(x, y)
    got = coll.result(x, y)
    expected = coll.expected(got.numel(), rank, n)
    if isinstance(expected, torch.Tensor):
        expected = expected.to(got.device)
    wrong = torch.tensor([float((got != expected).sum().item())], dtype=torch.float64,
                         device=got.device)
    dist.all_reduce(wrong)
    return int(wrong.item())
