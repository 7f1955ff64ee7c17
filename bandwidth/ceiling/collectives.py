"""Collective bus bandwidth over a size sweep, as nccl-tests measures it.

    rows = sweep(DeviceSet("cuda", (0, 1)), sizes=size_sweep(1 << 20, 1 << 30, 2))
    rows[-1]["results"]["all_reduce"]["busbw_gbps"]

On GPUs one process drives every GPU through ``torch.cuda.nccl`` (PyTorch's own NCCL binding): each
call is one NCCL group of one call per GPU, which is nccl-tests' default set-up (one thread,
``-g N``). torch.distributed, one process per GPU, spends about 40 us of host time per call, more
than a 1 MiB all-reduce takes over NVLink, so below 16 MiB it measured torch's pace (22 GB/s at
1 MiB on 2 x H200 against nccl-tests' 60); ``torch.cuda.nccl`` costs a few microseconds more than
NCCL called from C. On CPU devices Gloo runs through torch.distributed, one process per device (so
does NCCL on GPUs with a torch built without that binding).

Each collective is one table line (its bus factor, buffers, calls and expected result). Per size S
(bytes of float32, the whole array as nccl-tests counts it) and collective: ``warmup`` untimed
calls, then ``repeats`` timed bursts of ``iters`` back-to-back calls, each started after a device
synchronisation (and a barrier, with several processes) and ended by one, timed with
``perf_counter``; with several processes the ranks' times are averaged (nccl-tests' default timing:
host clock, ``-a 1``), and the median burst gives the time of one call. A row whose calls ran only
as fast as the host queued them in most bursts is marked ``host_paced`` (nccl-tests' small sizes
are host-paced too). Then every result is checked once: inputs are rank + 1 (GPU index + 1), so the
sum is n(n+1)/2.

algbw = S / t; busbw = algbw x factor: all_reduce 2(n-1)/n, reduce_scatter and all_gather
(n-1)/n, broadcast 1 (nccl-tests' doc/PERFORMANCE.md). all_reduce and broadcast run in place
(torch has no other form of broadcast); reduce_scatter and all_gather out of place.
"""

from __future__ import annotations

import functools
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.cuda.nccl as nccl
import torch.distributed as dist

from bandwidth.formulas import algbw_gbps, allreduce_factor
from bandwidth.hardware.devices import DeviceSet
from bandwidth.launch.contract.environment import job_store
from bandwidth.processes.spawn import run_ranks

DTYPE_BYTES = 4              # float32, nccl-tests' default type
# CPU devices: the data of one timed burst (and of the warm-up) at most this many bytes, so that a
# sweep to 1G (the GPU sizes of the README) ends in minutes: Gloo moves a few GB/s on a host, and
# 20 calls of 1 GiB per burst, 5 bursts and 4 collectives took over 600 s on a 2-core VM.
CPU_BURST_BYTES = 64 << 20


