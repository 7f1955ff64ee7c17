"""Which rank held a distributed run back, by one stated rule (``judge``), and the summary's line
that names it (``straggler_line``); docs/formulas.md, "Stragglers", derives the rule.

The rule, on one figure (in seconds) per rank and measured step: with m_r each rank's median
over the steps, M the median of the m_r and D the median over the ranks of each rank's median
absolute deviation from its own m_r (the spread between rounds), rank r stands out when

    m_r >= K x M   and   m_r - M > NOISE x D.

The slowest rank that stands out is named (ties: the lowest rank); none, and the line says "no
straggler" with the rule. With one rank there is nothing to compare.

The figures (``worker_figures``, ``server_figures``): a parameter-server worker's is the time
its pushes took to leave (until its last push to any server had left): in a synchronous step
every worker waits for the slowest one's pushes before its answers come, so the workers' own
step times are alike, and a worker stopped 3/4 of the time on loopback showed steps within 3 %
of the others' but pushes 2.6 x theirs. A ``dist_nccl`` rank's is its own step time, which an
all-reduce evens out (every rank ends together), so there the rule names only a rank whose own
time differs. Each worker's wait in the barrier before each step is kept in its record, not
judged: worker 0, which prints the lines, reached it last on loopback in clean runs. A server's
is the median over the workers of their seconds per byte of pushes to it, so that a server whose
link is slow stands out even though every worker then waits for it alike (servers holding less
than half the median server's bytes are left out: their time is latency).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

K = 1.25          # a rank's median at least K x the median of the ranks' medians ...
NOISE = 3.0       # ... and above it by more than NOISE x the ranks' spread between rounds


@dataclass(frozen=True)
class Verdict:
    named: str | None                 # the straggler, or None
    ratio: float | None               # its median over the median of the ranks' medians
    slowest: str | None               # the slowest rank, standing out or not
    slowest_ratio: float | None
    median: float | None              # M
    spread: float | None              # D
    also: tuple[str, ...] = ()        # other ranks that stand out, slowest first
    alone: str = ""                   # why nothing was compared ("1 worker")


def judge(figures: dict[str, list[float]], k: float = K, noise: float = NOISE) -> Verdict:
    """The rule (module docstring) on ``figures``: each rank's figure per step, in rank order."""
    medians = {r: statistics.median(xs) for r, xs in figures.items() if xs}
    if len(medians) < 2:
        return Verdict(None, None, None, None, None, None,
                       alone=f"{len(medians)} rank{'s' if len(medians) != 1 else ''}")
    big = statistics.median(medians.values())
    spread = statistics.median(statistics.median(abs(x - medians[r]) for x in figures[r])
                               for r in medians)
    order = sorted(medians, key=lambda r: -medians[r])     # stable: ties keep rank order
    slowest = order[0]

    def ratio(r: str) -> float:
        return medians[r] / big if big > 0 else float("inf")

    out = [r for r in order if medians[r] >= k * big and medians[r] - big > noise * spread
           and medians[r] > big]
    return Verdict(out[0] if out else None, ratio(out[0]) if out else None, slowest,
                   ratio(slowest), big, spread, tuple(out[1:]))


def worker_figures(records) -> dict[str, list[float]]:
    """Each worker's figure per measured step (module docstring): where it timed its exchange
    with each server, the seconds until its last push had left; else its own step."""
    return {r.label: list(pushes_seconds(r) or r.step_seconds)
            for r in records if r.role == "worker" and r.step_seconds}


def pushes_seconds(record) -> tuple[float, ...]:
    """Per measured step, the seconds until a worker's last push to any server had left (empty
    where it did not time its peers)."""
    if not record.peers:
        return ()
    return tuple(max(times) for times in zip(*(p.push_seconds for p in record.peers)))


def figure_word(records) -> str:
    """What the workers' figure is, in the line's words."""
    return "push time" if any(r.peers for r in records) else "step"


