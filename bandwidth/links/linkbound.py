"""The link bound of a distributed run: the least time a step can take when every host's link
carries RATE out and RATE in at once (full duplex), from which bytes cross which link per step.

    python launch.py -H hosts -n 2 -s 2 python bandwidth/measure.py --kv-store dist_sync \
        --link-rate 1gbit

The derivation is in docs/formulas.md ("Held to the link"). In short, for every host ``h``:

* parameter-server modes: a worker on ``h`` sends each server not on ``h`` that server's share of
  the ``S`` bytes and receives as much back; a server on ``h`` receives its share from every worker
  not on ``h`` and sends it back to each;
* ``dist_nccl`` (a ring all-reduce over ``R`` ranks, ranks of one worker adjacent): every ring
  edge from a rank on ``h`` to a rank on another host carries ``2 (R-1)/R S`` per step.

bound = max over hosts of max(bytes out, bytes in) / rate; ``% of link`` = bound / measured step.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from bandwidth.errors import ConfigError

_RATE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([kmgt]?)(?:bit)?(?:/s|ps)?\s*$", re.IGNORECASE)
_SCALE = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}


def parse_rate(text: str, flag: str = "rate") -> int:
    """``1gbit``, ``2.5gbit``, ``500mbit``, ``10G``, ``1Gbit/s`` -> bits per second."""
    match = _RATE.match(text)
    if not match or float(match.group(1)) <= 0:
        raise ConfigError(f"{flag} {text!r}: expected a positive number of bits per second such "
                          "as 1gbit, 2.5gbit, 500mbit (k, m, g: 10^3, 10^6, 10^9 bits)")
    return int(float(match.group(1)) * _SCALE[match.group(2).lower()])


@dataclass(frozen=True)
class LinkBound:
    rate_bits: int
    seconds: float               # the bound: least seconds per step
    host: str                    # the busiest host
    nbytes_out: float            # what it sends per step
    nbytes_in: float             # and receives
    pct: float | None = None     # the run's median step against the bound

    def to_dict(self) -> dict:
        return {"rate_bits_per_s": self.rate_bits, "seconds": self.seconds, "host": self.host,
                "bytes_out": self.nbytes_out, "bytes_in": self.nbytes_in, "pct": self.pct}

    def line(self) -> str:
        text = (f"#   link bound (--link-rate {self.rate_bits / 1e9:g} Gbit/s each way, full "
                f"duplex): {self.seconds:.6f} s per step ({self.host} sends "
                f"{self.nbytes_out / 1e6:.2f} MB and receives {self.nbytes_in / 1e6:.2f} MB)")
        if self.pct is not None:
            text += f"; this run: {self.pct:.1f} % of link"
        return text


def host_bytes(placed: Sequence[object], workers: int,
               server_nbytes: Sequence[float]) -> dict[str, tuple[float, float]]:
    """(bytes out, bytes in) per host and step of processes placed in rank order (workers, then
    servers; a host is its name, or anything whose ``str`` is, such as a launch.hostfile.Host),
    every process on the host counted; hosts keyed by name in first-use order."""
    names = [str(h) for h in placed]
    worker_hosts, server_hosts = names[:workers], names[workers:]
    out: Counter = Counter()
    into: Counter = Counter()
    for server, share in zip(server_hosts, server_nbytes):
        apart = sum(1 for w in worker_hosts if w != server)
        out[server] += apart * share          # the answers
        into[server] += apart * share         # the pushes
    total = sum(server_nbytes)
    for worker in worker_hosts:
        remote = total - sum(share for server, share in zip(server_hosts, server_nbytes)
                             if server == worker)
        out[worker] += remote                 # its pushes
        into[worker] += remote                # the answers
    return {h: (float(out[h]), float(into[h])) for h in dict.fromkeys(names)}


def ps_host_bytes(worker_hosts: Sequence[str], server_hosts: Sequence[str],
                  server_nbytes: Sequence[float]) -> dict[str, tuple[float, float]]:
    """(bytes out, bytes in) per host and step of a parameter-server step, every process on a
    host counted on its link (``host_bytes``)."""
    return host_bytes([*worker_hosts, *server_hosts], len(worker_hosts), server_nbytes)


def ring_host_bytes(rank_hosts: Sequence[str], nbytes: float) -> dict[str, tuple[float, float]]:
    """(bytes out, bytes in) per host and step of a ring all-reduce over ranks in this order."""
    ranks = len(rank_hosts)
    per_edge = 2 * (ranks - 1) / ranks * nbytes if ranks > 1 else 0.0
    out: Counter = Counter()
    into: Counter = Counter()
    for r, host in enumerate(rank_hosts):
        nxt = rank_hosts[(r + 1) % ranks]
        if nxt != host:
            out[host] += per_edge
            into[nxt] += per_edge
    return {h: (float(out[h]), float(into[h])) for h in dict.fromkeys(rank_hosts)}


def link_bound(host_bytes: dict[str, tuple[float, float]], rate_bits: int,
               step_seconds: float | None = None) -> LinkBound | None:
    """The bound from per-host traffic; None when nothing crosses a link."""
    if not host_bytes:
        return None
    host, (out, into) = max(host_bytes.items(), key=lambda item: max(item[1]))
    if max(out, into) == 0:
        return None
    seconds = max(out, into) * 8 / rate_bits
    pct = 100 * seconds / step_seconds if step_seconds else None
    return LinkBound(rate_bits, seconds, host, out, into, pct)
