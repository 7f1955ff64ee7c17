"""From a question (network, W, S, placement, link rates) to the model's ``Job``: which host each
process runs on, what each server holds by MXNet's key rule, and the messages a worker sends.

Placements (``--placement``, the launcher's policies: ``bandwidth.launch.planning.placement``) over
``--hosts`` hosts named h1, h2, ...: ``round-robin`` (default hosts: max(W, S), one worker per
host and the servers on the first S of them, as MXNet's jobs of the seed ran), ``servers-apart``
(default hosts: W + S, every server on a host of its own) and ``count:N`` (default hosts: enough
for N processes each). ``separate`` is ``servers-apart`` on W + S hosts.
"""

from __future__ import annotations

import math

from bandwidth.config.job import refuse_server_takes, server_settings
from bandwidth.errors import ConfigError
from bandwidth.predict.model import MODES, RING_MODES, Job

PLACEMENTS = ("round-robin", "servers-apart", "count:N", "separate")


def place(workers: int, servers: int, placement: str, hosts: int | None = None
          ) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(worker hosts, server hosts), hosts named h1, h2, ..."""
    from bandwidth.launch.planning.hostfile import Host
    from bandwidth.launch.planning.placement import parse_policy
    from bandwidth.launch.planning.placement import place as policy_place

    if placement == "separate":
        placement, hosts = "servers-apart", workers + servers
    policy = parse_policy(placement)
    if hosts is None:
        if policy == "round-robin":
            hosts = max(workers, servers, 1)
        elif policy == "servers-apart":
            hosts = workers + servers
        else:
            per_host = int(policy.split(":")[1])
            hosts = -(-(workers + servers) // per_host)
    placed = [h.name for h in policy_place([Host(f"h{i + 1}") for i in range(hosts)], workers,
                                            servers, policy)]
    return tuple(placed[:workers]), tuple(placed[workers:])


def server_shares(shapes, servers: int, element_size: int,
                  keys: str = "mxnet") -> list[tuple[int, tuple[int, int]]]:
    """Per server: (bytes it holds, (messages per push, bytes of its last message)), by the
    same rules as the stores (bandwidth.stores.dist: the keys spread by ``keys``, MXNet's rule
    by default, the message ramp)."""
    from bandwidth.stores.dist import messages, server_pieces

    sizes = [sum(length for _, _, length in held)
             for held in server_pieces(shapes, servers, keys)]
    ranges, cursor = [], 0
    for size in sizes:
        ranges.append((cursor, cursor + size))
        cursor += size
    plan = messages(ranges, element_size)
    out = []
    for s, size in enumerate(sizes):
        mine = [(b - a) for owner, a, b in plan if owner == s]
        out.append((size * element_size, (len(mine), (mine[-1] if mine else 0) * element_size)))
    return out


def make_job(mode: str, shapes, workers: int, servers: int, *, rate_bits: float,
             placement: str = "round-robin", hosts: int | None = None,
             rate_of: dict | None = None, in_flight: int | None = None,
             ranks_per_worker: int = 1, element_size: int = 4, placed=None,
             server_keys: str = "auto", server_takes: str = "auto") -> Job:
    """The Job for a question; ``placed`` (worker hosts, server hosts) overrides the placement.
    ``server_keys`` and ``server_takes`` resolve "auto" as measure.py does (server_settings)."""
    if mode not in MODES:
        raise ConfigError(f"the model does not cover --kv-store {mode}: it predicts "
                          f"{', '.join(MODES)} (the modes whose bytes cross hosts' links)")
    if workers < 1:
        raise ConfigError(f"-n {workers}: a prediction needs at least one worker")
    ring = mode in RING_MODES
    if not ring and servers < 1:
        raise ConfigError(f"-s {servers}: {mode} needs at least one server")
    if in_flight is not None and in_flight < 1:
        raise ConfigError(f"--max-in-flight {in_flight}: give 1 or more (default: all)")
    nbytes = sum(math.prod(s) for _, s in shapes) * element_size
    worker_hosts, server_hosts = placed or place(workers, 0 if ring else servers, placement, hosts)
    rates = {h: float((rate_of or {}).get(h, rate_bits))
             for h in (*worker_hosts, *server_hosts)}
    if ring:
        return Job(mode, nbytes, tuple(worker_hosts), rates=rates,
                   ranks_per_worker=ranks_per_worker)
    refuse_server_takes(server_takes, mode, in_flight)
    takes, keys = server_settings(server_takes, server_keys, sync=mode.startswith("dist_sync"),
                                  workers=workers, servers=servers, max_in_flight=in_flight)
    held = server_shares(shapes, servers, element_size, keys)
    return Job(mode, nbytes, tuple(worker_hosts), tuple(server_hosts),
               shares=tuple(float(nb) for nb, _ in held), messages=tuple(m for _, m in held),
               rates=rates, in_flight=in_flight, server_takes=takes, server_keys=keys)
