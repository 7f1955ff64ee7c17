"""The host check in rounds (issue 40, items 2 and 4): bandwidth.links.rounds' search driven by a
model of pair rates (the simulation's, in small), its document read back, the host gate on it,
the ceiling's flags, and the search run for real over Gloo on loopback."""

import json
import math
import random
import subprocess
import sys

import pytest
from conftest import ROOT

from bandwidth.errors import ConfigError
from bandwidth.links.roundbook import full_round_robin, screen_pairs
from bandwidth.links.rounddoc import load_rounds, rounds_document
from bandwidth.links.rounds import RoundSearch

GBPS = 10.0


def model(slow_hosts=(), slow_paths=(), noise=0.03, dip=0.0, seed=0):
    """Rates of pairs: GBPS x N(1, noise); a slow host at 50 % both ways with everyone, a slow
    path (src, dst) at 50 % that way only; a dip (a burst) to 40 % with chance ``dip``."""
    rng = random.Random(seed)

    def measure(pairs):
        out = {}
        for a, b in pairs:
            for src, dst in ((a, b), (b, a)):
                slow = src in slow_hosts or dst in slow_hosts or (src, dst) in slow_paths
                value = GBPS * (0.5 if slow else 1.0) * rng.gauss(1.0, noise)
                out[(src, dst)] = value * (0.4 if rng.random() < dip else 1.0)
        return out
    return measure


def search(hosts, measure, **kwargs):
    s = RoundSearch(hosts, **kwargs)
    while (pairs := s.next_round()):
        s.record(measure(pairs))
    return s, s.verdict()


def names(n):
    return [f"h{i}" for i in range(n)]


def bound(n):
    return math.ceil(math.log2(n)) + 3


def test_a_single_slow_host_among_1000_is_named_within_the_bound():
    hosts = names(1000)
    _, v = search(hosts, model(slow_hosts={"h417"}, dip=0.005))
    assert [s.host for s in v.slow_hosts] == ["h417"]
    assert v.slow_paths == () and v.unresolved == ()
    assert v.slow_hosts[0].out_gbps == pytest.approx(5.0, rel=0.1)
    assert v.reference_gbps == pytest.approx(GBPS, rel=0.1) and v.rounds <= bound(1000) == 13


def test_a_one_way_slow_path_is_named_by_its_direction_and_blames_neither_host():
    # every pair measured (screen "all"): the path is found wherever it is
    _, v = search(names(16), model(slow_paths={("h3", "h11")}), screen_rounds="all")
    assert [(p.src, p.dst, p.both) for p in v.slow_paths] == [("h3", "h11", False)]
    assert v.slow_hosts == () and v.unresolved == ()
    assert v.slow_paths[0].gbps == pytest.approx(5.0, rel=0.1)
    assert v.slow_paths[0].reverse_gbps == pytest.approx(GBPS, rel=0.1)
    assert v.pairs_measured == v.pairs_total == 120
    assert v.rounds <= full_round_robin(16) + 2


def test_a_slow_host_and_a_slow_path_at_once_among_1000():
    hosts = names(1000)
    first = RoundSearch(hosts).next_round()        # the path lies on a pair the screening meets
    a, b = first[7]
    slow_host = next(h for h in hosts if h not in (a, b))
    _, v = search(hosts, model(slow_hosts={slow_host}, slow_paths={(b, a)}, dip=0.005))
    assert [s.host for s in v.slow_hosts] == [slow_host]
    assert [p.name for p in v.slow_paths] == [f"{b}->{a}"]
    assert v.unresolved == () and v.rounds <= bound(1000)


@pytest.mark.parametrize("seed", range(4))
def test_a_clean_cluster_names_nothing_even_with_bursts(seed):
    _, v = search(names(1000), model(noise=0.05, dip=0.005, seed=seed), seed=seed)
    assert v.slow_hosts == () and v.slow_paths == () and v.unresolved == ()
    assert not v.failed and v.transient           # bursts were seen, measured again, dropped


def test_five_faults_of_each_kind_within_the_bound_at_1000():
    hosts = names(1000)
    rng = random.Random(5)
    slow_hosts = set(rng.sample(hosts, 5))
    rest = [h for h in hosts if h not in slow_hosts]
    first = [p for p in RoundSearch(hosts).next_round() if not set(p) & slow_hosts][:5]
    _, v = search(hosts, model(slow_hosts=slow_hosts, slow_paths=set(first), dip=0.005))
    assert {s.host for s in v.slow_hosts} == slow_hosts
    assert {(p.src, p.dst) for p in v.slow_paths} == set(first)
    assert v.rounds <= bound(1000) and rest


