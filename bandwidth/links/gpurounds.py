"""The GPUs of one host checked in rounds of disjoint pairs: which GPU, GPU pair or host link is
slow. Pure (no torch), so the ceiling's measurement and a model of pair rates drive the same code::

    check = GpuRounds(["GPU 0", "GPU 1", ...], host_links, expected_pairs)
    while (pairs := check.next_round()):
        check.record({(a, b): gbps_a_to_b, (b, a): gbps_b_to_a, ...})   # both ways at once
    verdict = check.verdict()     # slow GPUs, slow host links, slow pairs, unresolved, rounds

The host check of bandwidth.links.rounds, made for the GPUs of one host. Its round robin
(``screen_pairs``), its measurements and its rules of blame are the same; what differs:

1. **Every pair is measured**: the whole round robin (N-1 rounds, N when N is odd), each pair
   both ways at once. A round of GPU copies takes milliseconds, so no pair is left unmet and no
   re-pairing is needed; then each slow pair is measured again, disjoint pairs a round, at most
   ``RESOLVE_ROUNDS`` (3) rounds more.
2. **The reference of a pair** (``rule``):
   ``median`` -- with three GPUs or more whose pairs are alike (NVML shows the same link between
   every pair, or does not say): the upper median over GPUs of each GPU's best direction with
   any peer; a pair is slow when either direction is below ``min_percent`` (70) % of it.
   ``expected`` -- with two GPUs (one pair: no median to take), or where NVML shows pairs of
   different kinds (NVLink between some, PCIe between others): each pair against what NVML
   says its link carries, slow below ``expect_percent`` (60, as ``--expect-links``) % of it;
   a pair NVML says nothing about is slow only when one direction is below ``min_percent`` % of
   the other.
3. **Blame**, as the host check's: a GPU in a pair that is not slow has shown the rate
   (healthy). A GPU slow with ``NEED_HOST`` (2) healthy GPUs and fast with none is a **slow
   GPU** (slow with every peer). A slow pair of which neither GPU is a slow GPU is a **slow
   pair** once it was slow ``NEED_PATH`` (3) times in the same direction (fast once, or slow in
   changing directions: a transient, not named); the verdict says what that rests on: both GPUs
   fast with others (the path), both GPUs' host links normal (the path, not a GPU: on two GPUs
   this is all there is to go on), or neither (a GPU cannot be ruled out). **A GPU is never
   blamed without two healthy GPUs it is slow with**, so on two GPUs a pair is never blamed on
   either GPU.
4. **A GPU's host link** (pinned host->device and device->host, each GPU alone, the slower
   direction) is slow below ``min_percent`` % of the upper median of the GPUs' host links; with
   fewer than three GPUs also below ``expect_percent`` % of NVML's PCIe figure, where known.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from bandwidth.errors import ConfigError
from bandwidth.links.roundbook import Measurement, RoundBook, check_percent, full_round_robin
from bandwidth.links.rounds import (NEED_HOST, NEED_PATH, RESOLVE_ROUNDS, SlowHost, SlowPath,
                                    directed, slow_path)

DEFAULT_PCT = 70.0
EXPECT_PCT = 60.0


@dataclass(frozen=True)
class HostLink:
    """One GPU's pinned copies to and from host memory, measured alone; NVML's PCIe figure."""

    gpu: str
    h2d_gbps: float
    d2h_gbps: float
    expected_gbps: float | None = None
    basis: str = ""

    @property
    def gbps(self) -> float:
        return min(self.h2d_gbps, self.d2h_gbps)


@dataclass(frozen=True)
class SlowLink:
    gpu: str
    gbps: float
    threshold_gbps: float
    why: str


@dataclass(frozen=True)
class NamedPair:
    path: SlowPath
    threshold_gbps: float
    conclusion: str          # what the naming rests on, in words


@dataclass(frozen=True)
class GpuVerdict:
    gpus: tuple[str, ...]
    rule: str                                     # "median", "expected" or "none" (one GPU)
    min_percent: float
    expect_percent: float
    rounds: int
    round_pairs: tuple[int, ...]
    pair_reference_gbps: float | None             # the median rule's reference
    host_reference_gbps: float | None
    slow_gpus: tuple[SlowHost, ...]
    slow_host_links: tuple[SlowLink, ...]
    slow_pairs: tuple[NamedPair, ...]
    unresolved: tuple[tuple[str, str], ...]       # (pair, why)
    transient: tuple[tuple[str, str], ...]
    pairs_measured: int
    pairs_total: int
    notes: tuple[str, ...] = field(default=())

    @property
    def failed(self) -> bool:
        return bool(self.slow_gpus or self.slow_host_links or self.slow_pairs or self.unresolved)


def pair_key(a: str, b: str) -> tuple[str, str]:
    return (a, b) if a < b else (b, a)


def pair_name(a: str, b: str, both: bool = True) -> str:
    return f"{a}{'<->' if both else '->'}{b}"


def choose_rule(n: int, expected_pairs: dict) -> str:
    """``none`` (one GPU), ``expected`` (two, or pairs of different kinds), else ``median``."""
    if n < 2:
        return "none"
    known = {v for v in expected_pairs.values() if v}
    return "expected" if n == 2 or len(known) > 1 else "median"


def thresholds(rule: str, measurements: list[Measurement], expected: dict, min_pct: float,
               expect_pct: float) -> tuple[float | None, dict[tuple[str, str], float]]:
    """(the median rule's reference or None, each measured pair's threshold in GB/s)."""
    by_pair: dict[tuple[str, str], list[Measurement]] = {}
    best: dict[str, float] = {}
    for m in measurements:
        by_pair.setdefault(pair_key(m.a, m.b), []).append(m)
        for g in (m.a, m.b):
            best[g] = max(best.get(g, 0.0), m.gbps_ab, m.gbps_ba)
    reference = statistics.median_high(best.values()) if rule == "median" and best else None
    out = {}
    for key, ms in by_pair.items():
        if reference is not None:
            out[key] = reference * min_pct / 100.0
        elif expected.get(key):
            out[key] = expected[key] * expect_pct / 100.0
        else:                       # nothing to hold it against but its own faster direction
            out[key] = max(max(m.gbps_ab, m.gbps_ba) for m in ms) * min_pct / 100.0
    return reference, out


def host_link_verdicts(links: list[HostLink], min_pct: float, expect_pct: float
                       ) -> tuple[float | None, list[SlowLink]]:
    """(the upper median of the GPUs' host links, the slow ones) by rule 4."""
    if not links:
        return None, []
    reference = statistics.median_high(link.gbps for link in links)
    slow = []
    for link in links:
        broken = []                                    # (floor GB/s, why)
        floor = reference * min_pct / 100.0
        if link.gbps < floor:
            broken.append((floor, f"below {min_pct:g} % of the GPUs' upper median "
                                  f"{reference:.2f} GB/s"))
        floor = (link.expected_gbps or 0.0) * expect_pct / 100.0
        if len(links) < 3 and link.gbps < floor:
            broken.append((floor, f"below {expect_pct:g} % of NVML's {link.expected_gbps:.1f} "
                                  f"GB/s ({link.basis or 'PCIe'})"))
        if broken:
            slow.append(SlowLink(link.gpu, link.gbps, max(f for f, _ in broken),
                                 f"host->device {link.h2d_gbps:.2f}, device->host "
                                 f"{link.d2h_gbps:.2f} GB/s: " + "; ".join(w for _, w in broken)))
    return reference, slow


@dataclass(frozen=True)
class _Judgment:
    reference: float | None
    limits: dict
    healthy: frozenset
    slow_gpus: tuple
    named: tuple
    pending: tuple
    transient: tuple


def judge(gpus: tuple[str, ...], measurements: list[Measurement], rule: str, expected: dict,
          host_slow: set[str], host_known: set[str], min_pct: float, expect_pct: float
          ) -> _Judgment:
    """Rules 2 and 3 of the module's docstring on every measurement so far."""
    reference, limits = thresholds(rule, measurements, expected, min_pct, expect_pct)
    healthy, slow_with, by_pair = set(), {}, {}
    for m in measurements:
        key = pair_key(m.a, m.b)
        by_pair.setdefault(key, []).append(m)
        if min(m.gbps_ab, m.gbps_ba) >= limits[key]:
            healthy.update(key)
        else:
            slow_with.setdefault(m.a, []).append(m)
            slow_with.setdefault(m.b, []).append(m)
    slow_gpus = []
    for g in gpus:
        mine = [m for m in slow_with.get(g, ()) if (m.b if m.a == g else m.a) in healthy]
        partners = {m.b if m.a == g else m.a for m in mine}
        if g not in healthy and len(partners) >= NEED_HOST:
            rates = [directed(m, g) for m in mine]
            slow_gpus.append(SlowHost(g, statistics.median(o for o, _ in rates),
                                      statistics.median(i for _, i in rates), len(partners)))
    blamed = {s.host for s in slow_gpus}
    named, pending, transient = [], [], []
    for key, ms in sorted(by_pair.items()):
        a, b = key
        limit = limits[key]
        if set(key) & blamed or all(min(m.gbps_ab, m.gbps_ba) >= limit for m in ms):
            continue
        if not (all(directed(m, a)[0] < limit for m in ms)
                or all(directed(m, b)[0] < limit for m in ms)):
            transient.append(key)
        elif len(ms) < NEED_PATH:
            pending.append(key)
        else:
            named.append(NamedPair(slow_path(key, ms, limit), limit,
                                   _conclusion(key, healthy, host_slow, host_known)))
    return _Judgment(reference, limits, frozenset(healthy), tuple(slow_gpus), tuple(named),
                     tuple(pending), tuple(transient))


def _conclusion(key, healthy: set, host_slow: set, host_known: set) -> str:
    """What naming the pair rests on (rule 3), in words."""
    if set(key) <= healthy:
        return "both GPUs reach the rate with other GPUs: the path"
    suspects = sorted(set(key) & host_slow)
    if suspects:
        return (f"{' and '.join(suspects)}'s host link is slow too: the pair cannot tell the "
                "path from that GPU")
    if set(key) <= host_known:
        return ("both GPUs' host links are normal: the path between them, not a GPU (no GPU "
                "is blamed without two healthy GPUs it is slow with)")
    return "no other measurement of these GPUs: the path or either GPU"


class GpuRounds(RoundBook):
    """The planner: ``next_round()``, ``record()``, ``verdict()`` (as bandwidth.links.rounds'
    RoundSearch); ``host_links`` measured before, ``expected_pairs`` {(a, b) sorted: GB/s}."""

    def __init__(self, gpus, host_links=(), expected_pairs=None,
                 min_percent: float = DEFAULT_PCT, expect_percent: float = EXPECT_PCT):
        gpus = tuple(gpus) if not isinstance(gpus, str) else (gpus,)
        if not gpus or not all(isinstance(g, str) and g for g in gpus):
            raise ConfigError(f"the GPU check needs at least one GPU, each a non-empty name; got "
                              f"{list(gpus)!r}")
        if len(set(gpus)) < len(gpus):
            raise ConfigError(f"each GPU must be named once; got {', '.join(gpus)}")
        check_percent("min_percent", min_percent)
        check_percent("expect_percent", expect_percent)
        self.gpus, self.host_links = gpus, tuple(host_links)
        unknown = sorted({link.gpu for link in self.host_links} - set(gpus))
        if unknown:
            raise ConfigError(f"host links of GPUs not in the check: {', '.join(unknown)}")
        self.expected = {pair_key(*k): v for k, v in (expected_pairs or {}).items()
                         if v and set(k) <= set(gpus)}
        self.min_percent, self.expect_percent = float(min_percent), float(expect_percent)
        self.rule = choose_rule(len(gpus), self.expected)
        screen = full_round_robin(len(gpus)) if len(gpus) > 1 else 0
        super().__init__(list(gpus), screen, screen + RESOLVE_ROUNDS if len(gpus) > 1 else 0)

    def _judge(self) -> _Judgment:
        _, slow = host_link_verdicts(list(self.host_links), self.min_percent,
                                     self.expect_percent)
        return judge(self.gpus, self._measurements, self.rule, self.expected,
                     {s.gpu for s in slow}, {link.gpu for link in self.host_links},
                     self.min_percent, self.expect_percent)

    def _again(self) -> list[tuple[str, str]]:
        """Each slow pair not yet decided, measured again: disjoint pairs a round."""
        busy, pairs = set(), []
        for a, b in self._judge().pending:
            if a not in busy and b not in busy:
                pairs.append((a, b))
                busy.update((a, b))
        return pairs

    def verdict(self) -> GpuVerdict:
        return verdict_of(self.gpus, list(self.host_links), self.expected, self._measurements,
                          self._round_pairs, self.min_percent, self.expect_percent)


def verdict_of(gpus, host_links: list[HostLink], expected: dict,
               measurements: list[Measurement], round_pairs: list[int], min_percent: float,
               expect_percent: float) -> GpuVerdict:
    """The verdict on recorded measurements (a document read back, or a live check)."""
    gpus = tuple(gpus)
    rule = choose_rule(len(gpus), expected)
    host_ref, slow_links = host_link_verdicts(host_links, min_percent, expect_percent)
    j = judge(gpus, measurements, rule, expected, {s.gpu for s in slow_links},
              {link.gpu for link in host_links}, min_percent, expect_percent)
    counts: dict[tuple[str, str], int] = {}
    for m in measurements:
        counts[pair_key(m.a, m.b)] = counts.get(pair_key(m.a, m.b), 0) + 1
    unresolved = tuple((pair_name(a, b), f"slow in each of its {counts[(a, b)]} measurements, "
                        f"fewer than the {NEED_PATH} that name a pair: no round left")
                       for a, b in j.pending)
    n = len(gpus)
    notes = []
    if n == 1:
        notes.append("one GPU: no pair to measure; only its host link is checked")
    elif rule == "expected":
        missing = [pair_name(*k) for k in sorted(counts) if not expected.get(k)]
        notes.append("two GPUs: one pair, no median to hold it against" if n == 2 else
                     "pairs of different kinds (NVML): no one median for them")
        if len(missing) < len(counts):
            notes.append(f"each pair held against {expect_percent:g} % of NVML's figure for "
                         "its own link")
        if missing:
            notes.append(f"NVML gives no figure for {', '.join(missing)}: only one direction "
                         f"below {min_percent:g} % of the other can call it slow")
    return GpuVerdict(gpus, rule, min_percent, expect_percent, len(round_pairs),
                      tuple(round_pairs), j.reference, host_ref, j.slow_gpus, tuple(slow_links),
                      j.named, unresolved, j.transient, len(counts), n * (n - 1) // 2,
                      tuple(notes))
