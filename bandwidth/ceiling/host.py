"""Host-side ceilings: host<->device copies per GPU (one direction, and both at once), a GPU's elementwise add, the host's memory
copy and summation rates, and the three stages of the ``local`` mode (``host_path``).

    host_link_gbps(0, 256 * 10**6, pinned=True, to_device=True)   # GB/s over GPU 0's PCIe link
    duplex_host_gbps(0, 256 * 10**6)        # both directions at once, GB/s of one direction
    host_memory(256 * 10**6)                                      # copy and add rates, threads

All rates are decimal GB/s of the bytes a copy moves, or of the bytes an add reads and writes
(3 x the buffer: two inputs, one output); a copy inside one memory counts its read and its write
(2 x), as p2pBandwidthLatencyTest counts its diagonal.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from bandwidth.ceiling.timing import median_seconds


def host_link_gbps(gpu: int, nbytes: int, pinned: bool, to_device: bool, repeats: int = 5,
                   burst: int = 5) -> float:
    """One GPU's host->device (``to_device``) or device->host copy rate with pinned or pageable
    host memory: torch ``copy_`` on a side stream, bursts of back-to-back copies."""
    host = torch.ones(nbytes, dtype=torch.uint8, pin_memory=pinned)
    dev = torch.ones(nbytes, dtype=torch.uint8, device=f"cuda:{gpu}")
    stream = torch.cuda.Stream(device=gpu)
    dst, src = (dev, host) if to_device else (host, dev)

    def copy():
        with torch.cuda.stream(stream):
            # pageable memory: torch stages the copy and waits for it; pinned: asynchronous
            dst.copy_(src, non_blocking=pinned)

    seconds = median_seconds(copy, lambda: torch.cuda.synchronize(gpu), repeats, burst=burst)
    return nbytes / seconds / 1e9


def duplex_host_gbps(gpu: int, nbytes: int, repeats: int = 5, burst: int = 5) -> float:
    """One GPU's duplex host path: ``nbytes`` device->host and another ``nbytes`` host->device at
    the same time, each direction on its own stream with pinned memory (PCIe is full duplex, and
    the GPU has a copy engine per direction); bytes of one direction per second, which is the
    ``local`` mode's algbw bound on one GPU (every byte goes down and comes back up)."""
    host_in = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    host_out = torch.ones(nbytes, dtype=torch.uint8, pin_memory=True)
    dev_in = torch.ones(nbytes, dtype=torch.uint8, device=f"cuda:{gpu}")
    dev_out = torch.empty(nbytes, dtype=torch.uint8, device=f"cuda:{gpu}")
    down, up = torch.cuda.Stream(device=gpu), torch.cuda.Stream(device=gpu)

    def both():
        with torch.cuda.stream(down):
            host_in.copy_(dev_in, non_blocking=True)
        with torch.cuda.stream(up):
            dev_out.copy_(host_out, non_blocking=True)

    # The fastest burst, not the median: this figure is the local mode's ceiling, and a ceiling
    # must be an upper bound (the rate varies by a few % from one burst to the next).
    seconds = []
    for i in range(repeats + 1):                 # the first burst is a warm-up
        torch.cuda.synchronize(gpu)
        start = time.perf_counter()
        for _ in range(burst):
            both()
        torch.cuda.synchronize(gpu)
        if i:
            seconds.append((time.perf_counter() - start) / burst)
    return nbytes / min(seconds) / 1e9


def device_add_gbps(gpu: int, nbytes: int, repeats: int = 5, burst: int = 10) -> float:
    """A GPU's memory rate for ``torch.add(a, b, out=c)`` of float32 buffers, counting 3 x bytes:
    the bound of any on-GPU summation (the device mode's)."""
    a, b, c = (torch.ones(nbytes // 4, device=f"cuda:{gpu}") for _ in range(3))
    seconds = median_seconds(lambda: torch.add(a, b, out=c), lambda: torch.cuda.synchronize(gpu),
                             repeats, burst=burst)
    return 3 * (nbytes // 4) * 4 / seconds / 1e9


def host_memory(nbytes: int, repeats: int = 5, threads: int | None = None) -> dict:
    """The host's memory copy rate (``copy_``, counting read + write, 2 x bytes) and summation
    rate (``torch.add`` of two float32 buffers, 3 x bytes) with torch's CPU threads:
    ``{"nbytes", "copy_gbps", "sum_gbps", "threads"}``."""
    previous = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        numel = nbytes // 4
        a, b, c = torch.ones(numel), torch.ones(numel), torch.empty(numel)
        copy_s = median_seconds(lambda: c.copy_(a), lambda: None, repeats, warmup=1)
        sum_s = median_seconds(lambda: torch.add(a, b, out=c), lambda: None, repeats, warmup=1)
        return {"nbytes": numel * 4, "copy_gbps": 2 * numel * 4 / copy_s / 1e9,
                "sum_gbps": 3 * numel * 4 / sum_s / 1e9, "threads": torch.get_num_threads()}
    finally:
        torch.set_num_threads(previous)


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
    return HostPath(nbytes, len(gpus), median_seconds(down, sync, repeats),
                    median_seconds(add, sync, repeats), median_seconds(up, sync, repeats),
                    median_seconds(all_at_once, sync, repeats), torch.get_num_threads())
