"""Per-host gates on the host-to-host matrix and the re-pairing pass (issue 20, item 5), on
recorded matrices: a host shaped to half the rate of the others is named at fault and no other,
a slow path between two healthy hosts blames neither, two hosts cannot be told apart, and the
command line writes its reports. (The namespace-lab version of the target needs issue 19's lab.)"""

import json
import subprocess
import sys

import pytest
from conftest import ROOT

from bandwidth.links.hostmatrix import HostMatrix
from bandwidth.report.hostgate import judge


def matrix(hosts, rate, overrides=None, ranks_per_host=1):
    """A recorded matrix: every cell ``rate`` GB/s (with +-2 % of spread), except the host pairs
    in ``overrides`` ({(a, b): gbps}, both directions)."""
    labels = [f"{r}@{h}" for h in hosts for r in range(ranks_per_host)]
    labels = [f"{i}@{label.split('@')[1]}" for i, label in enumerate(labels)]
    rows = []
    for i, a in enumerate(labels):
        row = []
        for j, b in enumerate(labels):
            ha, hb = a.split("@")[1], b.split("@")[1]
            if i == j:
                row.append(None)
                continue
            key = tuple(sorted((ha, hb)))
            value = (overrides or {}).get(key, rate)
            row.append(value * (1 + 0.02 * (((i * 7 + j * 3) % 5) - 2) / 2))
        rows.append(row)
    return HostMatrix("recorded.json", tuple(labels), tuple(tuple(r) for r in rows))


HOSTS = ["node1", "node2", "node3", "node4"]


@pytest.mark.parametrize("bad", HOSTS)
def test_a_host_at_half_the_rate_is_named_and_no_other(bad):
    slow = {tuple(sorted((bad, h))): 5.0 for h in HOSTS if h != bad}
    v = judge(matrix(HOSTS, 10.0, slow), 70.0)
    assert v.faulty_hosts == [bad]
    assert v.slowest_host == bad and bad in v.slowest_pair
    assert sorted(v.failing_pairs) == sorted(slow) and v.path_faults == []


def test_three_hosts_and_several_ranks_per_host():
    v = judge(matrix(["a", "b", "c"], 12.0, {("a", "c"): 6.0, ("b", "c"): 6.0},
                     ranks_per_host=2), 70.0)
    assert v.faulty_hosts == ["c"] and v.median_gbps == pytest.approx(12.0, rel=0.05)


def test_a_slow_path_between_healthy_hosts_blames_neither():
    v = judge(matrix(HOSTS, 10.0, {("node2", "node3"): 4.0}), 70.0)
    assert v.failing_pairs == [("node2", "node3")] and v.faulty_hosts == []
    assert v.path_faults == [("node2", "node3")]


def test_a_healthy_cluster_passes_and_two_hosts_cannot_be_told_apart():
    v = judge(matrix(HOSTS, 10.0), 70.0)
    assert v.failing_pairs == [] and v.faulty_hosts == []
    two = judge(matrix(["x", "y"], 10.0, {("x", "y"): 3.0}), 70.0)
    # one pair: its own best is the reference, so it passes; nothing to re-pair against
    assert two.failing_pairs == [] and two.faulty_hosts == []


def test_the_command_line_names_the_host_and_writes_junit(tmp_path):
    m = matrix(HOSTS, 10.0, {tuple(sorted(("node3", h))): 5.0 for h in HOSTS if h != "node3"})
    path = tmp_path / "hosts.json"
    path.write_text(json.dumps({"network": {"hosts": list(m.labels),
                                            "gbps": [list(r) for r in m.gbps]}}))
    proc = subprocess.run([sys.executable, "-m", "bandwidth.hostgate", str(path), "--junit",
                           str(tmp_path / "h.xml")], cwd=ROOT, capture_output=True, text=True,
                          timeout=60, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "# HOST AT FAULT node3" in proc.stdout
    assert "# FAILED: 3 of 6 pairs slow; at fault: node3" in proc.stdout
    import xmlschema
    xmlschema.XMLSchema(str(ROOT / "tests" / "junit-10.xsd")).validate(str(tmp_path / "h.xml"))
    bad = subprocess.run([sys.executable, "-m", "bandwidth.hostgate",
                          str(tmp_path / "no.json")], cwd=ROOT, capture_output=True, text=True, timeout=60,
                         env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert bad.returncode == 2 and len(bad.stderr.splitlines()) == 1
