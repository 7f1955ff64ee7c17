"""The host-to-host bandwidth matrix: the ceiling of the distributed modes, through the same engine
(torch.distributed with Gloo over TCP), in the form of seed 000's "bandwidth test" table.

    python launch.py -H hosts -n K python -m bandwidth.ceiling --network [--mb 256] [--json F]

Every process the launcher started is one row and column (labelled rank@host). For each ordered
pair, the source sends ``nbytes`` and the destination answers with one byte once it has it all; the
source's median over repeats, everyone else waiting at a barrier, gives GB/s from source to
destination. Rank 0 prints the matrix and returns it.
"""

from __future__ import annotations

import os
import statistics
import time
from datetime import timedelta

import torch
import torch.distributed as dist

from bandwidth.errors import UnsupportedError
from bandwidth.processes.group import all_gather_json
from bandwidth.progress import Stages


def join_processes(timeout_s: float):
    """This process's launch.py role, in a Gloo group of every launched process; None for a
    ps-lite scheduler, which takes no part."""
    from bandwidth.launch.contract.environment import Role, join_store

    if "DMLC_ROLE" not in os.environ:
        raise UnsupportedError("--network measures between the processes launch.py starts: "
                               "python launch.py -H hosts -n K python -m bandwidth.ceiling --network")
    role = Role.from_environ(os.environ)
    if role.rank is None:
        return None
    dist.init_process_group("gloo", store=join_store(role, timeout_s), rank=role.rank,
                            world_size=role.world_size, timeout=timedelta(seconds=timeout_s))
    return role


def measure_network(nbytes: int, repeats: int, timeout_s: float) -> dict | None:
    """The matrix as {"hosts": [...], "gbps": [[...]], "nbytes", "method"} on rank 0, None elsewhere."""
    role = join_processes(timeout_s)
    if role is None:
        return None                           # a ps-lite scheduler takes no part
    try:
        hosts = all_gather_json(f"{role.rank}@{role.node_host}", role.world_size)
        payload = torch.ones(max(1, nbytes // 4))
        ack = torch.zeros(1, dtype=torch.uint8)
        size = role.world_size
        row = [None] * size
        # Rank 0 says which cell a silence of 10 s is at (25 hosts: 600 cells, minutes).
        stages = Stages().watching() if role.rank == 0 else Stages.quiet()
        cells = [(src, dst) for src in range(size) for dst in range(size) if src != dst]
        with stages:
            for done, (src, dst) in enumerate(cells):
                stages.enter(f"the matrix: cell {done + 1} of {len(cells)}, {hosts[src]} to "
                             f"{hosts[dst]}", done, len(cells))
                row_of_src = _cell(payload, ack, src, dst, role.rank, repeats)
                if row_of_src is not None:
                    row[dst] = row_of_src
        rows = all_gather_json(row, size)
        dist.barrier()
    finally:
        dist.destroy_process_group()
    if role.rank != 0:
        return None
    return {"hosts": hosts, "gbps": rows, "nbytes": payload.numel() * 4,
            "method": f"Gloo send of {payload.numel() * 4 / 1e6:g} MB and a 1-byte answer, "
                      f"median of {repeats}, one pair at a time"}


def _cell(payload, ack, src: int, dst: int, rank: int, repeats: int) -> float | None:
    """One cell, GB/s from ``src`` to ``dst``, on the source (None elsewhere)."""
    peer = dst if rank == src else src if rank == dst else -1
    seconds = timed_sends(payload, ack, peer, rank == src, repeats)
    return median_gbps(payload, seconds) if rank == src else None


def timed_sends(payload, ack, peer: int, sends: bool, repeats: int) -> list[float]:
    """A warm-up and ``repeats`` sends of ``payload`` between this rank and ``peer``, each
    answered with the one byte of ``ack``, every rank at a barrier before each: the seconds of
    the timed ones on the sender (``sends``), [] on the receiver. A rank with no ``peer`` (< 0)
    keeps the barriers only."""
    seconds = []
    for i in range(repeats + 1):        # the first one is a warm-up
        dist.barrier()
        if peer < 0:
            continue
        if sends:
            start = time.perf_counter()
            dist.send(payload, dst=peer)
            dist.recv(ack, src=peer)
            if i:
                seconds.append(time.perf_counter() - start)
        else:
            dist.recv(payload, src=peer)
            dist.send(ack, dst=peer)
    return seconds


def median_gbps(payload, seconds: list[float]) -> float:
    """GB/s of sending the float32 ``payload``, by the median of ``seconds``."""
    return payload.numel() * 4 / statistics.median(seconds) / 1e9


def render(matrix: dict) -> list[str]:
    """The matrix in GB/s and Gb/s, sources down, destinations across."""
    hosts = matrix["hosts"]
    width = max(12, *(len(h) for h in hosts)) + 2
    lines = ["Host-to-host bandwidth (source down, destination across), GB/s (Gb/s)",
             " " * width + "".join(f"{h:>{width + 6}}" for h in hosts)]
    for host, row in zip(hosts, matrix["gbps"]):
        cells = "".join(f"{'':>{width + 6}}" if v is None else
                        f"{f'{v:.2f} ({8 * v:.1f})':>{width + 6}}" for v in row)
        lines.append(f"{host:<{width}}{cells}")
    lines.append(f"# {matrix['method']}")
    return lines
