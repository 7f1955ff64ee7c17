"""Which rank held a distributed run back, by one stated rule (``judge``), and the summary's line
that names it (``straggler_line``); docs/formulas.md, "Stragglers", derives the rule.

The rule, on one figure (in seconds) per rank and measured step: with m_r each rank's median
over the steps, M the median of the m_r and D the median over the ranks of each rank's median
absolute deviation from its own m_r (the spread between rounds), rank r stands out when

    m_r >= K x M   and   m_r - M > NOISE x D.

The slowest rank that stands out is named (ties: the lowest rank); none, and the line says "no
straggler" with the rule. With one rank there is nothing to compare.

The figures (``worker_figures``, ``server_figures``): a sync parameter-server worker's is the
servers' wait on it (``server_waits``): the seconds in a step that the servers sat blocked on its
pushes, summed over the servers. In a synchronous step every worker waits for the slowest one's
pushes before its answers come, so the workers' own step times are alike (a worker stopped 3/4 of
the time on loopback: steps within 3 % of the others'); and a server posts its receives in its
own order and Gloo moves a push only once its receive is posted, so the server paces every
worker's pushes alike too (16 workers and 4 servers on lab hosts, one worker's link at half
rate: its push times 1.00 x the median). What the servers wait on is what the step waits on.
Where the servers did not time it (async, MXNet's servers), a worker's figure is the time its
pushes took to leave (until its last push to any server had left). A ``dist_nccl`` rank's is its
own step time, which an all-reduce evens out (every rank ends together), so there the rule names
only a rank whose own time differs; its
neighbour probe (bandwidth.measurement.probe, judged by bandwidth.results.probepaths) names the
worker whose link is slow, or the slow path, which the line puts first (a slow link), or after the
ranks' and servers' verdicts (a path). Each worker's wait in the barrier before each step is kept
in its record, not judged: worker 0, which prints the lines, reached it last on loopback in clean
runs. A server's is the median over the workers of their seconds per byte of pushes to it, so that
a server whose link is slow stands out even though every worker then waits for it alike (servers
holding less than half the largest server's bytes are left out: their time per byte holds fixed
costs).
"""

from __future__ import annotations

import statistics

from bandwidth.results.probepaths import (also_words, judge_probe, link_words, path_figures,
                                          path_words, probe_json, probe_rule_text)
from bandwidth.results.rule import K, NOISE, Verdict, judge

# A worker named by the servers' wait costs at least a quarter of the workers' median step (the
# timed step: a server's own step also holds the time between the workers' steps, which on two
# busy loopback cores was 7 x the timed step). On 16 x 4 lab hosts (BENCHMARKS.md, 2026-11-29)
# the clean runs' largest lead over the median was 5.5-18.9 % of it (15 runs), a worker whose
# link ran at half rate led by 154-192 % (10 runs).
WAIT_SHARE = 0.25


def worker_figures(records) -> dict[str, list[float]]:
    """Each worker's figure per measured step (module docstring): where the sync servers timed
    their wait on it, that wait (``server_waits``); where it timed its exchange with each
    server, the seconds until its last push had left; else its own step."""
    waits = server_waits(records)
    if waits:
        return waits
    return {r.label: list(pushes_seconds(r) or r.step_seconds)
            for r in records if r.role == "worker" and r.step_seconds}


def server_waits(records) -> dict[str, list[float]]:
    """Per worker, per measured step: the seconds the sync servers were blocked on its pushes,
    summed over the servers (empty where none timed it: async servers, MXNet's)."""
    servers = [r.waited_on for r in records if r.role == "server" and r.waited_on]
    workers = [r for r in records if r.role == "worker"]
    if not servers or not workers:
        return {}
    steps = min(len(waits) for waits in servers)
    return {r.label: [sum(waits[i][r.index] for waits in servers) for i in range(steps)]
            for r in workers}


def server_peers(record) -> tuple:
    """A parameter-server worker's rate with each server (not dist_nccl's probe neighbours)."""
    return tuple(p for p in record.peers if p.role == "server")


def pushes_seconds(record) -> tuple[float, ...]:
    """Per measured step, the seconds until a worker's last push to any server had left (empty
    where it did not time its peers)."""
    peers = server_peers(record)
    if not peers:
        return ()
    return tuple(max(times) for times in zip(*(p.push_seconds for p in peers)))


def figure_word(records) -> str:
    """What the workers' figure is, in the line's words."""
    if server_waits(records):
        return "server wait"
    return "push time" if any(server_peers(r) for r in records) else "step"


