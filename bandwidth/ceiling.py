"""Hardware ceilings that bound the kvstore modes, measured with the same protocol habits
(warm-up discarded, device-synchronised perf_counter timing, median of repeats).

    python -m bandwidth.ceiling [--gpus 0,1] [--mb 256]

``p2p_copy_gbps`` is the unidirectional (or bidirectional) copy-engine rate between two GPUs, the
ceiling of the ``device`` mode. ``host_path`` times the three stages of the ``local`` mode on flat
buffers (device->host copies of every GPU at once, the CPU summation, host->device copies) and
gives the pipelined bound: the slowest stage.
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import asdict, dataclass

import torch


def _median_seconds(fn, sync, repeats: int, warmup: int = 2, burst: int = 1) -> float:
    """Median over ``repeats`` of the time of ``burst`` back-to-back calls, per call."""
    times = []
    for i in range(warmup + repeats):
        sync()
        start = time.perf_counter()
        for _ in range(burst):
            fn()
        sync()
        if i >= warmup:
            times.append((time.perf_counter() - start) / burst)
    return statistics.median(times)


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

    seconds = _median_seconds(copy, sync, repeats, burst=burst)
    return nbytes * (2 if bidirectional else 1) / seconds / 1e9


@dataclass(frozen=True)
class HostPath:
    nbytes: int
    devices: int
    d2h_seconds: float       # every GPU copies nbytes to pinned host memory at once
    sum_seconds: float       # the CPU adds the n host copies into one
    h2d_seconds: float       # the result goes back to every GPU at once
    overlap_seconds: float   # all three at once on separate buffers: they share host memory
    threads: int

    @property
    def bound_seconds(self) -> float:
        """Pipelined: the stages overlap, so a step takes at least as long as all three stages
        running at once (which contend for host memory), and never less than the slowest one."""
        return max(self.d2h_seconds, self.sum_seconds, self.h2d_seconds, self.overlap_seconds)

    @property
    def serial_seconds(self) -> float:
        return self.d2h_seconds + self.sum_seconds + self.h2d_seconds

    def busbw_gbps(self, seconds: float) -> float:
        n = self.devices
        return self.nbytes * 2 * (n - 1) / n / seconds / 1e9


def host_path(gpus: list[int], nbytes: int, repeats: int = 5, threads: int | None = None) -> HostPath:
    if threads is not None:
        torch.set_num_threads(threads)
    numel = nbytes // 4
    dev = [torch.empty(numel, device=f"cuda:{g}").uniform_() for g in gpus]
    host = [torch.empty(numel, pin_memory=True).uniform_() for _ in gpus]
    landing = [torch.empty(numel, pin_memory=True) for _ in gpus]
    total = torch.empty(numel, pin_memory=True)
    streams = [torch.cuda.Stream(device=g) for g in gpus]

    def sync():
        for g in gpus:
            torch.cuda.synchronize(g)

    def down():
        for d, h, s in zip(dev, host, streams):
            with torch.cuda.stream(s):
                h.copy_(d, non_blocking=True)

    def up():
        for d, s in zip(dev, streams):
            with torch.cuda.stream(s):
                d.copy_(total, non_blocking=True)

    def add():
        torch.add(host[0], host[1], out=total)
        for more in host[2:]:
            total.add_(more)

    def all_at_once():
        for d, h, s in zip(dev, landing, streams):
            with torch.cuda.stream(s):
                h.copy_(d, non_blocking=True)
        for d, s in zip(dev2, up_streams):
            with torch.cuda.stream(s):
                d.copy_(host[0], non_blocking=True)     # read-only, like the summation
        add()

    dev2 = [torch.empty_like(d) for d in dev]
    up_streams = [torch.cuda.Stream(device=g) for g in gpus]
    return HostPath(nbytes, len(gpus), _median_seconds(down, sync, repeats),
                    _median_seconds(add, sync, repeats), _median_seconds(up, sync, repeats),
                    _median_seconds(all_at_once, sync, repeats), torch.get_num_threads())


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bandwidth.ceiling",
                                     description="Measure the links that bound the kvstore modes.")
    parser.add_argument("--gpus", default=None, help="comma list (default: every visible GPU)")
    parser.add_argument("--mb", type=float, default=256.0, help="buffer size in MB (default 256)")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("no GPU visible: peer-to-peer and host<->device ceilings are not applicable here")
        return 0
    gpus = ([int(g) for g in args.gpus.split(",")] if args.gpus
            else list(range(torch.cuda.device_count())))
    nbytes = int(args.mb * 1e6)
    for a in gpus:
        for b in gpus:
            if a != b:
                print(f"p2p {a}->{b}: unidirectional {p2p_copy_gbps(a, b, nbytes):.1f} GB/s, "
                      f"bidirectional {p2p_copy_gbps(a, b, nbytes, bidirectional=True):.1f} GB/s")
    if len(gpus) > 1:
        hp = host_path(gpus, nbytes)
        print(f"host path: {asdict(hp)}; pipelined bound {hp.busbw_gbps(hp.bound_seconds):.1f} "
              "GB/sec per gpu")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
