"""Parameter server: holds its share of the store in host memory and answers the workers' pushes
and pulls (the server side of bandwidth/stores/dist.py), with MXNet's semantics.

Memory does not grow with the number of workers W: a server holds at most 3 x its share (the
stored weights, a sum, and a pool of receive slots of one message each), whatever W
(``slot_count``). Pushes land in a slot and are summed into the message's sum as they arrive; a
slot is posted again for the next (message, worker) as soon as its push is added.

Sync: for every message (a run of its share), the first worker's push lands in the sum itself,
the others' in slots and are added; once all W are in, the optimizer updates the stored weights
(or the sum is the stored value) and every worker is answered. Receives are posted as many at
once as there are slots, in the order ``--server-takes`` sets (``receive_order``): message by
message, worker by worker (the default), so the first messages are answered while the later
pushes are still arriving; or worker by worker, each worker's share back to back.

Gloo moves a push only once its receive is posted, so a server admits the senders into its link:
``--server-admit N`` (``Cluster.server_admit``) posts at most N receives at once (async: N slots
shared by the worker threads). On the netlab at 1 Gbit/s (50 x 5, mobilenet, 2026-11-26) one at a
time took the worker hosts' retransmissions from 8-20 % of their segments to 0.01 %, yet the step
stayed 5.0 s (4.5-5.3 s with every setting tried): the losses into the servers were not what held
it (BENCHMARKS.md).

Async: one thread per worker; every push is applied at once with the optimizer, and the answer
(the stored value at that moment) is copied into the push's slot and sent from it, so the slot
returns to the shared pool once the answer has left; updates are serialised by a lock.
"""

from __future__ import annotations

import collections
import queue
import threading
import time
from dataclasses import dataclass

import torch
import torch.distributed as dist

from bandwidth.arrays.dtypes import DTYPE_BYTES
from bandwidth.arrays.layout import TORCH_DTYPES
from bandwidth.stores.dist import messages, ps_layout

SERVER_THREADS = 1
MEMORY_SHARES = 3          # a server's bytes beyond the process itself, in shares (issue 27)


@dataclass
class Served:
    """What a server measured, per step: the seconds the step took here (``seconds``) and, sync,
    the seconds it was blocked on each worker's pushes (``waits``: per step, one figure per
    worker; empty for async, where each worker has a thread of its own). A push that is late or
    slow to arrive keeps the server waiting on it while the others' are in: what a slow worker
    costs a synchronous step, as its own push times cannot show (the server paces every worker's
    pushes, since Gloo moves one only once its receive is posted)."""

    seconds: list[float]
    waits: list[list[float]]

    def measured(self, skip: int, count: int) -> "Served":
        return Served(self.seconds[skip:skip + count], self.waits[skip:skip + count])

    def to_json(self) -> dict:
        return {"seconds": self.seconds, "waits": self.waits}


