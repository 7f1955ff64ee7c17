"""``python -m bandwidth.predict --plan``: where the bytes of a parameter-server job go, before any
process starts: per-host bytes each way, the servers' imbalance under MXNet's key rule, the
busiest link, and a better placement where one exists on the same hosts or with servers apart.
"""

from __future__ import annotations

from dataclasses import dataclass

from bandwidth.predict.jobs import make_job
from bandwidth.predict.model import Job, predict
from bandwidth.words import counted

# A placement is "better" when its step is at least this much shorter.
BETTER_BY = 0.05


@dataclass(frozen=True)
class Option:
    name: str
    job: Job
    seconds: float


def imbalance(shares) -> float:
    """The busiest server's share over the mean share (1.0: even)."""
    mean = sum(shares) / len(shares)
    return max(shares) / mean if mean else 1.0


def plan_lines(job: Job, params, alternatives: list[Option],
               balanced: Job | None = None) -> list[str]:
    """The plan's lines; ``balanced``: the same job with the keys balanced over the servers
    (named where MXNet's rule leaves an imbalance)."""
    lines = [f"# per host and step (MB out / MB in), {job.mode}, "
             f"{counted(len(job.worker_hosts), 'worker')} x "
             f"{counted(len(job.server_hosts), 'server')}:"]
    found = predict(job, params)
    traffic = found.host_bytes
    for host, (out, into) in traffic.items():
        roles = [f"worker {i}" for i, h in enumerate(job.worker_hosts) if h == host]
        roles += [f"server {i}" for i, h in enumerate(job.server_hosts) if h == host]
        lines.append(f"  {host:>6}  {out / 1e6:10.2f} out {into / 1e6:10.2f} in   "
                     f"{_roles(roles)}")
    if job.shares:
        shares = ", ".join(f"{s / 1e6:.2f}" for s in job.shares)
        rule = ("MXNet's key rule: arrays of 1M+ elements split evenly, smaller ones whole on "
                "server key*9973 % S" if job.server_keys == "mxnet"
                else "keys balanced over the servers")
        lines.append(f"# server shares ({rule}): {shares} MB; imbalance "
                     f"{imbalance(job.shares):.2f} x the mean")
        if balanced is not None and imbalance(job.shares) > 1 + BETTER_BY:
            now, even = found.seconds, predict(balanced, params).seconds
            lines.append(f"# with --server-keys balanced: {max(balanced.shares) / 1e6:.2f} MB on "
                         f"every server, {even:.4f} s per step predicted against {now:.4f} s, "
                         f"{now / even:.2f} x faster")
    host, seconds = max(((h, max(out, into) * 8 / job.rates[h]) for h, (out, into)
                         in traffic.items()), key=lambda item: item[1])
    if seconds > 0:
        out, into = traffic[host]
        lines.append(f"# busiest link: {host}, {max(out, into) / 1e6:.2f} MB per step, "
                     f"{seconds:.4f} s at {job.rates[host] / 1e9:g} Gbit/s (the full-duplex "
                     "bound)")
    lines += better_lines(alternatives)
    return lines


def better_lines(alternatives: list[Option]) -> list[str]:
    if len(alternatives) < 2:
        return []
    current, *others = alternatives
    best = min(others, key=lambda o: o.seconds)
    if best.seconds <= current.seconds * (1 - BETTER_BY):
        return [f"# better placement: {best.name}: {best.seconds:.4f} s per step predicted "
                f"against {current.seconds:.4f} s ({current.name}), "
                f"{current.seconds / best.seconds:.2f} x faster"]
    return [f"# no better placement found: {current.name} is within {BETTER_BY:.0%} of every "
            f"other tried ({', '.join(o.name for o in others)})"]


def alternatives(mode, shapes, workers, servers, *, params, current_placement, hosts, **kw
                 ) -> list[Option]:
    """The current placement first, then the others tried."""
    tried = [(current_placement, hosts)]
    for name, count in (("round-robin", hosts), ("servers-apart", hosts), ("separate", None),
                        ("round-robin", max(workers, servers) if hosts else None)):
        if (name, count) not in tried:
            tried.append((name, count))
    options = []
    for name, count in tried:
        job = make_job(mode, shapes, workers, servers, placement=name, hosts=count, **kw)
        hosts_used = len(set(job.worker_hosts) | set(job.server_hosts))
        options.append(Option(f"{name} on {hosts_used} hosts", job,
                              predict(job, params).seconds))
    return options


def servers_stop_binding(mode, shapes, workers: int, *, params, limit: int | None = None, **kw
                         ) -> int | None:
    """The least S at which, with every server on a host of its own, no server's resource (link
    or CPU) exceeds the slowest other one; None: not within ``limit`` (default 4 W) servers.
    Found by bisection (servers bind less as S grows)."""
    def servers_bind(servers: int) -> bool:
        job = make_job(mode, shapes, workers, servers, placement="separate", **kw)
        resources = predict(job, params).resources
        serving = max(t for name, t in resources.items() if name.startswith("server"))
        other = max(t for name, t in resources.items() if not name.startswith("server"))
        return serving > other * (1 + 1e-9)

    low, high = 1, limit or 4 * workers
    if servers_bind(high):
        return None
    while low < high:
        middle = (low + high) // 2
        if servers_bind(middle):
            low = middle + 1
        else:
            high = middle
    return low


def _roles(roles: list[str]) -> str:
    if len(roles) <= 4:
        return ", ".join(roles)
    return ", ".join(roles[:3]) + f", ... ({len(roles)} processes)"
