"""Two spawned rank processes on loopback, as the tests that check against real
torch.distributed start them (tests/test_framework_steps.py, test_schedules_cpu.py,
test_ddp_buckets.py): one pair for all of a test's cases, so that the suite pays the imports of
two processes, not a pair per case::

    with gloo_pair(run_cases, lambda rank, port, results: (rank, 2, port, cases, results)) as q:
        for case, errors in received(q, len(cases), timeout_s=100):
            ...
"""

from __future__ import annotations

import contextlib
import queue
from typing import Callable, Iterator

import torch.multiprocessing as mp
from launch_support import free_port


@contextlib.contextmanager
def gloo_pair(target: Callable, args_of: Callable, join_s: float = 30.0) -> Iterator:
    """Ranks 0 and 1 of ``target(*args_of(rank, port, results))``, spawned, with a free port of
    127.0.0.1 for their rendezvous; yields the queue they put their results in. On leaving, each
    process is joined, and killed if it is still running ``join_s`` later."""
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=target, args=args_of(r, port, results)) for r in range(2)]
    for p in procs:
        p.start()
    try:
        yield results
    finally:
        for p in procs:
            p.join(timeout=join_s)
            if p.is_alive():
                p.kill()


def received(results, count: int, timeout_s: float) -> Iterator:
    """Up to ``count`` results, in the order they come; it stops at the first wait longer than
    ``timeout_s`` (the test then sees what is missing)."""
    for _ in range(count):
        try:
            yield results.get(timeout=timeout_s)
        except queue.Empty:
            return
