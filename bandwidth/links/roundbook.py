"""The bookkeeping both round checks share: the host search (``rounds.RoundSearch``) and the
GPUs of one host (``gpurounds.GpuRounds``) measure in the same rounds of disjoint pairs and keep
them the same way; only their rules of which pairs to measure again, and their verdicts, differ.

``Measurement`` -- one pair in one round, both directions. ``full_round_robin`` and
``screen_pairs`` -- the round robin (the circle method) that screens every host or GPU.
``RoundBook`` -- a planner's rounds: the screening, then pairs chosen by its ``_again()``, up to
``max_rounds``; the round awaiting its rates, and ``record()``, which takes them checked.
``read_measurement`` -- a measurement read back from its document (``rounddoc``, ``gpudoc``),
with the checks both documents make (``positive``, ``percent``, ``known_pair``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from bandwidth.errors import ConfigError


@dataclass(frozen=True)
class Measurement:
    """One pair in one round: ``gbps_ab`` from ``a`` to ``b``, ``gbps_ba`` back."""

    round: int
    a: str
    b: str
    gbps_ab: float
    gbps_ba: float

    def to_dict(self) -> dict:
        return {"round": self.round, "pair": [self.a, self.b],
                "gbps": [self.gbps_ab, self.gbps_ba]}


def full_round_robin(n: int) -> int:
    """Rounds of the whole round robin of n hosts: every pair once."""
    return n - 1 if n % 2 == 0 else n


def screen_pairs(order: list[str], index: int) -> list[tuple[str, str]]:
    """Round ``index`` of the circle method: the first host fixed, the others rotated by one each
    round; with an odd count a gap (the host facing it sits out)."""
    ring = list(order) + ([None] if len(order) % 2 else [])
    m = len(ring)
    rest = ring[1:]
    shift = index % (m - 1)
    turned = [ring[0]] + rest[shift:] + rest[:shift]
    pairs = [(turned[i], turned[m - 1 - i]) for i in range(m // 2)]
    return [(a, b) for a, b in pairs if a is not None and b is not None]


def positive(value) -> bool:
    """A finite number above 0, not a bool: a rate in GB/s, a count of seconds."""
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value) and value > 0)


def percent(value) -> bool:
    """A threshold in percent: above 0 and at most 100."""
    return positive(value) and value <= 100


def check_percent(name: str, value) -> None:
    if not percent(value):
        raise ConfigError(f"{name} must be a percentage above 0 and at most 100; got {value!r}")


def known_pair(value, known: set) -> bool:
    """``[a, b]`` of two different names of ``known``."""
    return (isinstance(value, list) and len(value) == 2 and all(p in known for p in value)
            and value[0] != value[1])


def read_measurement(item, known: set, rounds: int) -> Measurement | None:
    """``Measurement.to_dict()`` read back: a pair of ``known``, two rates, a round below
    ``rounds``; None where it is not one."""
    if not isinstance(item, dict):
        return None
    pair, gbps, index = item.get("pair"), item.get("gbps"), item.get("round")
    ok = (known_pair(pair, known) and isinstance(gbps, list) and len(gbps) == 2
          and all(positive(g) for g in gbps) and isinstance(index, int)
          and not isinstance(index, bool) and 0 <= index < rounds)
    return Measurement(index, pair[0], pair[1], float(gbps[0]), float(gbps[1])) if ok else None


class RoundBook:
    """A planner's rounds: ``next_round()`` the pairs to measure (empty when done), ``record()``
    their rates. ``order`` is screened first (``screen_rounds`` rounds of its round robin), then
    each round is what ``_again()`` chooses, until it chooses none or ``max_rounds`` is reached."""

    def __init__(self, order: list[str], screen_rounds: int, max_rounds: int):
        self._order = order
        self.screen_rounds = screen_rounds
        self.max_rounds = max_rounds
        self._measurements: list[Measurement] = []
        self._round_pairs: list[int] = []
        self._awaiting: list[tuple[str, str]] | None = None
        self._done = False

    @property
    def rounds(self) -> int:
        return len(self._round_pairs)

    @property
    def measurements(self) -> tuple[Measurement, ...]:
        return tuple(self._measurements)

    def _again(self) -> list[tuple[str, str]]:
        """The disjoint pairs of a round after the screening: what can decide something."""
        raise NotImplementedError

    def next_round(self) -> list[tuple[str, str]]:
        """The disjoint pairs of the next round, each to be measured both ways; [] when done."""
        if self._awaiting is not None:
            raise ConfigError("record() the rates of the round before asking for the next")
        if self._done:
            return []
        if self.rounds < self.screen_rounds:
            pairs = screen_pairs(self._order, self.rounds)
        elif self.rounds >= self.max_rounds:
            pairs = []
        else:
            pairs = self._again()
        self._done = not pairs
        self._awaiting = pairs or None
        return list(pairs)

    def record(self, rates: dict) -> None:
        """The round's rates: ``{(src, dst): GB/s}`` for both directions of each of its pairs."""
        if self._awaiting is None:
            raise ConfigError("record() takes the rates of the round next_round() gave; there "
                              "is none waiting")
        wanted = {p for a, b in self._awaiting for p in ((a, b), (b, a))}
        given = set(rates) if isinstance(rates, dict) else set()
        if given != wanted:
            raise ConfigError(f"record() needs GB/s for both directions of every pair of the "
                              f"round and nothing else; missing {sorted(wanted - given)[:3]}, "
                              f"not asked {sorted(given - wanted, key=str)[:3]}")
        for key, value in rates.items():
            if not positive(value):
                raise ConfigError(f"record(): {key[0]} -> {key[1]} must be a positive number "
                                  f"of GB/s; got {value!r}")
        self._measurements += [Measurement(self.rounds, a, b, float(rates[(a, b)]),
                                           float(rates[(b, a)])) for a, b in self._awaiting]
        self._round_pairs.append(len(self._awaiting))
        self._awaiting = None
