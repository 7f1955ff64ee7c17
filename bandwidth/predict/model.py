"""The model of one step: every resource a step needs, in seconds, and the step as the slowest of
them plus what cannot overlap (derivation: docs/formulas.md, "A model of a step"). Pure functions
of a ``Job`` (what runs where) and ``Params`` (what the tool measured).

Parameter-server modes, per step:

* the link of every host ``h``, each way: bytes (``links.linkbound.ps_host_bytes``) x 8 / (rate x
  efficiency), the efficiency of the way in falling with the number of remote senders into it
  (incast, ``fanin_efficiency``); with one message in flight per server, a worker pushes its
  next message only once its answer is in, so the share ``one_serial`` (calibrated) of a server
  host's shorter direction does not overlap the other, and every round of messages adds a round
  trip; where a server takes one worker's whole share after another (``--server-takes worker``),
  its link takes every push in and then sends every answer out, the one way after the other,
  and the way in carries one worker's connection at a time (the efficiency of one sender);
* every server's CPU: a receive and a send per worker and message, and W x its share summed;
* every worker's CPU: a send and a receive per message;
* then, not overlapped: the server's last answers (W x its last message after the last push)
  and a fixed cost per step.

``dist_nccl``: Gloo's ring; every ring edge that leaves a host carries 2(R-1)/R x S; 2(R-1)
messages per rank; (R-1)/R x S summed per rank.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from bandwidth.links.linkbound import ps_host_bytes, ring_host_bytes
from bandwidth.predict.params import Params, fanin_efficiency, outbound_efficiency

PS_MODES = ("dist_sync", "dist_async", "dist_sync_device", "dist_async_device")
RING_MODES = ("dist_nccl",)
MODES = PS_MODES + RING_MODES


@dataclass(frozen=True)
class Job:
    """What runs where. ``shares``: bytes each server holds; ``messages``: per server, how many
    messages and the bytes of its last one; ``in_flight``: messages per server a worker keeps in
    flight (None: all of them); ``rates``: each host's link, bits per second each way."""

    mode: str
    nbytes: int
    worker_hosts: tuple
    server_hosts: tuple = ()
    shares: tuple = ()
    messages: tuple = ()                 # ((count, last message bytes), ...) per server
    rates: dict = field(default_factory=dict)
    in_flight: int | None = None
    ranks_per_worker: int = 1            # dist_nccl: a rank per device
    server_takes: str = "message"        # sync servers: "worker" takes a share after another
    server_keys: str = "mxnet"           # the rule ``shares`` follow: "mxnet" | "balanced"


@dataclass(frozen=True)
class Prediction:
    seconds: float
    resources: dict                      # name -> seconds
    binding: str                         # the slowest resource
    serial_s: float                      # what adds to it (tail, fixed cost)
    host_bytes: dict                     # host -> (out, in)
    # a server link's resource whose way in several remote senders share (incast) -> (senders,
    # the efficiency the model gave that way)
    incast: dict = field(default_factory=dict)

    @property
    def binding_kind(self) -> str:
        return self.binding.split(" (", 1)[0].split(" ", 1)[0]


def predict(job: Job, params: Params) -> Prediction:
    if job.mode in RING_MODES:
        return _ring(job, params)
    return _ps(job, params)


def senders_into(job: Job) -> Counter:
    """Remote processes sending into each host's link at once (PS modes)."""
    into: Counter = Counter()
    for host in set(job.worker_hosts) | set(job.server_hosts):
        workers = sum(1 for w in job.worker_hosts if w != host)
        servers = sum(1 for s in job.server_hosts if s != host)
        into[host] = max(workers if host in job.server_hosts else 0,
                         servers if host in job.worker_hosts else 0)
    return into


