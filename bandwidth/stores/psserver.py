"""Parameter server: holds its share of the store in host memory and answers the workers' pushes
and pulls (the server side of bandwidth/stores/dist.py), with MXNet's semantics.

Sync: for every message (a run of its share), wait for one push from each worker, sum them, apply
the optimizer to the stored weights (or store the sum), and answer every worker with the stored
value. Receives for all workers and messages of an iteration are posted at once, so workers and
keys are served concurrently; a message is answered as soon as all its pushes are in.

Async: every push is applied at once with the optimizer and answered with the stored value at
that moment (one thread per worker, its receives for a step all posted at once and its answers
sent without waiting for each other; updates are serialised by a lock).
"""

from __future__ import annotations

import threading

import torch
import torch.distributed as dist

from bandwidth.plan.layout import DTYPE_BYTES, TORCH_DTYPES
from bandwidth.stores.dist import messages, ps_layout

SERVER_THREADS = 1


def serve(shapes, cluster, server: int, *, devices: int, by_owner: bool, sync: bool,
          optimizer, dtype: str, iterations: int, parts=None) -> None:
    """Serve ``iterations`` steps of every worker, then return. ``parts``: the arrays of each
    part of a schedule (bandwidth.schedules), in the order the workers push them (default: all
    arrays in one part)."""
    # One summation thread: a server's adds are a small part of its time next to the transfers,
    # and several servers and workers share the host's cores, where a parallel region waits for
    # all of its threads to be scheduled (a several-ms stall per add on a busy host).
    torch.set_num_threads(SERVER_THREADS)
    mine, size = server_messages(parts or [shapes], cluster.num_servers, server, devices,
                                 by_owner, DTYPE_BYTES[dtype])
    store = torch.zeros(size, dtype=TORCH_DTYPES[dtype])
    inbox = [torch.empty(size, dtype=store.dtype) for _ in range(cluster.num_workers)]
    groups = (cluster.push_group, cluster.pull_group)
    if sync:
        _serve_sync(store, inbox, mine, optimizer, iterations, groups)
    else:
        _serve_async(store, inbox, mine, optimizer, iterations, groups)


def server_messages(parts, num_servers: int, server: int, devices: int, by_owner: bool,
                    element_size: int) -> tuple[list[tuple[int, int, int]], int]:
    """(tag, start, stop) of every message ``server`` receives per step, within its own buffer
    (its share of each part, one after another), and that buffer's size. Each part is laid out
    and cut into messages as a whole push is (``ps_layout``, ``messages``); the tags number the
    messages of every part in turn, as the workers post them (dist.post_messages' ``tag_base``)."""
    mine, size, tag_base = [], 0, 0
    for shapes in parts:
        _, ranges = ps_layout(shapes, num_servers, devices, by_owner=by_owner)
        plan = messages(ranges, element_size)
        base = ranges[server][0]
        mine += [(tag_base + tag, size + s - base, size + e - base)
                 for tag, (owner, s, e) in enumerate(plan) if owner == server]
        size += ranges[server][1] - base
        tag_base += len(plan)
    return mine, size


def _serve_sync(store, inbox, mine, optimizer, iterations: int, groups) -> None:
    push_group, pull_group = groups
    workers = range(len(inbox))
    for _ in range(iterations):
        pushes = {(w, tag): dist.irecv(inbox[w][s:e], src=w, tag=tag, group=push_group)
                  for tag, s, e in mine for w in workers}
        answers = []
        for tag, s, e in mine:
            for w in workers:
                pushes[(w, tag)].wait()
            merged = inbox[0][s:e]
            for w in workers[1:]:
                merged.add_(inbox[w][s:e])
            if optimizer is None:
                answer = merged        # the stored value is the sum: answer from it, no copy
            else:
                optimizer.apply(store[s:e], merged)
                answer = store[s:e]
            answers += [dist.isend(answer, dst=w, tag=tag, group=pull_group) for w in workers]
        for work in answers:
            work.wait()


def _serve_async(store, inbox, mine, optimizer, iterations: int, groups) -> None:
    push_group, pull_group = groups
    lock = threading.Lock()
    failures: list[BaseException] = []

    def serve_worker(w: int) -> None:
        reply = torch.empty_like(store)
        try:
            for _ in range(iterations):
                # Every receive of the step is posted at once (Gloo moves a message only once its
                # receive is posted), and answers leave without waiting: a blocking recv/send per
                # message let the worker's pushes to this server stop while each answer went out.
                pushes = [dist.irecv(inbox[w][s:e], src=w, tag=tag, group=push_group)
                          for tag, s, e in mine]
                answers = []
                for (tag, s, e), push in zip(mine, pushes):
                    push.wait()
                    with lock:
                        optimizer.apply(store[s:e], inbox[w][s:e])
                        reply[s:e].copy_(store[s:e])
                    answers.append(dist.isend(reply[s:e], dst=w, tag=tag, group=pull_group))
                for work in answers:
                    work.wait()
        except BaseException as exc:          # reported by the main thread, never lost
            failures.append(exc)

    threads = [threading.Thread(target=serve_worker, args=(w,), name=f"serve-worker-{w}")
               for w in range(len(inbox))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise failures[0]