def slot_count(share: int, largest: int, held: int) -> int:
    """Receive slots of ``largest`` elements that fit beside ``held`` shares of ``share``
    elements within MEMORY_SHARES shares; at least one."""
    if largest <= 0:
        return 1
    return max(1, (MEMORY_SHARES - held) * share // largest)


def server_nbytes(share_bytes: int, largest_bytes: int, *, sync: bool, optimizer: bool) -> int:
    """Bytes a server allocates for a share of ``share_bytes`` (stored weights, sum, slots)."""
    held = held_shares(sync, optimizer)
    return held * share_bytes + slot_count(share_bytes, largest_bytes, held) * largest_bytes


def held_shares(sync: bool, optimizer: bool) -> int:
    """Whole shares besides the slots: sync keeps a sum (plus the weights with an optimizer);
    async keeps the weights only (every push goes through the optimizer)."""
    return 2 if (sync and optimizer) else 1


def serve(shapes, cluster, server: int, *, devices: int, by_owner: bool, sync: bool,
          optimizer, dtype: str, iterations: int, parts=None) -> Served:
    """Serve ``iterations`` steps of every worker, then return the seconds each step took
    here (from its first receive posted to its last answer sent; async: the slowest worker's
    thread) and, sync, its wait on each worker (``Served``). ``parts``: the arrays of each part
    of a schedule (bandwidth.schedules), in the order the workers push them (default: all arrays
    in one part)."""
    # One summation thread: a server's adds are a small part of its time next to the transfers,
    # and several servers and workers share the host's cores, where a parallel region waits for
    # all of its threads to be scheduled (a several-ms stall per add on a busy host).
    torch.set_num_threads(SERVER_THREADS)
    mine, size = server_messages(parts or [shapes], cluster.num_servers, server, devices,
                                 by_owner, DTYPE_BYTES[dtype], keys=cluster.server_keys)
    largest = max((e - s for _, s, e in mine), default=0)
    held = held_shares(sync, optimizer is not None)
    torch_dtype = TORCH_DTYPES[dtype]
    slots = [torch.empty(largest, dtype=torch_dtype)
             for _ in range(slot_count(size, largest, held))]
    admit = cluster.server_admit             # None: as many receives as the slots take
    if admit is not None and not sync:
        slots = slots[:admit]
    store = torch.zeros(size, dtype=torch_dtype)
    groups = (cluster.push_group, cluster.pull_group)
    if sync:
        total = store if optimizer is None else torch.zeros(size, dtype=torch_dtype)
        return _serve_sync(store, total, slots,
                           lambda step: receive_order(mine, cluster, server, turn=step),
                           optimizer, cluster.num_workers, iterations, groups, admit)
    return Served(_serve_async(store, slots, mine, optimizer, cluster.num_workers, iterations,
                               groups), [])


def server_messages(parts, num_servers: int, server: int, devices: int, by_owner: bool,
                    element_size: int, keys: str = "mxnet"
                    ) -> tuple[list[tuple[int, int, int]], int]:
    """(tag, start, stop) of every message ``server`` receives per step, within its own buffer
    (its share of each part, one after another), and that buffer's size. Each part is laid out
    and cut into messages as a whole push is (``ps_layout``, ``messages``); the tags number the
    messages of every part in turn, as the workers post them (dist.post_messages' ``tag_base``);
    ``keys``: how the keys are spread over the servers (dist.server_pieces)."""
    mine, size, tag_base = [], 0, 0
    for shapes in parts:
        _, ranges = ps_layout(shapes, num_servers, devices, by_owner=by_owner, keys=keys)
        plan = messages(ranges, element_size)
        base = ranges[server][0]
        mine += [(tag_base + tag, size + s - base, size + e - base)
                 for tag, (owner, s, e) in enumerate(plan) if owner == server]
        size += ranges[server][1] - base
        tag_base += len(plan)
    return mine, size


def receive_order(mine, cluster, server: int,
                  turn: int = 0) -> list[tuple[int, int, int, int, bool, bool]]:
    """(tag, start, stop, worker, first, last) of every push ``server`` takes in a step, in the
    order it posts their receives; ``first``: the message's first push (it lands in the sum
    itself), ``last``: its last (the message is then summed and answered).

    ``cluster.server_takes`` "message": every worker's push of the first message, workers in
    order, then of the second, and so on, so each message is summed and answered while the later
    ones arrive. Each worker's connection then idles while the server takes the other workers'
    pushes of a message, longer than TCP's retransmission timeout at the seed's scale (0.3-0.8 s
    at 50 x 5 on 1 Gbit/s links), so every message starts again from TCP's initial window
    (Linux's tcp_slow_start_after_idle). "worker": one worker's whole share after another, so a
    connection carries it back to back, and server s starts at worker s * W / S, so that the
    servers take from different workers at once rather than all drawing on the same workers'
    links; a message is complete, and answered, only once the last worker is in.

    ``turn``: the worker taken first moves on by ``turn`` (a sync server's step i takes turn i,
    so that no worker is always the one the server waits on first, from before the workers'
    step begins; bandwidth.arrays.data's sums are exact in any order)."""
    workers = cluster.num_workers
    start = turn if cluster.server_takes == "message" else (
        server * workers // max(1, cluster.num_servers) + turn)
    ring = [(start + i) % workers for i in range(workers)]
    if cluster.server_takes == "message":
        return [(tag, s, e, w, w == ring[0], w == ring[-1]) for tag, s, e in mine for w in ring]
    return [(tag, s, e, w, w == ring[0], w == ring[-1]) for w in ring for tag, s, e in mine]


def _serve_sync(store, total, slots, order_of, optimizer, workers: int, iterations: int,
                groups, admit: int | None) -> Served:
    """``order_of(i)``: step i's receive order. The wait on each worker (``Served.waits``) is
    the time blocked on its pushes once the step's first push is in: the wait for that first
    one holds the time between the workers' steps too, which is no worker's."""
    push_group, pull_group = groups
    seconds, waits = [], []
    for step in range(iterations):
        order = order_of(step % workers)
        began = time.perf_counter()
        waited = [0.0] * workers                # blocked on each worker's pushes
        free = collections.deque(slots)
        pending = collections.deque()           # (tag, s, e, w, last, slot or None, work)
        answers = []
        posted = _post_sync(order, 0, free, pending, total, push_group, admit)
        first = True
        while pending:
            tag, s, e, w, last, slot, work = pending.popleft()
            blocked = time.perf_counter()
            work.wait()
            if not first:
                waited[w] += time.perf_counter() - blocked
            first = False
            if slot is not None:
                total[s:e].add_(slot[:e - s])
                free.append(slot)
            posted = _post_sync(order, posted, free, pending, total, push_group, admit)
            if last:                             # every push of this message is in
                if optimizer is not None:
                    optimizer.apply(store[s:e], total[s:e])
                answers += [dist.isend(store[s:e], dst=v, tag=tag, group=pull_group)
                            for v in range(workers)]
        for work in answers:
            work.wait()
        seconds.append(time.perf_counter() - began)
        waits.append(waited)
    return Served(seconds, waits)


def _post_sync(order, posted: int, free, pending, total, group, admit: int | None) -> int:
    """Post receives in ``receive_order`` from ``order[posted]`` while a slot is free and fewer
    than ``admit`` (None: no limit) are pending; a message's first push lands in the sum itself
    and needs no slot. Returns how many of ``order`` are posted."""
    while posted < len(order) and (admit is None or len(pending) < admit):
        tag, s, e, w, first, last = order[posted]
        if first:
            slot, into = None, total[s:e]
        elif free:
            slot = free.popleft()
            into = slot[:e - s]
        else:
            break
        pending.append((tag, s, e, w, last, slot,
                        dist.irecv(into, src=w, tag=tag, group=group)))
        posted += 1
    return posted


def _serve_async(store, slots, mine, optimizer, workers: int, iterations: int,
                 groups) -> list[float]:
    push_group, pull_group = groups
    seconds = [[0.0] * workers for _ in range(iterations)]     # per step, per worker's thread
    lock = threading.Lock()
    pool: queue.SimpleQueue = queue.SimpleQueue()
    for slot in slots:
        pool.put(slot)
    failures: list[BaseException] = []
    # The threads meet after every step. The workers meet between steps too (the protocol's
    # barrier), so a slot taken for a push of the next step waits for a worker that waits for
    # the others' current step: with fewer slots than workers (a small share: 2 slots at 3
    # workers; 2 x share / 1 MB at 50) the threads ahead took every slot and the job hung.
    step_done = threading.Barrier(workers)

    def serve_worker(w: int) -> None:
        try:
            for i in range(iterations):
                began = time.perf_counter()
                _serve_async_step(w, store, pool, mine, optimizer, lock, push_group, pull_group)
                seconds[i][w] = time.perf_counter() - began
                step_done.wait()
        except threading.BrokenBarrierError:
            pass                              # another thread failed; its failure is reported
        except BaseException as exc:          # reported by the main thread, never lost
            failures.append(exc)
            step_done.abort()

    threads = [threading.Thread(target=serve_worker, args=(w,), name=f"serve-worker-{w}")
               for w in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise failures[0]
    return [max(step) for step in seconds]


def _serve_async_step(w, store, pool, mine, optimizer, lock, push_group, pull_group) -> None:
    """One step of worker ``w``: its receives are posted while this thread holds a slot for
    them (Gloo moves a message only once its receive is posted); each push is applied, the stored
    value copied into its slot and sent back from it; a slot returns to the pool once its answer
    has left. A thread holding no slot waits for one: every held slot's push is already on its
    way, so the pool refills."""
    pushes = collections.deque()
    answers = collections.deque()
    posted = 0
    while posted < len(mine) or pushes:
        while posted < len(mine):
            slot = _take(pool, block=not pushes and not answers)
            if slot is None:
                if answers:                        # an answer that has left frees its slot
                    answer, done = answers.popleft()
                    done.wait()
                    pool.put(answer)
                    continue
                break
            tag, s, e = mine[posted]
            pushes.append((tag, s, e, slot, dist.irecv(slot[:e - s], src=w, tag=tag,
                                                       group=push_group)))
            posted += 1
        tag, s, e, slot, work = pushes.popleft()
        work.wait()
        with lock:
            optimizer.apply(store[s:e], slot[:e - s])
            slot[:e - s].copy_(store[s:e])
        answers.append((slot, dist.isend(slot[:e - s], dst=w, tag=tag, group=pull_group)))
    for slot, done in answers:
        done.wait()
        pool.put(slot)


def _take(pool, block: bool):
    try:
        return pool.get(block=block)
    except queue.Empty:
        return None


def echo_slots(share: int, largest: int, dtype) -> list:
    """The receive slots of ``echo`` (the same bound as a server's: MEMORY_SHARES shares)."""
    return [torch.empty(largest, dtype=dtype) for _ in range(slot_count(share, largest, 0))]


def echo(slots, mine, cluster, server: int) -> None:
    """The transport alone, as server ``server``: every worker's push of each of ``mine`` lands
    in a slot and is sent straight back from it (the raw exchange that is a run's ceiling);
    receives are posted in the run's ``receive_order`` while a slot is free, and a slot is free
    again once its answer has left."""
    push_group, pull_group = cluster.push_group, cluster.pull_group
    order = receive_order(mine, cluster, server)
    free = collections.deque(slots)
    pushes, answers = collections.deque(), collections.deque()
    posted = 0
    while posted < len(order) or pushes:
        while posted < len(order) and (free or answers):
            if not free:
                slot, done = answers.popleft()
                done.wait()
                free.append(slot)
            tag, s, e, w, _, _ = order[posted]
            slot = free.popleft()
            pushes.append((tag, w, slot[:e - s], slot,
                           dist.irecv(slot[:e - s], src=w, tag=tag, group=push_group)))
            posted += 1
        tag, w, view, slot, work = pushes.popleft()
        work.wait()
        answers.append((slot, dist.isend(view, dst=w, tag=tag, group=pull_group)))
    for _, done in answers:
        done.wait()
