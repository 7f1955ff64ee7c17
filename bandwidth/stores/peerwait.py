"""A parameter-server worker's wait for one exchange, timed per server (``wait_by_server``):
how long each server's pushes took to leave and its answers to come in, the figures of a
worker's rate with each peer in the per-rank record (bandwidth.results.ranks)."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor


def wait_by_server(works: list, began: float, num_servers: int,
                   pool: ThreadPoolExecutor | None) -> list[tuple[float, float]]:
    """Wait for every work of ``post_messages(..., labelled=True)`` and return, per server,
    the seconds from ``began`` until its last push had left and until its last answer was in.

    A Gloo work completes only when it is waited for (``is_completed`` stays False until then),
    and one thread waiting in the posted order would see a late server's message hold up the
    times of every message posted after it, so each server's works are waited for by a thread
    of ``pool`` of their own (None: one server, this thread): its pushes first, then its
    answers, each work exactly once (a Gloo receive waited twice waits for another one)."""
    mine: list[list] = [[] for _ in range(num_servers)]
    for server, kind, work in works:
        mine[server].append((kind, work))
    if pool is None:
        return [_wait_one_server(ws, began) for ws in mine]
    return [f.result() for f in [pool.submit(_wait_one_server, ws, began) for ws in mine]]


def _wait_one_server(works: list, began: float) -> tuple[float, float]:
    done = {"push": 0.0, "pull": 0.0}
    for wanted in ("push", "pull"):
        for kind, work in works:
            if kind == wanted:
                work.wait()
                done[wanted] = time.perf_counter() - began
    return done["push"], done["pull"]
