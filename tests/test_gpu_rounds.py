"""The GPU check in rounds (issue 40, item 3): bandwidth.links.gpurounds' rules driven by a model
of pair rates on 1, 2, 3, 4 and 8 GPUs (a slow pair, a slow GPU, a slow host link, a clean host),
its document read back by the host gate, and bad input. The real check on GPUs:
tests/test_gpu_rounds_gpu.py."""

import json
import random
import subprocess
import sys

import pytest
from conftest import ROOT

from bandwidth.ceiling.gpucheck import expected_figures, parse_no_peer, render, run_rounds
from bandwidth.errors import ConfigError
from bandwidth.links.gpudoc import gpu_document, load_gpu_rounds
from bandwidth.links.gpurounds import GpuRounds, HostLink, pair_key
from bandwidth.links.rounds import full_round_robin

NVLINK = 370.0       # GB/s each way, both ways at once (H200, 18 NVLinks)
NV_EXPECTED = 450.0  # NVML's figure: 18 x 25 GB/s
STAGED = 26.0        # each way through host memory: a pair without its NVLink path
HOST, HOST_EXPECTED = 55.0, 63.0


def gpus(n):
    return list(range(n))


def label(g):
    return f"GPU {g}"


def model(slow_pairs=(), slow_gpus=(), oneway=(), noise=0.02, dip_once=(), seed=0):
    """{(src, dst): GB/s} of a round of CUDA ids: NVLINK, STAGED for a slow pair (both ways) and
    a ``oneway`` (src, dst), half for a slow GPU; ``dip_once`` pairs at 40 % once."""
    rng = random.Random(seed)
    dipped = set()
    slow = {frozenset(p) for p in slow_pairs}
    oneway = set(oneway)

    def measure(pairs):
        out = {}
        for a, b in pairs:
            dip = frozenset((a, b)) in dip_once and frozenset((a, b)) not in dipped
            dipped.update([frozenset((a, b))] if dip else [])
            for s, d in ((a, b), (b, a)):
                rate = STAGED if frozenset((s, d)) in slow or (s, d) in oneway else NVLINK
                rate *= 0.5 if s in slow_gpus or d in slow_gpus else 1.0
                out[(s, d)] = rate * rng.gauss(1.0, noise) * (0.4 if dip else 1.0)
        return out
    return measure


def links(n, slow=(), expected=HOST_EXPECTED):
    return [HostLink(label(g), HOST * (0.45 if g in slow else 1.0), HOST * 0.97, expected,
                     "gen5 x16") for g in gpus(n)]


def nvml(n, value=NV_EXPECTED):
    return {pair_key(label(a), label(b)): value for a in gpus(n) for b in gpus(n) if a < b} \
        if value else {}


def check(n, measure, slow_links=(), expected=NV_EXPECTED, **kwargs):
    c = GpuRounds([label(g) for g in gpus(n)], links(n, slow_links), nvml(n, expected), **kwargs)
    seconds = run_rounds(c, measure, gpus(n))
    return c, c.verdict(), seconds


@pytest.mark.parametrize("n", [2, 3, 4, 8])
def test_a_clean_host_names_nothing_and_measures_every_pair(n):
    _, v, _ = check(n, model())
    assert not v.failed and v.slow_pairs == v.slow_gpus == v.slow_host_links == ()
    assert v.pairs_measured == v.pairs_total == n * (n - 1) // 2
    assert v.rounds == full_round_robin(n)
    assert v.rule == ("expected" if n == 2 else "median")


@pytest.mark.parametrize("n", [4, 8])
def test_a_slow_pair_among_fast_gpus_is_the_path(n):
    _, v, _ = check(n, model(slow_pairs=[(1, 2)]))
    assert [p.path.name for p in v.slow_pairs] == ["GPU 1<->GPU 2"]
    assert "both GPUs reach the rate with other GPUs: the path" in v.slow_pairs[0].conclusion
    assert v.slow_gpus == () and v.slow_host_links == () and v.unresolved == ()
    assert v.rounds <= full_round_robin(n) + 2          # measured twice more, then named