def cpu_calls(nbytes: int, iters: int, warmup: int) -> tuple[int, int]:
    """(calls per timed burst, warm-up calls) on CPU devices for buffers of ``nbytes``: -n and -w,
    each cut to CPU_BURST_BYTES of data, at least one timed call."""
    fit = max(1, CPU_BURST_BYTES // max(1, nbytes))
    return min(iters, fit), min(warmup, fit)


def _shard_factor(n: int) -> float:
    return (n - 1) / n if n > 0 else 0.0


@dataclass(frozen=True)
class Collective:
    name: str
    bus_factor: Callable[[int], float]
    # (elements of the whole array, ranks, device) -> (input, output or None)
    buffers: Callable[[int, int, torch.device], tuple[torch.Tensor, torch.Tensor | None]]
    call: Callable[[torch.Tensor, torch.Tensor | None], None]          # torch.distributed
    # torch.cuda.nccl, one process: (inputs, outputs or None), a tensor of every GPU each
    grouped: Callable[[list[torch.Tensor], list[torch.Tensor] | None], None]
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
               lambda x, _: dist.all_reduce(x), lambda xs, _: nccl.all_reduce(xs),
               lambda x, _: x, lambda numel, rank, n: n * (n + 1) / 2),
    Collective("reduce_scatter", _shard_factor, _full_to_shard,
               _reduce_scatter, nccl.reduce_scatter,
               lambda _, y: y, lambda numel, rank, n: n * (n + 1) / 2),
    Collective("all_gather", _shard_factor, _shard_to_full,
               _all_gather, nccl.all_gather,
               lambda _, y: y, lambda numel, rank, n: torch.arange(1, n + 1, dtype=torch.float32)
               .repeat_interleave(numel // n)),
    Collective("broadcast", lambda n: 1.0, _whole,
               lambda x, _: dist.broadcast(x, src=0), lambda xs, _: nccl.broadcast(xs, 0),
               lambda x, _: x, lambda numel, rank, n: 1.0),
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
          timeout_s: float = 600.0, one: bool | None = None) -> list[dict]:
    """One row per size: ``{"nbytes", "count", "dtype", "results": {name: {"seconds",
    "algbw_gbps", "busbw_gbps", "host_paced", "wrong"}}}``, measured in a process of its own
    driving every GPU (see ``one_process``; ``one`` False: one process per device whatever
    the devices)."""
    spec = {"kind": devices.kind, "ids": list(devices.ids), "sizes": list(sizes),
            "names": list(names), "iters": iters, "warmup": warmup, "repeats": repeats,
            "one_process": one_process(devices) if one is None else one}
    out = run_ranks({"tasks": ["collectives"], "collectives": spec},
                    1 if spec["one_process"] else devices.n, timeout_s, total_s=timeout_s)
    return out["collectives"]


def one_process(devices: DeviceSet) -> bool:
    """Whether one process drives all of ``devices`` through torch.cuda.nccl (GPUs, and a torch
    built with that binding), as nccl-tests does by default."""
    return devices.kind == "cuda" and hasattr(torch._C, "_nccl_all_reduce")


# ----- the rank side (bandwidth.execution.rank's "collectives" task) -----

def rank_task(spec: dict, rank: int, world_size: int, port: int, timeout_s: float) -> list[dict]:
    spec = dict(spec, started=time.monotonic())
    if spec.get("one_process"):
        gpus = [torch.device("cuda", g) for g in spec["ids"]]
        return [_said(spec, i, _grouped_row(spec, nbytes, gpus), rank)
                for i, nbytes in enumerate(spec["sizes"])]
    device = (torch.device("cuda", spec["ids"][rank]) if spec["kind"] == "cuda"
              else torch.device("cpu"))
    if device.type == "cuda":
        torch.cuda.set_device(device)
    timeout = timedelta(seconds=timeout_s)
    from bandwidth.launch.contract.storegate import connect

    store = job_store(connect("127.0.0.1", port, spec.get("secret", ""), timeout_s),
                      spec.get("secret", ""))
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo", store=store, rank=rank,
                            world_size=world_size, timeout=timeout,
                            device_id=device if device.type == "cuda" else None)
    try:
        return [_said(spec, i, _row(spec, nbytes, device, rank, world_size), rank)
                for i, nbytes in enumerate(spec["sizes"])]
    finally:
        dist.destroy_process_group()


def _said(spec: dict, index: int, row: dict, rank: int) -> dict:
    """``row``, after rank 0 said on stderr that its size is done: a sweep to 1 GB runs for
    minutes, and a line per size shows it moving (on a terminal and in a log alike)."""
    if rank == 0:
        print(f"# collectives: {row['nbytes']:,} B done ({index + 1} of {len(spec['sizes'])} "
              f"sizes, {time.monotonic() - spec['started']:.0f} s)", file=sys.stderr,
              flush=True)
    return row


