"""The round search (bandwidth.links.rounds) at a scale this machine cannot launch: the same
planner, driven by a model of the rates of pairs instead of a job (issue 40, item 4).

    python3 benchmarks/host_rounds_sim.py                       # 1,000 and 10,000 hosts
    python3 benchmarks/host_rounds_sim.py --hosts 1000 --faults 1,3,5 --trials 50
    python3 benchmarks/host_rounds_sim.py --hosts 100 --screen all --trials 20

The model (``PairModel``): every direction of every pair runs at the healthy rate times noise
(normal, ``--noise`` relative spread, 3 % by default), and a measurement is hit by a transient dip
to 30-65 % of its rate with chance ``--dip`` (0.5 %: a burst of someone else's traffic). A slow
host (its link shaped) carries ``--slow`` (50 %) of the rate in both directions with everyone; a
slow path carries it in one direction between two hosts only (``tc`` on that destination), the
two hosts fast with everyone else. Each trial puts K slow hosts and K slow paths (K from
``--faults``) on hosts drawn at random (a path's ends are never slow hosts) and runs the search.

Per row (N hosts, K faults of each kind, ``--trials`` trials: 20 up to 1,000 hosts, 5 above): the rounds taken (median, max)
against the target ceil(log2 N) + 3; the time at ``--round-seconds`` a round (default 1 s: both
directions of a pair, a warm-up and 3 timed sends of 256 MB at 100 Gbit/s are 0.12 s, plus the
barriers and the gather of a job of thousands of ranks) beside the full matrix's N(N-1) cells one
at a time at half that each; slow hosts and slow paths missed (of those put in); false naming:
the share of trials that named a host or path that was not slow, and the share of names that
were wrong. ``--screen all`` screens with the whole round robin, which every path is measured in.
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))    # run from anywhere, uninstalled

from bandwidth.links.rounds import RoundSearch  # noqa: E402


class PairModel:
    """Rates of pairs: healthy ``gbps`` x noise, slow hosts and one-way slow paths at ``slow``."""

    def __init__(self, hosts, slow_hosts=(), slow_paths=(), gbps=12.5, slow=0.5, noise=0.03,
                 dip=0.005, seed=0):
        self.slow_hosts, self.slow_paths = set(slow_hosts), set(slow_paths)
        self.gbps, self.slow, self.noise, self.dip = gbps, slow, noise, dip
        self.rng = random.Random(seed)

    def rate(self, src: str, dst: str) -> float:
        factor = self.slow if (src in self.slow_hosts or dst in self.slow_hosts
                               or (src, dst) in self.slow_paths) else 1.0
        value = self.gbps * factor * max(0.05, self.rng.gauss(1.0, self.noise))
        if self.rng.random() < self.dip:
            value *= self.rng.uniform(0.30, 0.65)
        return value

    def measure(self, pairs) -> dict:
        out = {}
        for a, b in pairs:
            out[(a, b)] = self.rate(a, b)
            out[(b, a)] = self.rate(b, a)
        return out


def place_faults(hosts: list[str], k: int, rng: random.Random):
    """K slow hosts and K one-way slow paths between other hosts, at random."""
    slow_hosts = rng.sample(hosts, k)
    rest = [h for h in hosts if h not in slow_hosts]
    paths: set[tuple[str, str]] = set()
    while len(paths) < k:
        a, b = rng.sample(rest, 2)
        if (b, a) not in paths:
            paths.add((a, b))
    return slow_hosts, sorted(paths)


def run_search(model: PairModel, hosts, screen, seed: int):
    search = RoundSearch(hosts, screen_rounds=screen, seed=seed)
    while (pairs := search.next_round()):
        search.record(model.measure(pairs))
    return search.verdict()


def trial(n: int, k: int, screen, seed: int, args) -> dict:
    rng = random.Random(seed)
    hosts = [f"h{i}" for i in range(n)]
    slow_hosts, slow_paths = place_faults(hosts, k, rng) if k else ([], [])
    model = PairModel(hosts, slow_hosts, slow_paths, slow=args.slow, noise=args.noise,
                      dip=args.dip, seed=seed + 1)
    v = run_search(model, hosts, screen, seed + 2)
    named_hosts = {s.host for s in v.slow_hosts}
    named_paths = {(p.src, p.dst) for p in v.slow_paths}
    false = len(named_hosts - set(slow_hosts)) + len(named_paths - set(slow_paths))
    # a path counts as measured when its pair was measured at all (found or not)
    return {"rounds": v.rounds, "hosts_missed": len(set(slow_hosts) - named_hosts),
            "paths_missed": len(set(slow_paths) - named_paths), "false": false,
            "names": len(named_hosts) + len(named_paths), "unresolved": len(v.unresolved),
            "coverage": v.pairs_measured / v.pairs_total}


def row(n: int, k: int, args) -> list[str]:
    screen = args.screen if args.screen == "all" else (int(args.screen) if args.screen else None)
    trials = args.trials or (20 if n <= 1000 else 5)
    results = [trial(n, k, screen, 1000 * t + 17 * k + n, args) for t in range(trials)]
    rounds = [r["rounds"] for r in results]
    median_rounds = statistics.median(rounds)
    matrix_s = n * (n - 1) * args.round_seconds / 2
    names = sum(r["names"] for r in results)
    false_trials = sum(r["false"] > 0 for r in results)
    injected = k * trials
    return [f"{n}", f"{k}", f"{trials}", f"{median_rounds:g} / {max(rounds)}", f"{math.ceil(math.log2(n)) + 3}",
            f"{median_rounds * args.round_seconds:.0f} s", _duration(matrix_s),
            f"{sum(r['hosts_missed'] for r in results)} / {injected}",
            f"{sum(r['paths_missed'] for r in results)} / {injected}",
            f"{100 * false_trials / len(results):.1f} %",
            f"{100 * sum(r['false'] for r in results) / names:.1f} %" if names else "-",
            f"{sum(r['unresolved'] for r in results)}",
            f"{100 * statistics.mean(r['coverage'] for r in results):.2f} %"]


def _duration(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f} {unit}"
    return f"{seconds:.0f} s"


HEAD = ["hosts", "faults", "trials", "rounds med/max", "target", "time", "matrix time", "hosts missed",
        "paths missed", "trials naming a wrong one", "wrong names", "unresolved",
        "pairs measured"]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--hosts", default="1000,10000", help="comma list of N (default 1000,10000)")
    p.add_argument("--faults", default="0,1,2,3,4,5",
                   help="comma list of K: slow hosts and slow paths of each (default 0..5)")
    p.add_argument("--trials", type=int, default=None,
                   help="trials per row (default 20 up to 1,000 hosts, 5 above)")
    p.add_argument("--screen", default=None, help="screening rounds: N or 'all' (default: "
                   "ceil(log2 N), the planner's)")
    p.add_argument("--round-seconds", type=float, default=1.0, help="cost of a round (1 s)")
    p.add_argument("--slow", type=float, default=0.5, help="a slow host's or path's share (0.5)")
    p.add_argument("--noise", type=float, default=0.03, help="relative spread of a rate (0.03)")
    p.add_argument("--dip", type=float, default=0.005, help="chance of a transient dip (0.005)")
    args = p.parse_args(argv)
    started = time.perf_counter()
    print(f"# round search, simulated: healthy 12.5 GB/s x N(1, {args.noise:g}), slow hosts and "
          f"one-way slow paths at {100 * args.slow:g} %, transient dips with chance {args.dip:g}; "
          f"{args.round_seconds:g} s a round, a matrix cell "
          f"{args.round_seconds / 2:g} s")
    rows = [row(int(n), int(k), args) for n in args.hosts.split(",")
            for k in args.faults.split(",")]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(HEAD)]
    print("  ".join(h.rjust(w) for h, w in zip(HEAD, widths)))
    for r in rows:
        print("  ".join(c.rjust(w) for c, w in zip(r, widths)))
    print(f"# {time.perf_counter() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
