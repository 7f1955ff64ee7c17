"""The neighbour probe of an all-reduce job (``dist_nccl``), after its measured iterations and
untimed in their figures: every rank exchanges one buffer with its neighbours and times what it
receives, so that a host whose link is slow shows as slow with every neighbour while a slow path
shows with one (bandwidth.results.probepaths judges it).

An all-reduce ends on every rank at once, so a rank whose link runs at half its rate does not
show in its own step time; here each directed path between two workers is timed on its own.

Rounds: for each worker distance d = 1, 2, 4, ... below the number of workers W, one round of
shift +d (every worker sends to worker w + d and receives from worker w - d, mod W) and one of
shift -d (where -d is not +d mod W), so that every worker meets each of its neighbours once in
each direction (16 workers: 7 rounds, shifts 1, -1, 2, -2, 4, -4, 8, 7 neighbours each). Each
round runs in two halves: worker w sends in half (w // d) mod 2, so that where W is a multiple
of 2d each worker either sends or receives in a half, and half the workers' links carry a flow
at once (every link busy in both directions at once put 16 flows of 1 Gbit/s through the 2
cores of the lab's machine, which would then bind every flow alike and hide a host at half its
rate). A worker of several devices runs one rank per device; device i of worker w exchanges
with device i of the partner worker, so a host's devices cross its link together, as in the
all-reduce.

Each half is ``REPEATS`` exchanges of ``probe_nbytes`` each way, each after a barrier; a rank
times its receive (Gloo: the seconds from the barrier until the last byte from its source is
in; a sender's own completion only says its bytes reached the kernel's socket buffer). Under
NCCL (GPU buffers) a rank's send and receive of one half, where it has both, are one grouped
call, timed together after a device synchronisation: there its figure is the later of the two.
"""

from __future__ import annotations

import time

import torch
import torch.distributed as dist

HOST_NBYTES = 2 << 20        # Gloo on host buffers: 2 MiB, 17 ms at 1 Gbit/s
GPU_NBYTES = 64 << 20        # NCCL on GPU buffers: 64 MiB, 1.3 ms at 400 Gbit/s
REPEATS = 3                  # exchanges per round; each path's figure is their median


def shifts(workers: int) -> list[int]:
    """The rounds' worker distances: +d and -d for d = 1, 2, 4, ... < ``workers``, each shift
    once modulo ``workers`` (2 workers: [1]; 4: [1, -1, 2]; 16: [1, -1, 2, -2, 4, -4, 8])."""
    out: list[int] = []
    d = 1
    while d < workers:
        for shift in (d, -d):
            if shift % workers not in [s % workers for s in out]:
                out.append(shift)
        d *= 2
    return out


def probe_nbytes(device: torch.device) -> int:
    return GPU_NBYTES if device.type == "cuda" else HOST_NBYTES


def probe_task(device: torch.device, group, rank: int, per_worker: int, world_size: int,
               kick=None) -> dict:
    """This rank's part of the probe (``rank`` in a world of ``world_size`` ranks, ``per_worker``
    consecutive ranks per worker, over ``group``: a bandwidth.processes.group.DistGroup of the
    default process group), then every rank's figures gathered to every rank.

    Returns {"nbytes", "repeats", "shifts", "backend", "seconds" (the slowest rank's wall time
    of the probe), "ranks": [{"worker", "local", "recv_seconds": {str(from worker): [...]}}]}.
    ``kick(what)``: called before each exchange (the hang watchdog)."""
    workers = world_size // per_worker
    worker, local = divmod(rank, per_worker)
    nbytes = probe_nbytes(device)
    send = torch.ones(nbytes // 4, dtype=torch.float32, device=device)
    recv = torch.empty_like(send)
    nccl = group.backend == "nccl"
    began = time.perf_counter()
    received: dict[str, list[float]] = {}
    for shift in shifts(workers):
        to = ((worker + shift) % workers) * per_worker + local
        source = (worker - shift) % workers
        times = []
        for i in range(REPEATS):
            for half in (0, 1):
                if kick is not None:
                    kick(f"probe shift {shift:+d}, exchange {i + 1}, half {half + 1}")
                group.barrier()
                seconds = _exchange(send if _half(worker, shift) == half else None,
                                    recv if _half(source, shift) == half else None,
                                    to, source * per_worker + local, nccl)
                if seconds is not None:
                    times.append(seconds)
        received[str(source)] = times
    wall = group.max(time.perf_counter() - began)
    table = group.gather({"worker": worker, "local": local, "recv_seconds": received})
    return {"nbytes": nbytes, "repeats": REPEATS, "shifts": shifts(workers),
            "backend": group.backend, "seconds": wall, "ranks": table}


def _half(worker: int, shift: int) -> int:
    """The half of a round in which ``worker`` sends."""
    return (worker // abs(shift)) % 2


def _exchange(send: torch.Tensor | None, recv: torch.Tensor | None, to: int, source: int,
              nccl: bool) -> float | None:
    """One half's exchange: ``send`` (None: nothing) to rank ``to`` while ``recv`` (None:
    nothing) comes from rank ``source``; the seconds until the receive was in (NCCL: until the
    grouped call was done on the device), None where nothing was received."""
    start = time.perf_counter()
    if nccl:
        ops = ([dist.P2POp(dist.isend, send, to)] if send is not None else []) + \
              ([dist.P2POp(dist.irecv, recv, source)] if recv is not None else [])
        if ops:
            for work in dist.batch_isend_irecv(ops):
                work.wait()
            torch.cuda.synchronize(ops[0].tensor.device)
        return time.perf_counter() - start if recv is not None else None
    incoming = dist.irecv(recv, src=source) if recv is not None else None
    outgoing = dist.isend(send, dst=to) if send is not None else None
    seconds = None
    if incoming is not None:
        incoming.wait()
        seconds = time.perf_counter() - start
    if outgoing is not None:
        outgoing.wait()
    return seconds
