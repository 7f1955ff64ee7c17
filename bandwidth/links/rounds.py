"""Finding the slow host and the slow path in rounds of disjoint pairs, not in a full matrix.

The full host-to-host matrix measures N(N-1) cells one at a time. This planner measures in
*rounds*: each round is a set of disjoint pairs that run at once, every pair in both directions.
The caller drives it, so the same code runs inside a job and in a simulation::

    search = RoundSearch(["0@10.0.0.1", "1@10.0.0.2", ...])
    while (pairs := search.next_round()):
        search.record({(a, b): gbps_a_to_b, (b, a): gbps_b_to_a, ...})    # for each (a, b)
    verdict = search.verdict()       # slow hosts, slow paths, unresolved ones, rounds taken

The procedure, and its rules (``judge``, on every measurement so far):

1. **Screening**: ``screen_rounds`` rounds of the round robin (the circle method over the hosts
   in a seeded order): every host busy in each round (one sits out when N is odd), no pair twice.
   The default is ceil(log2 N) rounds; ``"all"`` is the whole round robin (N-1 rounds, N when N
   is odd), which measures every pair once.
2. The **reference** is what a healthy host reaches: the median over hosts of each host's best
   cell. A pair is **slow** when either direction is below ``min_percent`` of it (70 % as
   ``python -m bandwidth.hostgate``'s default). A host with a pair that is not slow is
   **healthy**: it has shown the rate.
3. **Re-pairing**: each host of a slow pair that has not shown the rate is paired with a healthy
   host it has not met; a host slow with ``NEED_HOST`` (2) different healthy hosts, and fast with
   none, is a **slow host**. So each round halves a slow pair: of its two hosts, the one that is
   fast with a healthy host is cleared and the blame narrows to the other, or to the path.
4. A slow pair of two healthy hosts is measured again: slow ``NEED_PATH`` (3) times in the same
   direction it is a **slow path** (named by its slow direction, or both); fast once, or slow in
   changing directions, it was a transient (someone else's burst), and is not named.
5. The search ends when nothing is left to decide, or after ``RESOLVE_ROUNDS`` (3) rounds past
   the screening (3 + ceil(log2 N) after a screening longer than the default, which meets more
   bursts to measure again): what is still undecided is reported as unresolved, never guessed.

What it cannot see: a path is judged only if its pair is measured. A slow host shows in its
first round, so hosts need no more than the screening's first round and the re-pairing; but a
path slow between two hosts only is found in the screening with chance ``screen_rounds / (N-1)``
(a pair at a time is the only way to see a 50 % path: sending to several peers at once shares
the link below the path's own limit). ``"all"`` finds every such path, in N rounds rather than
the matrix's N(N-1) cells.
"""

from __future__ import annotations

import math
import random
import statistics
from dataclasses import dataclass, field

from bandwidth.errors import ConfigError
from bandwidth.links.roundbook import Measurement, RoundBook, check_percent, full_round_robin

DEFAULT_PCT = 70.0
NEED_HOST = 2           # healthy partners a slow host must be slow with
NEED_PATH = 3           # measurements a slow path must be slow in (all of them)
RESOLVE_ROUNDS = 3      # rounds of re-pairing after the screening, at most


@dataclass(frozen=True)
class SlowHost:
    host: str
    out_gbps: float          # median of what it sent to healthy hosts
    in_gbps: float           # median of what it received from them
    partners: int            # healthy hosts it was slow with


@dataclass(frozen=True)
class SlowPath:
    src: str
    dst: str
    gbps: float              # median from src to dst
    reverse_gbps: float      # median from dst to src
    both: bool               # the reverse direction is slow too

    @property
    def name(self) -> str:
        """``a->b`` slow one way; slow both ways, the pair as every table names it (the lower
        name first), whichever way was the slower (``direction``)."""
        if self.both:
            a, b = sorted((self.src, self.dst))
            return f"{a}<->{b}"
        return self.direction

    @property
    def direction(self) -> str:
        """The slower direction, ``src->dst``."""
        return f"{self.src}->{self.dst}"


@dataclass(frozen=True)
class Judgment:
    """What the measurements so far say; ``pending_*`` is what another round could decide."""

    reference_gbps: float
    threshold_gbps: float
    healthy: frozenset[str]
    slow_hosts: tuple[SlowHost, ...]
    slow_paths: tuple[SlowPath, ...]
    pending_hosts: tuple[str, ...]                    # need a round with a healthy host
    pending_paths: tuple[tuple[str, str], ...]        # need their pair measured again
    transient: tuple[tuple[str, str], ...]            # slow once, then fast


