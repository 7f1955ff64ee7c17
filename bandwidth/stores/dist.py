"""Parameter-server modes, worker side: ``dist_sync``, ``dist_async``, ``dist_sync_device`` (alias
``dist_device_sync``) and ``dist_async_device``, with MXNet's semantics on torch.distributed (Gloo,
host buffers over TCP).

A step on a worker: reduce its own devices' arrays (on the CPU, or on the GPUs for the ``_device``
variants) into a pinned host buffer, push it to the servers and pull the new values back into a
second host buffer, then copy those to every device. The flat buffer is laid out server by server
(``ps_layout``), so what goes to one server is one contiguous run, sent as several messages of at
most MESSAGE_BYTES that are all in flight at once. Servers (bandwidth.stores.psserver) keep the
store in
host memory. Start these modes with launch.py, which sets the roles:

    python launch.py -n 2 -s 2 python bandwidth/measure.py --kv-store dist_sync --cpus 2
"""

from __future__ import annotations

import collections
import functools
import itertools
import math
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import torch
import torch.distributed as dist

from bandwidth.arrays.layout import Layout, chunk_ranges
from bandwidth.hardware import devices as dev
from bandwidth.stores.base import KVStore
from bandwidth.stores.costs import Costs
from bandwidth.stores.device import DeviceStore
from bandwidth.stores.owners import assign_owners, owner_pieces
from bandwidth.stores.peerwait import wait_by_server
from bandwidth.stores.traits import Traits

BIGARRAY_BOUND = 1_000_000          # MXNET_KVSTORE_BIGARRAY_BOUND: elements, not bytes
# A server's answers end at least 2 x (its largest message) / rate after its last push is in (see
# ``messages``): 12.8 ms per step at 2.5 Gbit/s with 2 MB messages, 6.4 ms with 1 MB. On the
# netlab (4 hosts, 2.5 Gbit/s, 2 x 2, resnet-50; BENCHMARKS.md, 2026-11-24) a step took 0.373-0.377
# s with 2 MB and 0.366-0.369 s with 1 MB; 500 kB gained nothing more (more messages to post).
MESSAGE_BYTES = 10**6
FIRST_MESSAGE_BYTES = 256 * 1024    # the ramp's first and last message (see ``messages``)


@dataclass(frozen=True)
class Cluster:
    """Where this process sits in a parameter-server job (from the launcher's contract)."""

    num_workers: int
    num_servers: int
    worker: int = 0                 # this worker's index (servers: unused)
    # Two process groups over every rank, one per direction: pushes (worker -> server) travel on
    # ``push_group``'s connections, answers on ``pull_group``'s. Gloo moves one pair's sends and
    # receives in turn, not at once, so over a single group a worker's link carried its pushes
    # and pulls one after the other and a step took twice the link's bound (measured between two
    # hosts on a 1 Gbit/s link: 0.059 GB/s each way on one pair, 0.119 on two). None: the default
    # group.
    push_group: object = None
    pull_group: object = None
    max_in_flight: int | None = None  # messages per server awaiting their answer (None: all)
    server_order: str = "same"        # "staggered": worker w starts each round at server w % S
    server_admit: int | None = None   # pushes a server accepts at once (None: its slots' worth)
    server_keys: str = "mxnet"        # how keys are spread over the servers (server_pieces)
    server_takes: str = "message"     # the order a sync server takes pushes in (psserver)

    def server_rank(self, server: int) -> int:
        return self.num_workers + server


def split_evenly(numel: int, parts: int) -> list[int]:
    """MXNet's split of a big array: part i has round(N/S*(i+1)) - round(N/S*i) elements."""
    cut = [math.floor(numel / parts * i + 0.5) for i in range(parts + 1)]
    return [b - a for a, b in zip(cut, cut[1:])]


def server_pieces(shapes, num_servers: int,
                  keys: str = "mxnet") -> list[list[tuple[int, int, int]]]:
    """(key, start, length) pieces each server holds. ``keys`` "mxnet" (MXNet's rule): arrays of
    at least BIGARRAY_BOUND elements split evenly over all servers, smaller ones whole on server
    (key * 9973) % S, which can leave one server far more than the others (mobilenet on 5
    servers: 4.86 MB against 2.80-3.26); "balanced": the ``device`` mode's balanced owners
    (bandwidth.stores.owners) with the servers as owners, every server the same elements to
    within one."""
    pieces: list[list[tuple[int, int, int]]] = [[] for _ in range(num_servers)]
    if keys == "balanced":
        for key, start, length, server in owner_pieces([math.prod(s) for _, s in shapes],
                                                       num_servers, "balanced"):
            pieces[server].append((key, start, length))
        return pieces
    for key, (_, shape) in enumerate(shapes):
        numel = math.prod(shape)
        if numel >= BIGARRAY_BOUND:
            start = 0
            for server, length in enumerate(split_evenly(numel, num_servers)):
                pieces[server].append((key, start, length))
                start += length
        else:
            pieces[(key * 9973) % num_servers].append((key, 0, numel))
    return pieces