def server_figures(records) -> dict[str, list[float]]:
    """Each server's figure per measured step: the median over the workers of their seconds per
    byte of pushes to it (empty where the workers did not time their peers; a server that holds
    less than half the median server's share has none)."""
    workers = [r for r in records if r.role == "worker" and r.peers]
    if not workers:
        return {}
    shares = [peer.nbytes for peer in workers[0].peers]
    typical = statistics.median(shares) if shares else 0
    out = {}
    for s, peer in enumerate(workers[0].peers):
        # A share well below the others' is timed by its latency, not its bytes (MXNet's key
        # rule can leave a server a few hundred bytes): it is left out of the comparison.
        if peer.nbytes <= 0 or peer.nbytes < typical / 2:
            continue
        steps = min(len(w.peers[s].push_seconds) for w in workers)
        out[f"{peer.role} {peer.index}"] = [
            statistics.median(w.peers[s].push_seconds[i] / w.peers[s].nbytes for w in workers)
            for i in range(steps)]
    return out


def rule_text(k: float = K, noise: float = NOISE, figure: str = "step") -> str:
    return (f"a worker's median {figure} at least {k:g} x the median of the ranks' medians and "
            f"above it by more than {noise:g} x their spread between rounds")


def peer_clause(records, label: str) -> str:
    """``its pushes to server 3 at 41 % of the others'``: the named worker's push rate to the
    server where it falls furthest below the other workers' median rate to that server."""
    mine = next((r for r in records if r.label == label), None)
    others = [r for r in records if r.role == "worker" and r.label != label and r.peers]
    if mine is None or not mine.peers or not others:
        return ""
    worst = None
    for s, peer in enumerate(mine.peers):
        rates = [o.peers[s].push_gbps for o in others if o.peers[s].push_gbps]
        if not rates or not peer.push_gbps:
            continue
        pct = 100 * peer.push_gbps / statistics.median(rates)
        if worst is None or pct < worst[0]:
            worst = (pct, f"{peer.role} {peer.index}")
    return "" if worst is None else f"its pushes to {worst[1]} at {worst[0]:.0f} % of the others'"


def straggler(records) -> tuple[Verdict, Verdict]:
    """The workers' verdict and the servers' (from the workers' pushes to each server)."""
    return judge(worker_figures(records)), judge(server_figures(records))


def straggler_line(records) -> str:
    """The summary's line: the straggler named against the median, or "no straggler" with the
    rule (and the slowest rank, for scale)."""
    workers, servers = straggler(records)
    host = {r.label: r.host for r in records}
    if workers.named and (not servers.named or workers.ratio >= servers.ratio):
        clause = peer_clause(records, workers.named)
        also = (f" (also standing out: {', '.join(workers.also)})" if workers.also else "")
        return (f"straggler: {workers.named} on {host[workers.named]}, {figure_word(records)} "
                f"{workers.ratio:.2f} x the median{also}" + (f"; {clause}" if clause else ""))
    if servers.named:
        return (f"straggler: {servers.named} on {host.get(servers.named, '?')}, the workers' "
                f"pushes to it {servers.ratio:.2f} x the median server's time per byte "
                f"({100 / servers.ratio:.0f} % of the rate)")
    if workers.alone:
        return f"no straggler ({workers.alone.replace('rank', 'worker')}: nothing to compare with)"
    return (f"no straggler (rule: {rule_text(figure=figure_word(records))}; slowest "
            f"{workers.slowest} on "
            f"{host[workers.slowest]}, {workers.slowest_ratio:.2f} x the median)")


def straggler_json(records) -> dict:
    """The document's ``"straggler"``: the rule, the line and both verdicts."""
    workers, servers = straggler(records)
    host = {r.label: r.host for r in records}

    def of(v: Verdict) -> dict:
        return {"named": v.named, "host": host.get(v.named) if v.named else None,
                "ratio": v.ratio, "slowest": v.slowest, "slowest_ratio": v.slowest_ratio,
                "median": v.median, "spread": v.spread, "also": list(v.also)}
    return {"rule": rule_text(figure=figure_word(records)), "figure": figure_word(records),
            "k": K, "noise": NOISE, "line": straggler_line(records),
            "workers": of(workers), "servers": of(servers)}