def _row(spec: dict, nbytes: int, device: torch.device, rank: int, n: int) -> dict:
    numel = aligned_numel(nbytes, n)
    row = {"nbytes": numel * DTYPE_BYTES, "count": numel, "dtype": "float32", "results": {}}
    if device.type == "cpu":
        iters, warmup = cpu_calls(numel * DTYPE_BYTES, spec["iters"], spec["warmup"])
        spec = dict(spec, iters=iters, warmup=warmup)
        row["iters"] = iters
    for name in spec["names"]:
        coll = COLLECTIVES[name]
        x, y = coll.buffers(numel, n, device)
        x.zero_()                    # timed calls on zeros: an in-place sum stays finite
        sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
        seconds, host_paced = _time(functools.partial(coll.call, x, y), spec, sync,
                                    lambda: _barrier(device), functools.partial(_agree, device))
        row["results"][name] = figures(name, numel * DTYPE_BYTES, seconds, n)
        row["results"][name]["host_paced"] = device.type == "cuda" and host_paced
        row["results"][name]["wrong"] = _check(coll, x, y, rank, n)
        x = y = None                 # free them before the next collective's buffers
    return row


def _grouped_row(spec: dict, nbytes: int, gpus: list[torch.device]) -> dict:
    """One size, every GPU driven from this process (torch.cuda.nccl)."""
    n = len(gpus)
    numel = aligned_numel(nbytes, n)
    row = {"nbytes": numel * DTYPE_BYTES, "count": numel, "dtype": "float32", "results": {}}

    def sync():
        for g in gpus:
            torch.cuda.synchronize(g)
    for name in spec["names"]:
        coll = COLLECTIVES[name]
        xs, ys = zip(*(coll.buffers(numel, n, g) for g in gpus))
        xs, ys = list(xs), (None if ys[0] is None else list(ys))
        for x in xs:
            x.zero_()
        seconds, host_paced = _time(functools.partial(coll.grouped, xs, ys), spec, sync)
        row["results"][name] = figures(name, numel * DTYPE_BYTES, seconds, n)
        row["results"][name]["host_paced"] = host_paced
        for i, x in enumerate(xs):
            x.fill_(i + 1)
        for y in ys or ():
            y.fill_(-1)
        coll.grouped(xs, ys)
        row["results"][name]["wrong"] = sum(
            _wrong(coll, x, y, i, n) for i, (x, y) in enumerate(zip(xs, ys or [None] * n)))
        xs = ys = None
    return row


def _barrier(device: torch.device) -> None:
    """A tiny all-reduce read back on the host: a barrier that also drains the device."""
    t = torch.zeros(1, device=device)
    dist.all_reduce(t)
    t.item()


def _agree(device: torch.device, value: float, how: str) -> float:
    """``value`` over the ranks: their mean (``how`` "mean") or their maximum ("max")."""
    t = torch.tensor([value], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX if how == "max" else dist.ReduceOp.SUM)
    return float(t.item()) / (dist.get_world_size() if how == "mean" else 1)


def _time(call: Callable[[], None], spec: dict, sync: Callable[[], None],
          barrier: Callable[[], None] = lambda: None,
          agree: Callable[[float, str], float] = lambda value, how: value) -> tuple[float, bool]:
    """Seconds of one call (median burst; ``agree``: the ranks' mean) and whether the host's
    enqueue pace, not the collective, set the time (on any rank) in most bursts."""
    iters = spec["iters"]
    for _ in range(spec["warmup"]):
        call()
    times, paced = [], 0
    for _ in range(spec["repeats"]):
        barrier()
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
        times.append(agree(seconds, "mean") / iters)
    return statistics.median(times), agree(float(paced), "max") > spec["repeats"] / 2


def _wrong(coll: Collective, x: torch.Tensor, y: torch.Tensor | None, rank: int, n: int) -> int:
    """Wrong elements of this rank's result (the call made on inputs rank + 1)."""
    got = coll.result(x, y)
    expected = coll.expected(got.numel(), rank, n)
    if isinstance(expected, torch.Tensor):
        expected = expected.to(got.device)
    return int((got != expected).sum().item())


def _check(coll: Collective, x: torch.Tensor, y: torch.Tensor | None, rank: int, n: int) -> int:
    """Wrong elements over all ranks after one call on inputs rank + 1."""
    x.fill_(rank + 1)
    if y is not None:
        y.fill_(-1)
    coll.call(x, y)
    wrong = torch.tensor([float(_wrong(coll, x, y, rank, n))], dtype=torch.float64,
                         device=x.device)
    dist.all_reduce(wrong)
    return int(wrong.item())