def ps_layout(shapes, num_servers: int, devices: int, by_owner: bool, keys: str = "mxnet"):
    """The flat layout server by server (within a server, grouped by owner GPU for the _device
    variants so each owner's share stays in few runs), the keys spread by ``keys``
    (``server_pieces``); returns (layout, [(start, stop)] per server)."""
    owner = assign_owners([math.prod(s) for _, s in shapes], devices)
    ordered, ranges, cursor = [], [], 0
    for held in server_pieces(shapes, num_servers, keys):
        if by_owner:
            held = sorted(held, key=lambda piece: (owner[piece[0]], piece[0]))
        ordered += held
        size = sum(length for _, _, length in held)
        ranges.append((cursor, cursor + size))
        cursor += size
    return Layout.from_pieces(shapes, ordered), ranges


def messages(server_ranges, element_size: int) -> list[tuple[int, int, int]]:
    """(server, start, stop) of every message, each at most MESSAGE_BYTES; the index is its tag.

    Interleaved: the first message of every server, then the second of every server, and so on,
    in the order a worker posts them. Every server then receives from every worker at once, so no
    server's link is idle while another's carries a whole share (sent server by server, each
    server's inbound link carried all workers' pushes at once while the others waited, and a step
    took twice the link's bound), and each server answers its first messages while the later
    pushes are still arriving, so pulls overlap pushes.

    The answers trail the pushes by the largest message: a server answers a message once every
    worker's copy of it is in, and every later answer follows it on the server's link, so the
    server's last answer leaves at least 2 x (largest message) / rate after its last push arrived
    (2 x the message: one answer per worker). Hence MESSAGE_BYTES is small (1 MB). The messages of
    each server also grow from FIRST_MESSAGE_BYTES, doubling, to MESSAGE_BYTES and shrink the same
    way at the end, so that the first answers leave early in the step (measured on the netlab's
    earlier queues: 66 to 80 % of link at 2.5 Gbit/s, BENCHMARKS.md 2026-11-23)."""
    limit = max(1, MESSAGE_BYTES // element_size)
    first = max(1, FIRST_MESSAGE_BYTES // element_size)
    per_server = [[(server, s, e) for s, e in ramped_ranges(a, b, limit, first)]
                  for server, (a, b) in enumerate(server_ranges)]
    return [m for round_ in itertools.zip_longest(*per_server) for m in round_ if m is not None]


def visit_order(plan: list[tuple[int, int, int]], cluster: Cluster) -> list[int]:
    """The tags of ``plan`` in the order this worker posts them: round by round (a message of
    every server), each round from server 0 up ("same") or from server ``worker % S`` up
    ("staggered", so that the workers' first messages spread over the servers)."""
    per_server: list[list[int]] = [[] for _ in range(cluster.num_servers)]
    for tag, (server, _, _) in enumerate(plan):
        per_server[server].append(tag)
    if cluster.server_order == "staggered" and cluster.num_servers:
        first = cluster.worker % cluster.num_servers
        per_server = per_server[first:] + per_server[:first]
    return [tag for round_ in itertools.zip_longest(*per_server) for tag in round_
            if tag is not None]


def post_messages(cluster: Cluster, plan: list[tuple[int, int, int]], push: torch.Tensor,
                  pull: torch.Tensor, tag_base: int = 0, labelled: bool = False) -> list:
    """A worker's side of one exchange: for every message of ``plan`` (``messages``), the receive
    of its answer into ``pull`` and then its push from ``push``, posted in ``visit_order``. Each
    pull goes out just before its push because Gloo sends a message only once its receive is
    posted, so a server's answer leaves at once (on the netlab at 2.5 Gbit/s, 2 x 2, resnet-50: 71
    % of link with every send posted first, 81-85 % with the receives first), and the first
    pushes leave before the later pulls are posted. With ``cluster.max_in_flight`` N, a message
    to a server that already has N unanswered waits for the oldest answer first. Returns the
    works not yet waited for, in the order posted. ``tag_base``: the first message's tag (a
    schedule's later parts continue the numbering, bandwidth.schedules.runner). ``labelled``:
    each as ``(server, "push" | "pull", work)``."""
    limit = cluster.max_in_flight
    waiting: dict[int, collections.deque] = collections.defaultdict(collections.deque)
    works, done = [], set()
    for tag in visit_order(plan, cluster):
        server, s, e = plan[tag]
        if limit is not None and len(waiting[server]) >= limit:
            oldest = waiting[server].popleft()
            oldest.wait()                  # a Gloo receive waited twice waits for another one
            done.add(id(oldest))
        answer = dist.irecv(pull[s:e], src=cluster.server_rank(server), tag=tag_base + tag,
                            group=cluster.pull_group)
        works.append((server, "pull", answer))
        works.append((server, "push", dist.isend(push[s:e], dst=cluster.server_rank(server),
                                                 tag=tag_base + tag, group=cluster.push_group)))
        waiting[server].append(answer)
    return [item if labelled else item[2] for item in works if id(item[2]) not in done]


def ramped_ranges(start: int, stop: int, limit: int, first: int) -> list[tuple[int, int]]:
    """[start, stop) in pieces that grow from ``first`` elements, doubling while below ``limit``,
    then equal pieces of at most ``limit``, then the same ramp in reverse; too short a range for
    the two ramps is cut as ``chunk_ranges`` cuts it."""
    ramp = []
    size = max(1, first)
    while size < limit:
        ramp.append(size)
        size *= 2
    if 2 * sum(ramp) + limit > stop - start:
        return chunk_ranges(start, stop, limit)
    head, cursor = [], start
    for size in ramp:
        head.append((cursor, cursor + size))
        cursor += size
    tail, end = [], stop
    for size in ramp:
        tail.append((end - size, end))
        end -= size
    return head + chunk_ranges(cursor, end, limit) + tail[::-1]


class ServerCosts(Costs):
    def network_nbytes(self, nbytes, local, total):
        return float(nbytes)

    def traffic_rule(self, local, total):
        return ("each worker pushes its reduced arrays (S bytes) to the servers and pulls S back "
                "per step, whatever its number of devices")


def server_traits(summary: str, summary_on_cpu: str | None = None, *, sync: bool,
                  on_gpus: bool) -> Traits:
    """A parameter-server mode's traits: ``sync`` servers or not (MXNet refuses the async ones
    without an optimizer), the local reduce ``on_gpus`` or on the CPU (whose worker may pull
    into its gradients)."""
    return Traits(summary=summary, summary_on_cpu=summary_on_cpu,
                  bound="the network between workers and servers", bound_kind="network",
                  distributed=True, sync=sync, needs_optimizer=not sync,
                  pulls_into_gradients=not on_gpus, part_options={"time_peers": False})


class ParameterServerStore(KVStore):
    costs = ServerCosts()
    on_gpus: bool = False

    @classmethod
    def unavailable(cls, devices, dtype):
        if not dist.is_available() or not dist.is_gloo_available():
            return "this torch build has no torch.distributed with Gloo"
        return None

    @classmethod
    def make_layout(cls, shapes, n, cluster):
        return ps_layout(shapes, cluster.num_servers, n, by_owner=cls.on_gpus,
                         keys=cluster.server_keys)[0]

    def __init__(self, replicas, layout, optimizer, group, chunk_elements, cpu_threads=None,
                 cluster: Cluster | None = None, time_peers: bool = True):
        super().__init__(replicas, layout, optimizer, group, chunk_elements, cpu_threads)
        self.cluster = cluster
        first = replicas[0].grads
        pinned = first.is_cuda
        numel = layout.numel
        _, self.server_ranges = ps_layout(list(zip(layout.names, layout.shapes)),
                                          cluster.num_servers, len(replicas), by_owner=self.on_gpus,
                                          keys=cluster.server_keys)
        self.messages = messages(self.server_ranges, first.element_size())
        on_host = not first.is_cuda
        # What goes out and what comes back. On CPU devices, as MXNet's comm_buf aliases a merged
        # array already in host memory: one replica pushes its own gradients, and the pull lands
        # in the first replica's outputs; no staging copies.
        self.push_buf = (first if on_host and len(replicas) == 1 and not self.on_gpus
                         else dev.empty(numel, first.dtype, torch.device("cpu"), pinned))
        self.pull_buf = (replicas[0].outputs if on_host
                         else dev.empty(numel, first.dtype, torch.device("cpu"), pinned))
        if self.on_gpus:
            # The GPUs reduce (MXNet's CommDevice); the servers apply the optimizer.
            self.local = DeviceStore(replicas, layout, None, group, chunk_elements)
        elif not on_host:
            self.host_in = [dev.empty(numel, first.dtype, torch.device("cpu"), pinned)
                            for _ in replicas]
        self.server_nbytes = [(b - a) * first.element_size() for a, b in self.server_ranges]
        # Per step, per server: (seconds until the last push had left, until the last answer
        # was in) from posting (``wait_by_server``); none for a schedule's parts (part_options).
        self.peer_seconds: list[list[tuple[float, float]]] = []
        self.time_peers = time_peers
        self._waiters = (ThreadPoolExecutor(cluster.num_servers, "wait-server")
                         if time_peers and cluster.num_servers > 1 else None)

    def notes(self):
        load = ", ".join(f"{s}: {nbytes / 1e6:.2f} MB" for s, nbytes
                         in enumerate(self.server_nbytes))
        flight = self.cluster.max_in_flight
        order = ("servers visited in the same order by every worker"
                 if self.cluster.server_order == "same"
                 else "servers visited staggered (worker w starts each round at server w mod S)")
        keys = ("MXNet's key rule" if self.cluster.server_keys == "mxnet"
                else "keys balanced over the servers")
        takes = ("" if not self.traits.sync or self.cluster.server_takes == "message"
                 else "; each server takes one worker's whole share after another, server s "
                      "from worker s*W/S")
        return [f"per-server load: {load} ({keys}); {len(self.messages)} messages of at most "
                f"{MESSAGE_BYTES / 1e6:g} MB per push, "
                + ("all in flight" if flight is None else f"at most {flight} per server in flight")
                + f"; {order}{takes}"
                + ("" if self.cluster.server_admit is None
                   else f"; each server accepts at most {self.cluster.server_admit} pushes at once"),
                f"{'sync' if self.traits.sync else 'async'} servers, local reduce on the "
                f"{self._reducer()}"]

    def _reducer(self) -> str:
        """Where the local reduce runs, in words (CPU devices are not GPUs)."""
        if not self.on_gpus:
            return "CPU"
        return "GPUs" if self.replicas[0].device.type == "cuda" else "devices (CPU devices)"

    # The first message's tag: 0, or where the earlier parts of a schedule left off.
    tag_base = 0

    def step(self):
        complete = self.start()
        complete()

    def start(self):
        self._reduce_local()
        began = time.perf_counter()
        return functools.partial(self._finish, began, post_messages(
            self.cluster, self.messages, self.push_buf, self.pull_buf, self.tag_base, True))

    def _finish(self, began: float, works) -> None:
        timed = wait_by_server(works, began, self.cluster.num_servers, self._waiters)
        if self.time_peers:
            self.peer_seconds.append(timed)
        self._broadcast_local()

    def close(self) -> None:
        if self._waiters is not None:
            self._waiters.shutdown(wait=False)

    def _reduce_local(self):
        replicas = self.replicas
        if self.on_gpus:
            self.local.reduce()
            dev_sync(replicas)
            for o, runs in enumerate(self.local.ranges):
                for s, e in runs:
                    self.push_buf[s:e].copy_(replicas[o].outputs[s:e], non_blocking=True)
            dev_sync(replicas)
            return
        if self.push_buf is replicas[0].grads:
            return                                   # one CPU device: it pushes its own
        if replicas[0].grads.is_cuda:                # stage every GPU's copy in pinned memory
            for staged, replica in zip(self.host_in, replicas):
                staged.copy_(replica.grads, non_blocking=True)
            dev_sync(replicas)
            sources = self.host_in
        else:
            sources = [replica.grads for replica in replicas]
        if len(sources) == 1:
            self.push_buf.copy_(sources[0])
            return
        torch.add(sources[0], sources[1], out=self.push_buf)
        for more in sources[2:]:
            self.push_buf.add_(more)

    def _broadcast_local(self):
        replicas = self.replicas
        if self.on_gpus:
            for o, runs in enumerate(self.local.ranges):
                for s, e in runs:
                    replicas[o].outputs[s:e].copy_(self.pull_buf[s:e], non_blocking=True)
            dev_sync(replicas)
            self.local.broadcast()
            return
        for replica in replicas:
            if replica.outputs is not self.pull_buf:
                replica.outputs.copy_(self.pull_buf, non_blocking=True)


def dev_sync(replicas) -> None:
    for replica in replicas:
        if replica.device.type == "cuda":
            torch.cuda.synchronize(replica.device)


class DistSync(ParameterServerStore):
    name = "dist_sync"
    traits = server_traits("reduce on the CPU, push to parameter servers that sum one push per "
                           "worker, then pull", sync=True, on_gpus=False)


class DistAsync(ParameterServerStore):
    name = "dist_async"
    traits = server_traits("reduce on the CPU, push to parameter servers that apply every push "
                           "at once, pull", sync=False, on_gpus=False)


class DistSyncDevice(ParameterServerStore):
    name = "dist_sync_device"
    on_gpus = True
    traits = server_traits("reduce on the GPUs, then as dist_sync",
                           "reduce on the devices (as device), then as dist_sync",
                           sync=True, on_gpus=on_gpus)


class DistAsyncDevice(ParameterServerStore):
    name = "dist_async_device"
    on_gpus = True
    traits = server_traits("reduce on the GPUs, then as dist_async",
                           "reduce on the devices (as device), then as dist_async",
                           sync=False, on_gpus=on_gpus)
