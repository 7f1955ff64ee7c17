"""Placement policies of a parameter-server job, and what each costs the hosts' links: pure
functions, no process started (the launcher's ``--placement`` and the planner both call them).

Processes are in rank order: workers ``0..W-1``, then servers ``W..W+S-1``. A policy maps them to
hosts (``place``):

* ``round-robin`` (the default, MXNet's launcher dealt the same way): one process at a time to the
  hosts in file order, cycling, skipping a host whose ``slots=N`` are taken;
* ``servers-apart``: servers on hosts of their own. The last ``k`` hosts take the servers and the
  others the workers, ``k`` in proportion to S / (W + S), at least 1, leaving at least one host
  for workers; each side dealt round-robin;
* ``count:N``: N processes per host in rank order (workers first, then servers), host after host;
  more than a host's ``slots=M`` is refused.

What crosses a host's link per step (``bandwidth.links.linkbound.host_bytes``; docs/formulas.md,
"Held to the link"): a worker on ``h`` pushes each server not on ``h`` that server's share and pulls it back; a server on
``h`` receives its share from every worker not on ``h`` and answers each. Every process on a host
counts on that host's one link, each way. The shares come from MXNet's key rule
(``bandwidth.stores.dist.server_pieces``: arrays of at least 1e6 elements split evenly over the
servers, smaller ones whole on server ``key * 9973 % S``), which the caller passes in bytes::

    from bandwidth.stores.dist import ps_layout
    _, ranges = ps_layout(shapes, S, 1, by_owner=False)
    shares = [(b - a) * 4 for a, b in ranges]                       # float32
    placed = place(hosts, W, S, "servers-apart")
    traffic = host_bytes(placed, W, shares)                          # {host: (out, in)}
    busiest(traffic), imbalance(shares), better_placement(hosts, W, S, shares)
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from bandwidth.errors import ConfigError
from bandwidth.launch.planning.hostfile import Host
from bandwidth.links.linkbound import host_bytes

POLICIES = ("round-robin", "servers-apart", "count:N")


def parse_policy(text: str) -> str:
    """A policy's name as given (``round-robin``, ``servers-apart``, ``count:N``), checked."""
    if text in POLICIES[:2]:
        return text
    name, _, count = text.partition(":")
    if name == "count" and count.isdigit() and int(count) >= 1:
        return f"count:{int(count)}"
    raise ConfigError(f"--placement {text[:40]!r}: expected round-robin, servers-apart or "
                      "count:N (N processes per host, N >= 1)")


def place(hosts: Sequence[Host], workers: int, servers: int,
          policy: str = "round-robin") -> list[Host]:
    """The host of each process in rank order (workers, then servers) under ``policy``."""
    policy = parse_policy(policy)
    if policy == "round-robin":
        return deal(hosts, workers + servers)
    if policy == "servers-apart":
        if servers == 0 or len(hosts) < 2:
            return deal(hosts, workers + servers)
        k = server_host_count(len(hosts), workers, servers)
        return deal(hosts[:len(hosts) - k], workers) + deal(hosts[len(hosts) - k:], servers)
    return fill(hosts, workers + servers, int(policy.split(":")[1]))


def server_host_count(hosts: int, workers: int, servers: int) -> int:
    """How many hosts ``servers-apart`` gives the servers: in proportion to S / (W + S), at least
    one, and at least one host left for the workers."""
    return max(1, min(hosts - 1, round(hosts * servers / (workers + servers))))


def deal(hosts: Sequence[Host], count: int) -> list[Host]:
    """Round-robin within slots: the host of each of ``count`` processes."""
    capacity = [h.slots for h in hosts]
    if all(c is not None for c in capacity) and sum(capacity) < count:
        raise ConfigError(f"{count} processes do not fit in the hosts file's {sum(capacity)} "
                          "slots: add hosts, raise slots=N, or drop slots= to lift the limit")
    placed: list[Host] = []
    used: Counter = Counter()
    index = 0
    while len(placed) < count:
        host = hosts[index % len(hosts)]
        index += 1
        if host.slots is None or used[host] < host.slots:
            used[host] += 1
            placed.append(host)
    return placed


def fill(hosts: Sequence[Host], count: int, per_host: int) -> list[Host]:
    """``per_host`` processes on each host in turn (never beyond its slots)."""
    placed: list[Host] = []
    for host in hosts:
        take = min(per_host, count - len(placed))
        if host.slots is not None and take > host.slots:
            raise ConfigError(f"--placement count:{per_host} puts {take} processes on {host}, "
                              f"which has slots={host.slots}: lower N or raise its slots")
        placed += [host] * take
    if len(placed) < count:
        raise ConfigError(f"--placement count:{per_host}: {count} processes do not fit on "
                          f"{len(hosts)} hosts at {per_host} per host (within slots); raise N or "
                          "add hosts")
    return placed


def busiest(traffic: dict[str, tuple[float, float]]) -> tuple[str, float, float] | None:
    """(host, bytes out, bytes in) of the host whose link carries most either way; None when
    there is no host."""
    if not traffic:
        return None
    host, (out, into) = max(traffic.items(), key=lambda item: max(item[1]))
    return host, out, into


def imbalance(server_nbytes: Sequence[float]) -> float:
    """The busiest server's share over the mean share (1.0: even; MXNet's key rule puts small
    arrays whole on one server, so it is rarely exactly 1)."""
    if not server_nbytes or sum(server_nbytes) == 0:
        return 1.0
    return max(server_nbytes) / (sum(server_nbytes) / len(server_nbytes))


def better_placement(hosts: Sequence[Host], workers: int, servers: int,
                     server_nbytes: Sequence[float],
                     current: str = "round-robin") -> tuple[str, float] | None:
    """The policy whose busiest link carries least, with those bytes, when it beats ``current``
    by more than 1 %; None when none does. Tries round-robin, servers-apart and count:N for every
    N that fits."""
    def load(policy: str) -> float:
        found = busiest(host_bytes(place(hosts, workers, servers, policy), workers,
                                   server_nbytes))
        return max(found[1], found[2]) if found else 0.0

    total = workers + servers
    candidates = ["round-robin", "servers-apart"] + [
        f"count:{n}" for n in range(-(-total // len(hosts)), total + 1)]
    scored = []
    for policy in candidates:
        try:
            scored.append((load(policy), policy))
        except ConfigError:                    # does not fit the slots
            continue
    mine = load(current)
    best_bytes, best = min(scored)
    return (best, best_bytes) if best_bytes < 0.99 * mine else None