def test_a_pair_slow_one_way_is_named_by_its_direction():
    _, v, _ = check(8, model(oneway=[(5, 3)]))
    p = v.slow_pairs[0].path
    assert (p.src, p.dst, p.both) == ("GPU 5", "GPU 3", False)
    assert p.reverse_gbps == pytest.approx(NVLINK, rel=0.1)


@pytest.mark.parametrize("n", [3, 4, 8])
def test_a_gpu_slow_with_every_peer_is_named_and_its_pairs_are_not(n):
    _, v, _ = check(n, model(slow_gpus={n - 1}))
    assert [s.host for s in v.slow_gpus] == [label(n - 1)]
    assert v.slow_gpus[0].partners == n - 1
    assert v.slow_pairs == () and v.unresolved == () and v.rounds == full_round_robin(n)


@pytest.mark.parametrize("n", [1, 2, 4, 8])
def test_a_slow_host_link_is_named(n):
    _, v, _ = check(n, model(), slow_links={0})
    assert [s.gpu for s in v.slow_host_links] == ["GPU 0"] and v.failed
    assert v.slow_pairs == v.slow_gpus == ()
    assert ("NVML" in v.slow_host_links[0].why) == (n < 3)


def test_two_gpus_a_lost_nvlink_path_is_the_path_not_a_gpu():
    c, v, _ = check(2, model(slow_pairs=[(0, 1)]))
    assert v.rule == "expected" and [p.path.name for p in v.slow_pairs] == ["GPU 0<->GPU 1"]
    named = v.slow_pairs[0]
    assert named.threshold_gbps == pytest.approx(0.6 * NV_EXPECTED)
    assert named.path.both and named.path.gbps == pytest.approx(STAGED, rel=0.1)
    assert "host links are normal: the path between them, not a GPU" in named.conclusion
    assert v.slow_gpus == () and v.rounds == 3          # slow three times before it is named


def test_two_gpus_never_blame_a_gpu_slow_with_its_only_peer():
    _, v, _ = check(2, model(slow_gpus={1}))
    assert v.slow_gpus == () and [p.path.name for p in v.slow_pairs] == ["GPU 0<->GPU 1"]


def test_two_gpus_a_slow_host_link_beside_a_slow_pair_is_said():
    _, v, _ = check(2, model(slow_pairs=[(0, 1)]), slow_links={1})
    assert [s.gpu for s in v.slow_host_links] == ["GPU 1"]
    assert "GPU 1's host link is slow too" in v.slow_pairs[0].conclusion


def test_two_gpus_without_nvml_see_only_a_one_way_fault():
    _, both, _ = check(2, model(slow_pairs=[(0, 1)]), expected=None)
    assert not both.failed and any("NVML gives no figure" in n for n in both.notes)
    _, oneway, _ = check(2, model(oneway=[(1, 0)]), expected=None)
    assert [(p.path.src, p.path.dst) for p in oneway.slow_pairs] == [("GPU 1", "GPU 0")]


def test_a_burst_once_is_transient_and_not_named():
    _, v, _ = check(2, model(dip_once={frozenset((0, 1))}))
    assert not v.failed and v.transient == (("GPU 0", "GPU 1"),) and v.rounds == 2
    _, v8, _ = check(8, model(dip_once={frozenset((2, 6))}))
    assert not v8.failed and v8.transient == (("GPU 2", "GPU 6"),)


def test_pairs_of_different_kinds_are_each_held_against_their_own_link():
    # 4 GPUs, NVLink between 0-1 and 2-3 only (bridged pairs), PCIe between the rest
    expected = {pair_key(label(a), label(b)): NV_EXPECTED if {a, b} in ({0, 1}, {2, 3})
                else HOST_EXPECTED for a in gpus(4) for b in gpus(4) if a < b}
    pcie = {frozenset(p) for p in [(0, 2), (0, 3), (1, 2), (1, 3)]}
    measure = model()

    def mixed(pairs):           # the PCIe pairs at 45 GB/s: 12 % of the NVLink pairs' median
        return {k: 45.0 if frozenset(k) in pcie else v for k, v in measure(pairs).items()}
    c = GpuRounds([label(g) for g in gpus(4)], links(4), expected)
    run_rounds(c, mixed, gpus(4))
    v = c.verdict()
    assert v.rule == "expected" and not v.failed, v
    c = GpuRounds([label(g) for g in gpus(4)], links(4), expected)
    run_rounds(c, lambda pairs: {k: 20.0 if frozenset(k) == frozenset((1, 3)) else v
                                 for k, v in mixed(pairs).items()}, gpus(4))
    assert [p.path.name for p in c.verdict().slow_pairs] == ["GPU 1<->GPU 3"]


