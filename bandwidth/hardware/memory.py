"""What a process holds in host memory: its peak resident set (``peak_rss_bytes``), the job's
figures from every process's (``job_memory``) for the summary and the result document, and
temporaries given back at once in the distributed modes' processes (``return_freed_memory``)."""

from __future__ import annotations

import ctypes
import os
import resource
from collections.abc import Sequence


def peak_rss_bytes(children: bool = False) -> int:
    """This process's peak resident set in bytes (Linux reports kilobytes); with ``children``,
    the largest peak among the children it has waited for."""
    who = resource.RUSAGE_CHILDREN if children else resource.RUSAGE_SELF
    return resource.getrusage(who).ru_maxrss * 1024


# Allocations from this size up are mapped and unmapped on their own (glibc's M_MMAP_THRESHOLD).
MMAP_THRESHOLD = 1 << 20
_M_MMAP_THRESHOLD = -3
_MMAP_ENV = "MALLOC_MMAP_THRESHOLD_"


def return_freed_memory() -> None:
    """Fix glibc's mmap threshold at MMAP_THRESHOLD, in this process and (through the
    environment) the processes it starts. glibc raises the threshold each time a mapped block is
    freed, so the data's 8 MB temporaries (bandwidth.arrays.data) come from the heap after the first
    few, and the heap keeps what they leave: 60-95 MB more in a worker filling 100 MB of
    gradients on this VM's glibc, 3-5 GB over 50 workers (issue 27). A threshold the user set in
    the environment is kept. Not glibc: nothing."""
    if os.environ.get(_MMAP_ENV):
        return
    os.environ[_MMAP_ENV] = str(MMAP_THRESHOLD)
    try:
        ctypes.CDLL(None).mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)
    except (OSError, AttributeError):
        pass


def job_memory(workers: Sequence[int], servers: Sequence[int]) -> dict:
    """Peak RSS of each worker and server in bytes, and their sum: the job's memory in all, an
    upper bound (the peaks need not coincide, and pages shared between processes, the libraries,
    are counted in each)."""
    return {"workers_peak_rss": list(workers), "servers_peak_rss": list(servers),
            "total_peak_rss": sum(workers) + sum(servers)}


def memory_line(memory: dict) -> str:
    """The summary's line on memory."""
    def gb(nbytes: float) -> str:
        return f"{nbytes / 1e9:.2f} GB"

    workers, servers = memory["workers_peak_rss"], memory["servers_peak_rss"]
    parts = [f"per worker {gb(max(workers))} (max; min {gb(min(workers))})"] if workers else []
    if servers:
        parts.append(f"per server {gb(max(servers))} (max; min {gb(min(servers))})")
    count = len(workers) + len(servers)
    return (f"#   memory, peak RSS: {', '.join(parts)}; all {count} processes "
            f"{gb(memory['total_peak_rss'])} (sum of peaks)")