@dataclass(frozen=True)
class RoundVerdict:
    hosts: tuple[str, ...]
    min_percent: float
    rounds: int
    screen_rounds: int
    reference_gbps: float
    threshold_gbps: float
    slow_hosts: tuple[SlowHost, ...]
    slow_paths: tuple[SlowPath, ...]
    unresolved: tuple[tuple[str, str], ...]           # (host or pair, why)
    transient: tuple[tuple[str, str], ...]
    pairs_measured: int                               # distinct pairs measured
    pairs_total: int                                  # N(N-1)/2
    round_pairs: tuple[int, ...] = field(default=())  # pairs in each round

    @property
    def failed(self) -> bool:
        return bool(self.slow_hosts or self.slow_paths or self.unresolved)


def _pair_key(a: str, b: str) -> tuple[str, str]:
    return (a, b) if a < b else (b, a)


def directed(m: Measurement, src: str) -> tuple[float, float]:
    """(from src, to src) of a measurement that src is in."""
    return (m.gbps_ab, m.gbps_ba) if m.a == src else (m.gbps_ba, m.gbps_ab)


def judge(hosts: tuple[str, ...], measurements: list[Measurement],
          min_percent: float) -> Judgment:
    """The rules of the module's docstring, on every measurement so far."""
    best: dict[str, float] = {}
    for m in measurements:
        top = max(m.gbps_ab, m.gbps_ba)
        for h in (m.a, m.b):
            if top > best.get(h, 0.0):
                best[h] = top
    reference = statistics.median(best.values())
    threshold = reference * min_percent / 100.0
    healthy_set: set[str] = set()
    slow_of: dict[str, list[Measurement]] = {}        # each host's slow measurements
    slow_keys: set[tuple[str, str]] = set()
    for m in measurements:
        if min(m.gbps_ab, m.gbps_ba) >= threshold:
            healthy_set.update((m.a, m.b))
        else:
            slow_of.setdefault(m.a, []).append(m)
            slow_of.setdefault(m.b, []).append(m)
            slow_keys.add(_pair_key(m.a, m.b))
    healthy = frozenset(healthy_set)
    slow_hosts, pending_hosts = [], []
    for h in hosts:
        if h in healthy:
            continue
        # not healthy: every measurement of h (if any) is slow
        mine = [m for m in slow_of.get(h, ()) if (m.b if m.a == h else m.a) in healthy]
        partners = {m.b if m.a == h else m.a for m in mine}
        if len(partners) >= NEED_HOST:
            rates = [directed(m, h) for m in mine]
            slow_hosts.append(SlowHost(h, statistics.median(o for o, _ in rates),
                                       statistics.median(i for _, i in rates), len(partners)))
        else:
            pending_hosts.append(h)
    by_pair: dict[tuple[str, str], list[Measurement]] = {
        key: [] for key in slow_keys if set(key) <= healthy}
    for m in measurements:
        key = _pair_key(m.a, m.b)
        if key in by_pair:
            by_pair[key].append(m)
    slow_paths, pending_paths, transient = [], [], []
    for key, ms in sorted(by_pair.items(), key=lambda item: (-len(item[1]), item[0])):
        a, b = key
        if not (all(directed(m, a)[0] < threshold for m in ms)
                or all(directed(m, b)[0] < threshold for m in ms)):
            transient.append(key)          # fast once, or slow in changing directions
        elif len(ms) < NEED_PATH:
            pending_paths.append(key)      # the ones measured most first: closest to a verdict
        else:
            slow_paths.append(slow_path(key, ms, threshold))
    return Judgment(reference, threshold, healthy, tuple(slow_hosts), tuple(sorted(slow_paths,
                    key=lambda p: (p.src, p.dst))), tuple(pending_hosts), tuple(pending_paths),
                    tuple(sorted(transient)))


def slow_path(key: tuple[str, str], ms: list[Measurement], threshold: float) -> SlowPath:
    """The pair's slower direction as src -> dst (by medians), and whether the other is slow."""
    a, b = key
    ab = statistics.median(directed(m, a)[0] for m in ms)
    ba = statistics.median(directed(m, b)[0] for m in ms)
    if ba < ab:
        a, b, ab, ba = b, a, ba, ab
    return SlowPath(a, b, ab, ba, ba < threshold)


