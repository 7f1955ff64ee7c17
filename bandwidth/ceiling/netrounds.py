"""The host check in rounds: the round search of bandwidth.links.rounds, driven by rank 0 over the
processes launch.py started, instead of the full matrix of bandwidth.ceiling.network.

    python launch.py -H hosts -n N -s 0 python -m bandwidth.ceiling --network --rounds --json R.json
    python -m bandwidth.hostgate R.json --junit hosts.xml        # exit 1 naming a slow host/path

Each process is one host of the search, named ``rank@host`` (launch one process per host). Rank 0
asks the planner for a round, sends its pairs to every rank (rank numbers in an int64 tensor:
nothing is unpickled), and every pair of the round measures at once: the first of each pair sends
``nbytes`` to the second, which answers with one byte, then the other way; a warm-up and
``repeats`` timed sends each way, everyone at a barrier before each, the sender's median giving
its GB/s. Rank 0 gathers the rates (two float64 a rank), records them and asks for the next round,
until the planner has nothing left to decide.
"""

from __future__ import annotations

import time

import torch
import torch.distributed as dist

from bandwidth.ceiling.network import join_processes, median_gbps, timed_sends
from bandwidth.links.rounddoc import rounds_document
from bandwidth.links.rounds import RoundSearch
from bandwidth.processes.group import all_gather_json
from bandwidth.progress import Stages


def broadcast_pairs(pairs: list[tuple[int, int]] | None) -> list[tuple[int, int]]:
    """Rank 0's pairs of rank numbers on every rank (``pairs`` is ignored elsewhere)."""
    count = torch.tensor([len(pairs) if pairs is not None else 0], dtype=torch.int64)
    dist.broadcast(count, src=0)
    flat = torch.zeros(2 * int(count.item()), dtype=torch.int64)
    if pairs is not None and pairs:
        flat[:] = torch.tensor([r for pair in pairs for r in pair], dtype=torch.int64)
    if flat.numel():
        dist.broadcast(flat, src=0)
    values = flat.tolist()
    return [(values[i], values[i + 1]) for i in range(0, len(values), 2)]


def measure_round(rank: int, pairs: list[tuple[int, int]], payload: torch.Tensor,
                  ack: torch.Tensor, repeats: int) -> tuple[int, float]:
    """Every pair at once, first -> second then second -> first; (the rank this one sent to,
    its GB/s), or (-1, 0.0) when it sits this round out."""
    partner = {}
    for a, b in pairs:
        partner[a], partner[b] = (b, 0), (a, 1)         # (peer, the phase this rank sends in)
    peer, my_phase = partner.get(rank, (-1, -1))
    seconds = []
    for phase in (0, 1):
        seconds += timed_sends(payload, ack, peer, phase == my_phase, repeats)
    if peer < 0:
        return -1, 0.0
    return peer, median_gbps(payload, seconds)


def gather_rates(peer: int, gbps: float, size: int) -> list[tuple[int, float]]:
    """Every rank's (peer it sent to, GB/s), in rank order."""
    mine = torch.tensor([float(peer), gbps], dtype=torch.float64)
    out = [torch.zeros(2, dtype=torch.float64) for _ in range(size)]
    dist.all_gather(out, mine)
    return [(int(t[0].item()), float(t[1].item())) for t in out]


def measure_rounds(nbytes: int, repeats: int, timeout_s: float, min_percent: float,
                   screen_rounds: int | str | None) -> dict | None:
    """The round search's document (bandwidth.links.rounddoc) on rank 0, None elsewhere."""
    role = join_processes(timeout_s)
    if role is None:
        return None                           # a ps-lite scheduler takes no part
    # Rank 0 says which round a silence of 10 s is in (the rounds print at the end).
    stages = Stages().watching() if role.rank == 0 else Stages.quiet()
    try:
        labels = all_gather_json(f"{role.rank}@{role.node_host}", role.world_size)
        # Every rank builds the planner, so a setting it refuses stops every rank alike.
        search = RoundSearch(labels, min_percent, screen_rounds)
        index = {label: i for i, label in enumerate(labels)}
        payload = torch.ones(max(1, nbytes // 4))
        ack = torch.zeros(1, dtype=torch.uint8)
        round_seconds = []
        while True:
            started = time.perf_counter()
            asked = [(index[a], index[b]) for a, b in search.next_round()] \
                if role.rank == 0 else None
            pairs = broadcast_pairs(asked)
            if not pairs:
                break
            stages.enter(f"the host check: round {len(round_seconds) + 1}, {len(pairs)} pairs "
                         "at once")
            peer, gbps = measure_round(role.rank, pairs, payload, ack, repeats)
            rates = gather_rates(peer, gbps, role.world_size)
            if role.rank == 0:
                search.record({(labels[src], labels[dst]): value
                               for src, (dst, value) in enumerate(rates) if dst >= 0})
                round_seconds.append(time.perf_counter() - started)
        dist.barrier()
    finally:
        stages.close()
        dist.destroy_process_group()
    if role.rank != 0:
        return None
    sent = payload.numel() * 4
    reference = search.verdict().reference_gbps
    n = len(labels)
    return rounds_document(
        search, nbytes=sent, repeats=repeats, round_seconds=round_seconds,
        # the full matrix: N(N-1) cells one at a time, each a warm-up and `repeats` sends
        matrix_seconds=n * (n - 1) * (repeats + 1) * sent / (reference * 1e9),
        method=f"Gloo send of {sent / 1e6:g} MB and a 1-byte answer, median of {repeats}, "
               f"every pair of a round at once, one direction then the other")


def render(doc: dict) -> list[str]:
    """The rounds, the verdict's names, the verdict line."""
    v = doc["verdict"]
    n = len(doc["hosts"])
    lines = [f"Host check in rounds: {n} processes, {doc['rounds']} rounds "
             f"({doc['screen_rounds']} of screening), {v['pairs_measured']} of "
             f"{v['pairs_total']} pairs measured, {doc['seconds']:.1f} s"]
    for k, (pairs, seconds) in enumerate(zip(doc["round_pairs"], doc["round_seconds"])):
        lines.append(f"round {k + 1:>3}: {pairs:>5} pairs, {seconds:8.2f} s")
    if doc.get("matrix_seconds_estimate"):
        lines.append(f"# the full matrix ({n * (n - 1)} cells one at a time) would take about "
                     f"{doc['matrix_seconds_estimate']:.1f} s at the reference rate")
    lines.append(f"# reference {v['reference_gbps']:.3f} GB/s (the median host's best cell); a "
                 f"pair is slow below {v['min_percent']:g} %: {v['threshold_gbps']:.3f} GB/s")
    for s in v["slow_hosts"]:
        lines.append(f"# SLOW HOST {s['host']}: sends {s['out_gbps']:.3f} GB/s, receives "
                     f"{s['in_gbps']:.3f} GB/s with {s['partners']} healthy hosts")
    for p in v["slow_paths"]:
        lines.append(f"# SLOW PATH {p['name']}: {p['gbps']:.3f} GB/s, the other way "
                     f"{p['reverse_gbps']:.3f} GB/s; both hosts fast with others")
    for u in v["unresolved"]:
        lines.append(f"# UNRESOLVED {u['name']}: {u['why']}")
    lines.append(f"# {doc['method']}")
    lines.append(v["line"])
    return lines