def test_one_gpu_has_no_pair_and_says_so():
    c, v, seconds = check(1, model())
    assert v.rule == "none" and v.rounds == 0 and seconds == [] and not v.failed
    assert "no pair to measure" in v.notes[0]


@pytest.mark.parametrize("kwargs, words", [
    ({"gpus": []}, "at least one GPU"),
    ({"gpus": ["GPU 0", ""]}, "non-empty name"),
    ({"gpus": ["GPU 0", "GPU 0"]}, "named once"),
    ({"gpus": ["GPU 0", "GPU 1"], "min_percent": 0}, "min_percent must be a percentage"),
    ({"gpus": ["GPU 0", "GPU 1"], "expect_percent": 101}, "expect_percent must be"),
    ({"gpus": ["GPU 0", "GPU 1"], "min_percent": True}, "min_percent must be"),
    ({"gpus": ["GPU 0"], "host_links": [HostLink("GPU 7", 1.0, 1.0)]}, "not in the check"),
])
def test_bad_settings_are_one_line(kwargs, words):
    with pytest.raises(ConfigError, match=words) as err:
        GpuRounds(**kwargs)
    assert "\n" not in str(err.value)


def test_the_caller_is_held_to_the_protocol():
    c = GpuRounds(["GPU 0", "GPU 1", "GPU 2", "GPU 3"])
    with pytest.raises(ConfigError, match="none waiting"):
        c.record({})
    pairs = c.next_round()
    with pytest.raises(ConfigError, match="before asking"):
        c.next_round()
    rates = {(s, d): 100.0 for a, b in pairs for s, d in ((a, b), (b, a))}
    with pytest.raises(ConfigError, match="missing"):
        c.record(dict(list(rates.items())[1:]))
    for bad in (float("nan"), -1.0, 0, True, "9"):
        with pytest.raises(ConfigError, match="positive number of GB/s"):
            c.record(rates | {pairs[0]: bad})
    c.record(rates)
    assert c.rounds == 1


def test_no_peer_pairs_and_nvml_figures():
    assert parse_no_peer("1-0, 2-3,0-1", gpus(4)) == [(0, 1), (2, 3)]
    assert parse_no_peer("all", gpus(3)) == [(0, 1), (0, 2), (1, 2)]
    for bad in ("0-0", "0-9", "0", "a-b", "0-1-2"):
        with pytest.raises(ConfigError, match="--no-peer takes pairs"):
            parse_no_peer(bad, gpus(4))
    topo = {"gpus": [{"gpu": g, "name": "H200", "pcie_gen_max": 5, "pcie_width": 16,
                      "pcie_width_max": 16, "nvlink_generation": 4} for g in (0, 1, 2)],
            "matrix": [["X", "NV18", "SYS"], ["NV18", "X", "SYS"], ["SYS", "SYS", "X"]]}
    pairs, basis, hosts = expected_figures(topo, [0, 1, 2], unpeered={(1, 2)})
    assert pairs[("GPU 0", "GPU 1")] == 450.0 and "18 NVLinks" in basis[("GPU 0", "GPU 1")]
    assert pairs[("GPU 0", "GPU 2")] == pytest.approx(63.0, rel=0.01)
    assert ("GPU 1", "GPU 2") not in pairs              # no peer access on this platform
    assert hosts["GPU 2"][0] == pytest.approx(63.0, rel=0.01)
    assert expected_figures(None, [0, 1], set()) == ({}, {}, {})


def document(n, measure, slow_links=(), no_peer=()):
    c, _, seconds = check(n, measure, slow_links)
    return {"gpu_rounds": gpu_document(
        c, devices=gpus(n), names=["model"] * n, expected_basis={}, round_seconds=seconds,
        no_peer=list(no_peer), nbytes=160_000_000, repeats=5, method="a model")}