def _ps(job: Job, params: Params) -> Prediction:
    traffic = ps_host_bytes(job.worker_hosts, job.server_hosts, job.shares)
    senders = senders_into(job)
    workers = len(job.worker_hosts)
    resources, incast = {}, {}
    for host, (out, into) in traffic.items():
        rate = job.rates[host]
        holds = "server" if host in job.server_hosts else "worker"
        t_out = out * 8 / (rate * outbound_efficiency(params, senders[host]))
        # incast: many workers into a server's link; a worker's few servers answer as it pulls
        into_eff = (fanin_efficiency(params, senders[host]) if holds == "server"
                    else outbound_efficiency(params, senders[host]))
        t_in = into * 8 / (rate * into_eff)
        by_worker = holds == "server" and job.server_takes == "worker"
        if by_worker:
            # Each message is answered only once the last worker's share is in: the server's
            # answers follow its pushes, which come one connection at a time, back to back.
            # The workers on the same host push out while the pushes come in, and take their
            # answers in while the answers go out: each phase is the longer of the two.
            served = sum(share * sum(1 for w in job.worker_hosts if w != host)
                         for share, at in zip(job.shares, job.server_hosts) if at == host)
            e_out = outbound_efficiency(params, senders[host])
            pushes_in = max(served / params.eff_one, (out - served) / e_out)
            answers_out = max(served / e_out, (into - served) / e_out)
            name = f"{holds} link of {host} (in, then out: a worker's share after another)"
            resources[name] = (pushes_in + answers_out) * 8 / rate
        elif holds == "server" and job.in_flight == 1:
            # A worker's next push follows its answer, and a server answers a message once
            # every worker's copy is in: round by round, the answers share the way out while
            # the way in waits for them. What still overlaps (the first answered push again
            # while the last answers go out) is measured: one_serial is the rest.
            name = f"{holds} link of {host} (one message in flight)"
            resources[name] = max(t_in, t_out) + params.one_serial * min(t_in, t_out)
        else:
            way = "in" if t_in >= t_out else "out"
            name = f"{holds} link {way} of {host}"
            resources[name] = max(t_in, t_out)
        if holds == "server" and senders[host] >= 2 and not by_worker \
                and not name.startswith("server link out"):
            incast[name] = (senders[host], into_eff)
    messages_total = sum(count for count, _ in job.messages)
    tail = 0.0
    for s, (share, (count, last)) in enumerate(zip(job.shares, job.messages)):
        cpu = 2 * workers * count * params.message_s + workers * share / params.sum_bytes_per_s
        resources[f"server cpu of server {s}"] = cpu
        host = job.server_hosts[s]
        remote = sum(1 for w in job.worker_hosts if w != host)
        if job.server_takes != "worker":        # there, the link's time holds every answer
            tail = max(tail, remote * last * 8 / (job.rates[host] * params.eff_one))
    resources["worker cpu"] = 2 * messages_total * params.message_s
    serial = tail + params.step_s
    if job.in_flight == 1:      # every round of messages waits for a round trip
        serial += max(count for count, _ in job.messages) * 4 * params.message_s
    return _finish(resources, serial, traffic, incast)


def _ring(job: Job, params: Params) -> Prediction:
    rank_hosts = [h for h in job.worker_hosts for _ in range(job.ranks_per_worker)]
    ranks = len(rank_hosts)
    traffic = ring_host_bytes(rank_hosts, job.nbytes)
    resources = {}
    for host, (out, into) in traffic.items():
        seconds = max(out, into) * 8 / (job.rates[host] * params.eff_one)
        resources[f"ring link of {host}"] = seconds
    resources["rank cpu (sums)"] = (ranks - 1) / ranks * job.nbytes / params.sum_bytes_per_s
    serial = 2 * (ranks - 1) * params.message_s + params.step_s
    return _finish(resources, serial, traffic)


def _finish(resources: dict, serial: float, traffic: dict,
            incast: dict | None = None) -> Prediction:
    binding = max(resources, key=resources.get)
    return Prediction(resources[binding] + serial, resources, binding, serial, traffic,
                      incast or {})


def incast_words(found: Prediction, params: Params) -> str:
    """Where the binding resource is a server host's link into which several remote processes
    send at once, the words that say so (its senders and the share of the rate the model gives
    the link for them); "" otherwise."""
    if found.binding not in found.incast:
        return ""
    senders, efficiency = found.incast[found.binding]
    largest = max(params.fanin, default=1)
    beyond = f", beyond the {largest} measured" if senders > largest else ""
    return (f"incast: {senders} remote senders into it at once, carried at {efficiency:.3f} of "
            f"the rate{beyond}")


def gbps_per_worker(job: Job, seconds: float) -> float:
    """The figure the tool reports per worker: PS modes S / t (bytes each way per second, the
    algbw of one device); dist_nccl MXNet's busbw 2(R-1)/R x S / t."""
    if job.mode in RING_MODES:
        ranks = len(job.worker_hosts) * job.ranks_per_worker
        return 2 * (ranks - 1) / ranks * job.nbytes / seconds / 1e9
    return job.nbytes / seconds / 1e9