class RoundSearch(RoundBook):
    """The planner: ``next_round()`` the pairs to measure (empty when done), ``record()`` their
    rates, ``verdict()`` what they say. Hosts are any distinct names (``rank@host`` in a job)."""

    def __init__(self, hosts, min_percent: float = DEFAULT_PCT,
                 screen_rounds: int | str | None = None, seed: int = 0):
        hosts = tuple(hosts) if not isinstance(hosts, str) else (hosts,)
        if len(hosts) < 2:
            raise ConfigError(f"rounds need at least two hosts to pair; got {len(hosts)} "
                              f"({', '.join(map(str, hosts)) or 'none'})")
        if not all(isinstance(h, str) and h for h in hosts):
            raise ConfigError("every host must be a non-empty name; got "
                              + ", ".join(repr(h) for h in hosts if not isinstance(h, str) or not h))
        twice = sorted({h for h in hosts if hosts.count(h) > 1}) if len(set(hosts)) < len(hosts) \
            else []
        if twice:
            raise ConfigError(f"each host must be named once; named more than once: "
                              f"{', '.join(twice[:5])}")
        check_percent("min_percent", min_percent)
        self.hosts = hosts
        self.min_percent = float(min_percent)
        screen = self._screen(screen_rounds, len(hosts))
        # A long screening meets more bursts, each a slow pair to measure again, and a host in
        # several of them takes one a round: log2 N more rounds of re-pairing, as many as the
        # default screening has rounds, where the screening is longer than the default's.
        default = self._screen(None, len(hosts))
        extra = math.ceil(math.log2(len(hosts))) if screen > default else 0
        order = list(hosts)
        random.Random(seed).shuffle(order)
        super().__init__(order, screen, screen + RESOLVE_ROUNDS + extra)

    @staticmethod
    def _screen(value, n: int) -> int:
        full = full_round_robin(n)
        if value is None:
            return min(full, max(1, math.ceil(math.log2(n))))
        if value == "all":
            return full
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= full:
            raise ConfigError(f"screen rounds must be a whole number from 1 to {full} (the whole "
                              f"round robin of {n} hosts) or 'all'; got {value!r}")
        return value

    def _again(self) -> list[tuple[str, str]]:
        """Pairs that can decide something: pending paths measured again, each pending host with
        a healthy host it has not met (spread over the healthy hosts)."""
        j = judge(self.hosts, self._measurements, self.min_percent)
        busy: set[str] = set()
        pairs = []
        for a, b in j.pending_paths:
            if a not in busy and b not in busy:
                pairs.append((a, b))
                busy.update((a, b))
        met: dict[str, set[str]] = {h: set() for h in j.pending_hosts}
        for m in self._measurements:
            if m.a in met:
                met[m.a].add(m.b)
            if m.b in met:
                met[m.b].add(m.a)
        named = {s.host for s in j.slow_hosts}
        partners = [h for h in self._order if h in j.healthy and h not in named]
        start = self.rounds * 7919                        # a different healthy host each round
        for host in j.pending_hosts:
            if host in busy:
                continue
            for k in range(len(partners)):
                p = partners[(start + k) % len(partners)]
                if p not in busy and p not in met.get(host, ()):
                    pairs.append((p, host))
                    busy.update((p, host))
                    start += k + 1
                    break
        return pairs

    def verdict(self) -> RoundVerdict:
        if not self._measurements:
            raise ConfigError("no round measured yet: nothing to judge")
        return verdict_of(self.hosts, self._measurements, self.min_percent, self.screen_rounds,
                          self._round_pairs)


def verdict_of(hosts: tuple[str, ...], measurements: list[Measurement], min_percent: float,
               screen_rounds: int, round_pairs: list[int]) -> RoundVerdict:
    """The verdict on recorded measurements (a job's document read back as well as a live
    search): what is still pending is unresolved, with the reason."""
    j = judge(tuple(hosts), list(measurements), min_percent)
    met = {h for m in measurements for h in (m.a, m.b)}
    unresolved = []
    for h in j.pending_hosts:
        # measured and not healthy: slow with every host it met
        unresolved.append((h, "never measured" if h not in met else
                           f"slow with every host it met, but with fewer than {NEED_HOST} "
                           "hosts that reach the rate with others"))
    pairs: dict[tuple[str, str], int] = {}
    for m in measurements:
        key = _pair_key(m.a, m.b)
        pairs[key] = pairs.get(key, 0) + 1
    for a, b in j.pending_paths:
        unresolved.append((f"{a}<->{b}", f"slow in each of its {pairs[(a, b)]} measurements, "
                                         f"fewer than the {NEED_PATH} that name a path: no round "
                                         "left to measure it again"))
    n = len(hosts)
    return RoundVerdict(tuple(hosts), min_percent, len(round_pairs), screen_rounds,
                        j.reference_gbps, j.threshold_gbps, j.slow_hosts, j.slow_paths,
                        tuple(unresolved), j.transient, len(pairs), n * (n - 1) // 2,
                        tuple(round_pairs))