def gate(path, *extra):
    return subprocess.run([sys.executable, "-m", "bandwidth.hostgate", str(path), *extra],
                          cwd=ROOT, capture_output=True, text=True, timeout=60,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})


def test_the_document_renders_and_reads_back_to_the_same_verdict(tmp_path):
    doc = document(8, model(slow_gpus={3}, slow_pairs=[(0, 6)]), slow_links={5})
    text = "\n".join(render(doc["gpu_rounds"]))
    assert "# SLOW GPU GPU 3:" in text and "# SLOW HOST LINK GPU 5:" in text
    assert "# SLOW PAIR GPU 0<->GPU 6:" in text and text.splitlines()[-1].startswith("# FAILED")
    path = tmp_path / "g.json"
    path.write_text(json.dumps(doc))
    v = load_gpu_rounds(str(path), json.loads(path.read_text())).verdict()
    assert [s.host for s in v.slow_gpus] == ["GPU 3"]
    assert [p.path.name for p in v.slow_pairs] == ["GPU 0<->GPU 6"]
    assert doc["gpu_rounds"]["verdict"]["line"] == text.splitlines()[-1]


def test_the_host_gate_names_the_gpu_the_pair_and_the_host_link(tmp_path):
    path = tmp_path / "g.json"
    path.write_text(json.dumps(document(2, model(slow_pairs=[(0, 1)]),
                                       no_peer=[("GPU 0", "GPU 1")])))
    proc = gate(path, "--junit", str(tmp_path / "g.xml"), "--summary-md", str(tmp_path / "s.md"))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "# SLOW PAIR GPU 0<->GPU 1:" in proc.stdout and "not a GPU" in proc.stdout
    assert "pair GPU 0<->GPU 1" in proc.stdout.splitlines()[-3]
    import xmlschema
    xmlschema.XMLSchema(str(ROOT / "tests" / "junit-10.xsd")).validate(str(tmp_path / "g.xml"))
    xml = (tmp_path / "g.xml").read_text()
    assert xml.count("<failure") == 1 and "--no-peer" in xml and 'name="GPU 0"' in xml
    assert "**SLOW PAIR**" in (tmp_path / "s.md").read_text()
    path.write_text(json.dumps(document(8, model(slow_gpus={2}), slow_links={6})))
    proc = gate(path)
    assert proc.returncode == 1 and "# SLOW GPU GPU 2:" in proc.stdout
    assert "# SLOW HOST LINK GPU 6:" in proc.stdout


def test_the_host_gate_passes_a_clean_host_and_one_gpu(tmp_path):
    path = tmp_path / "g.json"
    for n in (1, 4):
        path.write_text(json.dumps(document(n, model())))
        proc = gate(path)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "# PASSED (" in proc.stdout and "no slow GPU, GPU pair or host link" in proc.stdout


def test_the_host_gate_refuses_a_broken_document_in_one_line(tmp_path):
    doc = document(4, model())["gpu_rounds"]
    broken = [{}, dict(doc, gpus=[]), dict(doc, gpus=["GPU 0", "GPU 0"]),
              dict(doc, min_percent=0), dict(doc, round_pairs=[]),
              dict(doc, measurements=doc["measurements"][1:]),
              dict(doc, measurements=[dict(m, gbps=[-1, 1]) for m in doc["measurements"]]),
              dict(doc, measurements=[dict(m, pair=["GPU 0", "GPU 9"])
                                      for m in doc["measurements"]]),
              dict(doc, host_links=[{"gpu": "GPU 0", "h2d_gbps": "x", "d2h_gbps": 1}]),
              dict(doc, host_links=doc["host_links"][:1] * 2),
              dict(doc, expected_pairs=[{"pair": ["GPU 0"], "gbps": 1}]),
              dict(doc, no_peer={})]
    path = tmp_path / "g.json"
    for k, bad in enumerate(broken):
        path.write_text(json.dumps({"gpu_rounds": bad}))
        proc = gate(path)
        assert proc.returncode == 2 and len(proc.stderr.splitlines()) == 1, (k, proc.stderr)
        assert "not a GPU check's document" in proc.stderr or "is not {" in proc.stderr, k