def server_figures(records) -> dict[str, list[float]]:
    """Each server's figure per measured step: the median over the workers of their seconds per
    byte of pushes to it (empty where the workers did not time their peers; a server that holds
    less than half the largest server's share has none)."""
    workers = [server_peers(r) for r in records if r.role == "worker" and server_peers(r)]
    if not workers:
        return {}
    largest = max((peer.nbytes for peer in workers[0]), default=0)
    out = {}
    for s, peer in enumerate(workers[0]):
        # Seconds per byte are fair only between shares of a like size: a push's time also
        # holds costs that do not grow with its bytes (the server's pacing, a retransmission
        # timeout), so a small share reads slow per byte. MXNet's key rule left 16 x 4 lab
        # servers 6.96, 2.18, 5.55 and 2.14 MB, and a clean run named the 2.14 MB one at 1.58 x
        # the median per byte; it can leave a server a few hundred bytes. Those are left out.
        if peer.nbytes <= 0 or peer.nbytes < largest / 2:
            continue
        steps = min(len(w[s].push_seconds) for w in workers)
        out[f"{peer.role} {peer.index}"] = [
            statistics.median(w[s].push_seconds[i] / w[s].nbytes for w in workers)
            for i in range(steps)]
    return out


def wait_floor(records) -> float:
    """What a worker's median server wait must exceed the median by, besides the rule: WAIT_SHARE
    of the workers' median step (the healthy workers' waits are near zero, so their ratios
    alone would name a worker for a few microseconds); 0 where the figure is not the wait."""
    steps = [r.step_median for r in records if r.role == "worker" and r.step_seconds]
    return WAIT_SHARE * statistics.median(steps) if steps and server_waits(records) else 0.0


def rule_text(k: float = K, noise: float = NOISE, figure: str = "step") -> str:
    return (f"a worker's median {figure} at least {k:g} x the median of the ranks' medians and "
            f"above it by more than {noise:g} x their spread between rounds"
            + (f" and by more than {100 * WAIT_SHARE:g} % of the workers' median step"
               if figure == "server wait" else ""))


def peer_clause(records, label: str) -> str:
    """``its pushes to server 3 at 41 % of the others'``: the named worker's push rate to the
    server where it falls furthest below the other workers' median rate to that server; nothing
    where none falls below 1/K of it (the servers pace every push alike, so a worker named by
    their wait on it may push at the others' rate once its receives are posted)."""
    mine = next((server_peers(r) for r in records if r.label == label), ())
    others = [server_peers(r) for r in records
              if r.role == "worker" and r.label != label and server_peers(r)]
    if not mine or not others:
        return ""
    worst = None
    for s, peer in enumerate(mine):
        rates = [o[s].push_gbps for o in others if o[s].push_gbps]
        if not rates or not peer.push_gbps:
            continue
        pct = 100 * peer.push_gbps / statistics.median(rates)
        if worst is None or pct < worst[0]:
            worst = (pct, f"{peer.role} {peer.index}")
    if worst is None or worst[0] >= 100 / K:
        return ""
    return f"its pushes to {worst[1]} at {worst[0]:.0f} % of the others'"


def straggler(records) -> tuple[Verdict, Verdict]:
    """The workers' verdict and the servers' (from the workers' pushes to each server)."""
    return (judge(worker_figures(records), floor=wait_floor(records)),
            judge(server_figures(records)))


def straggler_line(records) -> str:
    """The summary's line: the straggler named against the median, or "no straggler" with the
    rule (and the slowest rank, for scale)."""
    workers, servers = straggler(records)
    probe = judge_probe(records)
    host = {r.label: r.host for r in records}
    if probe is not None and probe.links:
        link = probe.links[0]
        return (f"straggler: {link.worker} on {host.get(link.worker, '?')}, "
                f"{link_words(link)}{also_words(probe, host, skip_link=link.worker)}")
    if workers.named and (not servers.named or workers.ratio >= servers.ratio):
        clause = peer_clause(records, workers.named)
        also = (f" (also standing out: {', '.join(workers.also)})" if workers.also else "")
        return (f"straggler: {workers.named} on {host[workers.named]}, {figure_word(records)} "
                f"{workers.ratio:.2f} x the median{also}" + (f"; {clause}" if clause else ""))
    if servers.named:
        return (f"straggler: {servers.named} on {host.get(servers.named, '?')}, the workers' "
                f"pushes to it {servers.ratio:.2f} x the median server's time per byte "
                f"({100 / servers.ratio:.0f} % of the rate)")
    if probe is not None and probe.paths:
        return f"straggler: {path_words(probe.paths[0], host)}{also_words(probe, host, None, 0)}"
    if workers.alone:
        return f"no straggler ({workers.alone.replace('rank', 'worker')}: nothing to compare with)"
    if probe is not None and not probe.alone:
        a, b = probe.slowest
        return (f"no straggler (rule: {probe_rule_text()}; slowest path {a} -> {b}, "
                f"{host.get(a, '?')} -> {host.get(b, '?')}, {probe.slowest_ratio:.2f} x the "
                "median)")
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
            "k": K, "noise": NOISE,
            "floor": wait_floor(records),
            "line": straggler_line(records),
            "workers": of(workers), "servers": of(servers),
            **({"probe": probe_json(judge_probe(records), host)}
               if path_figures(records) else {})}
