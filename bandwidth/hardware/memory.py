"""What a process holds in host memory: its peak resident set (``peak_rss_bytes``), and the job's
figures from every process's (``job_memory``) for the summary and the result document."""

from __future__ import annotations

import resource
from collections.abc import Sequence


def peak_rss_bytes(children: bool = False) -> int:
    """This process's peak resident set in bytes (Linux reports kilobytes); with ``children``,
    the largest peak among the children it has waited for."""
    who = resource.RUSAGE_CHILDREN if children else resource.RUSAGE_SELF
    return resource.getrusage(who).ru_maxrss * 1024


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