def ceiling(*argv):
    return subprocess.run([sys.executable, "-m", "bandwidth.ceiling", *argv], cwd=ROOT,
                          capture_output=True, text=True, timeout=60,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin",
                               "CUDA_VISIBLE_DEVICES": ""})


@pytest.mark.parametrize("argv, words", [
    (["--gpus-check", "--cpus", "2"], "CPU devices have none"),
    (["--no-peer", "0-1"], "add --gpus-check"),
    (["--gpus-check", "--network"], "one at a time"),
    (["--gpus-check", "--min-percent", "0"], "percentage above 0"),
    (["--gpus-check", "--expect-links", "abc"], "percentage"),
    (["--gpus-check", "--junit", "x.xml"], "python -m bandwidth.hostgate"),
    (["--gpus-check", "--mb", "0"], "--mb must be a positive number"),
    (["--gpus-check", "--screen-rounds", "2"], "add --network --rounds"),
])
def test_the_ceilings_gpu_flags_refuse_bad_input_in_one_line(argv, words):
    proc = ceiling(*argv)
    assert proc.returncode == 2 and len(proc.stderr.splitlines()) == 1, proc.stderr
    assert words in proc.stderr


def test_without_a_gpu_the_check_is_waived_in_one_line(tmp_path):
    proc = ceiling("--gpus-check", "--json", str(tmp_path / "g.json"))
    assert proc.returncode == 0 and proc.stderr == ""
    assert proc.stdout.splitlines() == [
        f"# GPU check waived: no CUDA GPU is visible here (CPU devices have no GPU links); "
        f"nothing measured, {tmp_path / 'g.json'} not written"]


def test_the_measurement_flow_with_the_gpu_calls_replaced_by_a_model(monkeypatch, tmp_path):
    """measure_gpus and the command line's --gpus-check on 4 'GPUs' whose copies are a model: a
    pair with peer access off (--no-peer 1-3) reads at the staging rate and is named."""
    from bandwidth.ceiling import cli, gpucheck

    topo = {"gpus": [{"gpu": g, "name": "H200", "pcie_gen_max": 5, "pcie_width": 16,
                      "pcie_width_max": 16, "nvlink_generation": 4} for g in gpus(4)],
            "matrix": [["X" if a == b else "NV18" for b in gpus(4)] for a in gpus(4)]}

    class Topology:
        def to_dict(self):
            return topo

    measure = model()

    class Copies:
        def __init__(self, ids, nbytes, repeats, burst):
            assert ids == gpus(4) and (nbytes, repeats, burst) == (64_000_000, 3, 5)

        def measure(self, pairs):
            return {k: STAGED if frozenset(k) == {1, 3} else v
                    for k, v in measure(pairs).items()}

    monkeypatch.setattr(gpucheck.rawcopy, "available", lambda: True)
    monkeypatch.setattr(gpucheck.rawcopy, "pci_bus_id", lambda g: None)
    monkeypatch.setattr(gpucheck, "read_topology", lambda ids, bus: (Topology(), None))
    monkeypatch.setattr(gpucheck, "visible_gpus", lambda: 4)
    monkeypatch.setattr(gpucheck, "set_peer_access", lambda ids, off: set())
    monkeypatch.setattr(gpucheck.host, "host_link_gbps",
                        lambda g, nbytes, pinned, to_device, repeats, burst: HOST)
    monkeypatch.setattr(gpucheck, "PairCopies", Copies)
    monkeypatch.setattr(gpucheck.torch.cuda, "get_device_name", lambda g: "NVIDIA H200")
    monkeypatch.setattr(gpucheck.torch.cuda, "empty_cache", lambda: None)
    path = tmp_path / "g.json"
    status = cli.main(["--gpus-check", "--no-peer", "3-1", "--p2p-mb", "64", "--repeats", "3",
                       "--json", str(path)])
    doc = json.loads(path.read_text())["gpu_rounds"]
    assert status == 1 and doc["no_peer"] == [["GPU 1", "GPU 3"]]
    assert [p["name"] for p in doc["verdict"]["slow_pairs"]] == ["GPU 1<->GPU 3"]
    assert doc["rule"] == "median" and len(doc["expected_pairs"]) == 6
    assert doc["host_links"][0]["expected_gbps"] == pytest.approx(63.0, rel=0.01)
    assert gate(path).returncode == 1