def test_rounds_grow_no_faster_than_log_n_with_fixed_faults():
    rounds = {}
    for n in (16, 64, 256, 1024, 4096):
        hosts = names(n)
        s, v = search(hosts, model(slow_hosts={hosts[3], hosts[n // 2]}))
        assert {h.host for h in v.slow_hosts} == {hosts[3], hosts[n // 2]}
        rounds[n] = v.rounds
        assert v.rounds <= bound(n)
        assert v.rounds - s.screen_rounds <= 3           # the re-pairing: constant in N
    assert rounds[4096] - rounds[16] <= math.log2(4096 / 16) + 1, rounds


@pytest.mark.parametrize("n", [7, 9, 25])
def test_odd_counts_sit_one_host_out_and_still_name_the_slow_one(n):
    hosts = names(n)
    for k in range(full_round_robin(n)):
        pairs = screen_pairs(hosts, k)
        busy = [h for p in pairs for h in p]
        assert len(pairs) == n // 2 and len(set(busy)) == len(busy) == n - 1
    _, v = search(hosts, model(slow_hosts={hosts[-1]}))
    assert [s.host for s in v.slow_hosts] == [hosts[-1]] and v.rounds <= bound(n)


@pytest.mark.parametrize("n", [2, 3, 8, 11])
def test_the_round_robin_meets_every_pair_once(n):
    hosts = names(n)
    seen = [tuple(sorted(p)) for k in range(full_round_robin(n)) for p in screen_pairs(hosts, k)]
    assert len(seen) == len(set(seen)) == n * (n - 1) // 2


def test_two_hosts_cannot_be_told_apart_and_say_so():
    _, clean = search(["a", "b"], model())
    assert not clean.failed and clean.rounds == 1
    _, oneway = search(["a", "b"], model(slow_paths={("a", "b")}))
    assert oneway.slow_hosts == () and oneway.slow_paths == ()
    assert sorted(name for name, _ in oneway.unresolved) == ["a", "b"] and oneway.failed


def test_three_hosts_name_the_slow_one():
    _, v = search(["a", "b", "c"], model(slow_hosts={"b"}), screen_rounds="all")
    assert [s.host for s in v.slow_hosts] == ["b"] and v.unresolved == ()


@pytest.mark.parametrize("kwargs, words", [
    ({"hosts": []}, "at least two hosts"),
    ({"hosts": ["a"]}, "at least two hosts"),
    ({"hosts": "ab"}, "at least two hosts"),
    ({"hosts": ["a", "b", "a"]}, "named more than once: a"),
    ({"hosts": ["a", ""]}, "non-empty name"),
    ({"hosts": ["a", 3]}, "non-empty name"),
    ({"hosts": ["a", "b"], "min_percent": 0}, "percentage above 0"),
    ({"hosts": ["a", "b"], "min_percent": 150}, "percentage above 0"),
    ({"hosts": ["a", "b"], "min_percent": float("nan")}, "percentage above 0"),
    ({"hosts": ["a", "b"], "min_percent": True}, "percentage above 0"),
    ({"hosts": ["a", "b", "c"], "screen_rounds": 0}, "from 1 to 3"),
    ({"hosts": ["a", "b", "c"], "screen_rounds": 4}, "from 1 to 3"),
    ({"hosts": ["a", "b", "c"], "screen_rounds": "some"}, "or 'all'"),
])
def test_degenerate_settings_are_refused_in_one_line(kwargs, words):
    with pytest.raises(ConfigError, match=words) as err:
        RoundSearch(**kwargs)
    assert "\n" not in str(err.value)


def test_the_caller_is_held_to_the_protocol():
    s = RoundSearch(["a", "b", "c", "d"])
    with pytest.raises(ConfigError, match="no round measured yet"):
        s.verdict()
    with pytest.raises(ConfigError, match="none waiting"):
        s.record({})
    pairs = s.next_round()
    with pytest.raises(ConfigError, match="before asking for the next"):
        s.next_round()
    rates = model()(pairs)
    with pytest.raises(ConfigError, match="missing"):
        s.record(dict(list(rates.items())[1:]))
    for bad in (float("nan"), -1.0, 0, True, "9"):
        with pytest.raises(ConfigError, match="positive number of GB/s"):
            s.record(dict(rates, **{}) | {pairs[0]: bad})
    s.record(rates)
    assert s.rounds == 1 and len(s.measurements) == 2


def finished(hosts, measure, **kwargs):
    s, _ = search(hosts, measure, **kwargs)
    return {"rounds": rounds_document(s, nbytes=4_000_000, repeats=2, method="model",
                                      round_seconds=[0.5] * s.rounds, matrix_seconds=60.0)}


def test_the_document_reads_back_to_the_same_verdict(tmp_path):
    hosts = names(12)
    doc = finished(hosts, model(slow_hosts={"h4"}, slow_paths={("h1", "h2")}),
                   screen_rounds="all")
    path = tmp_path / "r.json"
    path.write_text(json.dumps(doc))
    record = load_rounds(str(path))
    v = record.verdict()
    assert [s.host for s in v.slow_hosts] == ["h4"] and [p.name for p in v.slow_paths] == \
        ["h1->h2"]
    assert doc["rounds"]["verdict"]["slow_paths"][0]["name"] == "h1->h2"
    assert record.seconds == pytest.approx(0.5 * v.rounds) and v.rounds == doc["rounds"]["rounds"]


def gate(path, *extra):
    return subprocess.run([sys.executable, "-m", "bandwidth.hostgate", str(path), *extra],
                          cwd=ROOT, capture_output=True, text=True, timeout=60,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})


def test_the_host_gate_names_the_slow_host_and_path_in_text_junit_and_markdown(tmp_path):
    path = tmp_path / "r.json"
    path.write_text(json.dumps(finished(names(10), model(slow_hosts={"h6"},
                                                         slow_paths={("h2", "h8")}),
                                        screen_rounds="all")))
    proc = gate(path, "--junit", str(tmp_path / "h.xml"), "--summary-md", str(tmp_path / "s.md"))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "# SLOW HOST h6: slow with" in proc.stdout
    assert "# SLOW PATH h2->h8:" in proc.stdout
    assert proc.stdout.splitlines()[-3].startswith("# FAILED (")
    assert "host h6, path h2->h8" in proc.stdout
    import xmlschema
    xmlschema.XMLSchema(str(ROOT / "tests" / "junit-10.xsd")).validate(str(tmp_path / "h.xml"))
    xml = (tmp_path / "h.xml").read_text()
    assert 'name="host h6"' in xml and 'name="path h2-&gt;h8"' in xml
    assert xml.count("<failure") == 2
    md = (tmp_path / "s.md").read_text()
    assert "**SLOW HOST**" in md and "path h2->h8" in md


def test_the_host_gate_passes_a_clean_search_and_refuses_a_broken_one(tmp_path):
    path = tmp_path / "r.json"
    doc = finished(names(9), model())
    path.write_text(json.dumps(doc))
    proc = gate(path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "# PASSED (" in proc.stdout and "no slow host, no slow path" in proc.stdout
    broken = [{"rounds": {}}, {"rounds": dict(doc["rounds"], hosts=["a"])},
              {"rounds": dict(doc["rounds"], measurements=doc["rounds"]["measurements"][1:])},
              {"rounds": dict(doc["rounds"], measurements=[
                  dict(m, gbps=[-1, 1]) for m in doc["rounds"]["measurements"]])}]
    for k, bad in enumerate(broken):
        path.write_text(json.dumps(bad))
        proc = gate(path)
        assert proc.returncode == 2 and len(proc.stderr.splitlines()) == 1, (k, proc.stderr)
        assert "Traceback" not in proc.stderr
    assert gate(path, "--min-percent", "0").returncode == 2


@pytest.mark.parametrize("argv, words", [
    (["--rounds"], "add --network"),
    (["--network", "--screen-rounds", "2"], "add --network --rounds"),
    (["--min-percent", "50"], "add --network --rounds"),
    (["--network", "--rounds", "--screen-rounds", "x"], "whole number of rounds"),
    (["--network", "--rounds", "--min-percent", "0"], "min-percent"),
])
def test_the_ceilings_round_flags_refuse_bad_input_in_one_line(argv, words):
    proc = subprocess.run([sys.executable, "-m", "bandwidth.ceiling", *argv], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and len(proc.stderr.splitlines()) == 1, proc.stderr
    assert words in proc.stderr


@pytest.mark.timeout(200)
def test_rounds_over_gloo_on_loopback_run_end_to_end_and_pass_the_gate(tmp_path):
    out = tmp_path / "rounds.json"
    proc = subprocess.run([sys.executable, str(ROOT / "launch.py"), "-n", "4", "-s", "0",
                           "--timeout", "60", sys.executable, "-m", "bandwidth.ceiling",
                           "--network", "--rounds", "--mb", "4", "--repeats", "2",
                           "--min-percent", "10", "--json", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Host check in rounds: 4 processes" in proc.stdout
    doc = json.loads(out.read_text())["rounds"]
    assert doc["hosts"] == [f"{r}@127.0.0.1" for r in range(4)]
    assert doc["round_pairs"][0] == 2                 # both pairs of a round at once
    assert doc["rounds"] == len(doc["round_seconds"]) >= 2
    assert all(g > 0 for m in doc["measurements"] for g in m["gbps"])
    proc = gate(out)                                   # at the document's own 10 %
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "# PASSED (" in proc.stdout
