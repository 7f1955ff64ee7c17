"""Peer-to-peer bandwidth and latency between GPUs, as cuda-samples' p2pBandwidthLatencyTest
measures them: ``cudaMemcpyPeerAsync`` on the copy engine, issued on the source GPU's stream
("P2P writes"), bursts of back-to-back copies between synchronisations.

    m = p2p_matrices([0, 1], nbytes=256 * 10**6, repeats=5, burst=10, latency_repeat=100)
    m.unidirectional[0][1]   # GB/s, GPU 0 writing to GPU 1

Cell [i][j] is a copy from GPU i to GPU j; the diagonal is a copy within GPU i counting both the
read and the write, as the reference does. Bidirectional cells add both directions, on a stream of
each GPU, queued as the reference queues them (every copy one way, then every copy the other).
Latency is the GPU time per 16-byte copy of ``latency_repeat``
copies queued behind a spin kernel (the reference's definition: it too times copy-engine copies,
unless given --sm_copy). With peer access enabled the copies cross the peer link; in a process that
never enabled it (``bandwidth.ceiling.unpeered``) the driver stages them through host memory.

``p2p_copy_gbps`` is the older torch ``copy_`` measurement that the single-host benchmark uses.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from bandwidth.ceiling.timing import GatedTimer, median_seconds
from bandwidth.hardware import rawcopy

LATENCY_BYTES = 16         # one int4, as p2pBandwidthLatencyTest


def p2p_copy_gbps(src: int, dst: int, nbytes: int = 256 * 10**6, repeats: int = 10,
                  bidirectional: bool = False, burst: int = 10) -> float:
    """Copy-engine rate between GPUs src and dst in GB/s (bidirectional: both directions added),
    timed over bursts of back-to-back copies as p2pBandwidthLatencyTest does."""
    numel = nbytes // 4
    a = torch.empty(numel, device=f"cuda:{src}").uniform_()
    b = torch.empty(numel, device=f"cuda:{dst}").uniform_()
    a2 = torch.empty_like(a)
    b2 = torch.empty_like(b)
    s_ab = torch.cuda.Stream(device=src)
    s_ba = torch.cuda.Stream(device=dst)
    # Idle destination-side streams: torch fences a cross-device copy with the destination's
    # current stream, which must not chain one copy to the previous one.
    idle = [(torch.cuda.Stream(device=dst), torch.cuda.Stream(device=src)) for _ in range(burst)]
    turn = [0]

    def sync():
        torch.cuda.synchronize(src)
        torch.cuda.synchronize(dst)

    def copy():
        at_dst, at_src = idle[turn[0] % burst]
        turn[0] += 1
        with torch.cuda.stream(s_ab), torch.cuda.stream(at_dst):
            b2.copy_(a, non_blocking=True)
        if bidirectional:
            with torch.cuda.stream(s_ba), torch.cuda.stream(at_src):
                a2.copy_(b, non_blocking=True)

    seconds = median_seconds(copy, sync, repeats, burst=burst)
    return nbytes * (2 if bidirectional else 1) / seconds / 1e9


@dataclass
class PeerMatrices:
    """Plain lists, [i][j] for gpus[i] -> gpus[j]; None where a cell was not measured."""

    gpus: list[int]
    unidirectional: list[list[float | None]] | None = None      # GB/s
    bidirectional: list[list[float | None]] | None = None       # GB/s
    latency: list[list[float | None]] | None = None             # microseconds
    notes: list[str] = field(default_factory=list)


class _Buffers:
    """Two ``nbytes`` buffers, two latency buffers and two streams on every GPU."""

    def __init__(self, gpus: list[int], nbytes: int):
        self.a = {g: torch.zeros(nbytes, dtype=torch.uint8, device=f"cuda:{g}") for g in gpus}
        self.b = {g: torch.zeros(nbytes, dtype=torch.uint8, device=f"cuda:{g}") for g in gpus}
        self.tiny_a = {g: torch.zeros(LATENCY_BYTES, dtype=torch.uint8, device=f"cuda:{g}")
                       for g in gpus}
        self.tiny_b = {g: torch.zeros(LATENCY_BYTES, dtype=torch.uint8, device=f"cuda:{g}")
                       for g in gpus}
        self.s0 = {g: torch.cuda.Stream(device=g) for g in gpus}
        self.s1 = {g: torch.cuda.Stream(device=g) for g in gpus}

    def release(self) -> None:
        self.a = self.b = self.tiny_a = self.tiny_b = {}
        torch.cuda.empty_cache()


def _sync(*gpus: int):
    def sync():
        for g in set(gpus):
            torch.cuda.synchronize(g)
    return sync


def _bandwidth_cell(buf: _Buffers, i: int, j: int, bidirectional: bool, repeats: int,
                    burst: int) -> float:
    nbytes = buf.a[i].numel()
    if bidirectional:
        # i == j: two copies inside GPU i in opposite directions, as the reference does
        there = rawcopy.PeerCopy(buf.b[j], buf.a[i], buf.s0[i])
        back = rawcopy.PeerCopy(buf.b[i] if i != j else buf.a[i],
                                buf.a[j] if i != j else buf.b[i], buf.s1[j])

        def copies():
            # The reference's order: the whole burst one way (j -> i, on a stream of GPU j),
            # then the whole burst the other way. With peer access it makes no difference; with
            # the copies staged through host memory the host blocks while it stages, and this
            # order overlaps the two directions as little as the reference does (53 GB/s on
            # 2 x H200 against 63 when the directions alternate).
            for _ in range(burst):
                back()
            for _ in range(burst):
                there()
        moved = 2 * nbytes * burst
        seconds = median_seconds(copies, _sync(i, j), repeats)
    else:
        copy = rawcopy.PeerCopy(buf.b[j], buf.a[i], buf.s0[i])
        moved = nbytes
        seconds = median_seconds(copy, _sync(i, j), repeats, burst=burst)
    if i == j:
        moved *= 2                  # a copy inside one GPU reads and writes its memory
    return moved / seconds / 1e9


def _latency_cell(buf: _Buffers, i: int, j: int, repeat: int, repeats: int) -> tuple[float, bool]:
    copy = rawcopy.PeerCopy(buf.tiny_b[j], buf.tiny_a[i], buf.s0[i])
    timer = GatedTimer(buf.s0[i])

    def burst():
        for _ in range(repeat):
            copy()
    seconds = timer.median(burst, repeats, sync=_sync(i, j))
    return seconds / repeat * 1e6, timer.host_paced


def p2p_matrices(gpus: list[int], nbytes: int, repeats: int, burst: int, latency_repeat: int,
                 bandwidth: bool = True, latency: bool = True,
                 reachable=lambda i, j: True) -> PeerMatrices:
    """Measure the matrices in this process, whatever its peer access is; ``reachable(i, j)``
    False leaves a cell None (a pair without peer access in a P2P=Enabled run)."""
    out = PeerMatrices(list(gpus))
    buf = _Buffers(gpus, nbytes)
    paced = []
    with rawcopy.keep_device(torch.cuda.current_device()):
        def matrix(cell):
            return [[cell(i, j) if i == j or reachable(i, j) else None for j in gpus]
                    for i in gpus]
        if bandwidth:
            out.unidirectional = matrix(lambda i, j: _bandwidth_cell(buf, i, j, False, repeats,
                                                                     burst))
            out.bidirectional = matrix(lambda i, j: _bandwidth_cell(buf, i, j, True, repeats,
                                                                    burst))
        if latency:
            def cell(i, j):
                us, host_paced = _latency_cell(buf, i, j, latency_repeat, repeats)
                if host_paced:
                    paced.append(f"{i}->{j}")
                return us
            out.latency = matrix(cell)
    if paced:
        out.notes.append(f"latency {', '.join(paced)}: the host could not queue the copies ahead "
                         "of the GPU, so its pace is part of the time (as in the reference)")
    buf.release()
    return out


def enable_peer_access(gpus: list[int]) -> list[tuple[int, int]]:
    """Enable peer access between every pair that has it (torch's way: a tiny cross-device copy
    each way, then the runtime call, which is a no-op if torch did it); return the pairs that
    cannot."""
    missing = []
    for i in gpus:
        for j in gpus:
            if i == j:
                continue
            if not torch.cuda.can_device_access_peer(i, j):
                missing.append((i, j))
                continue
            torch.zeros(1, device=f"cuda:{j}").copy_(torch.ones(1, device=f"cuda:{i}"))
            rawcopy.enable_peer_access(i, j)
    for g in gpus:
        torch.cuda.synchronize(g)
    return missing
