"""--expect-links (issue 20, item 3): what NVML's facts say each link carries, and the gate on
recorded topologies and ceilings of healthy and degraded machines (fewer NVLinks, fewer PCIe
lanes, a lower PCIe generation), without any baseline."""

import subprocess
import sys

import pytest
from conftest import ROOT

from bandwidth.ceiling.expect import expectations, link_gates


def gpu(i, name="NVIDIA H100 80GB HBM3", gen=5, width=16, width_max=16, nvlinks=18, nvgen=4):
    return {"gpu": i, "name": name, "pci_bus_id": f"0000:{i + 1:02x}:00.0", "pcie_gen": 1,
            "pcie_gen_max": gen, "pcie_width": width, "pcie_width_max": width_max,
            "nvlinks": nvlinks, "nvlink_version": nvgen, "nvlink_generation": nvgen,
            "errors": {}}


def topology(gpus, pair_labels=None):
    n = len(gpus)
    labels = pair_labels or {}
    matrix = [["X" if i == j else labels.get((min(i, j), max(i, j)), "NV18") for j in range(n)]
              for i in range(n)]
    return {"gpus": gpus, "matrix": matrix, "notes": []}


def ceilings(topo, p2p=380.0, host=(55.0, 54.0), per_pair=None, per_gpu=None):
    ids = [g["gpu"] for g in topo["gpus"]]
    values = [[None if i == j else (per_pair or {}).get((min(i, j), max(i, j)), p2p)
               for j in ids] for i in ids]
    return {"topology": topo,
            "p2p": [{"key": "unidirectional_enabled", "devices": ids, "values": values}],
            "host_links": [{"gpu": i, "h2d_pinned_gbps": (per_gpu or {}).get(i, host)[0],
                            "d2h_pinned_gbps": (per_gpu or {}).get(i, host)[1]} for i in ids]}


def verdicts(records):
    return {r.name: r.verdict for r in records}


def test_expectations_follow_from_nvml_facts():
    exp = {e.name: e for e in expectations(topology([gpu(0), gpu(1)]))}
    assert exp["GPU 0<->1 NVLink"].expected_gbps == pytest.approx(18 * 25.0)
    assert exp["GPU 0<->1 NVLink"].basis == "18 NVLinks x 25 GB/s (NVLink 4)"
    assert exp["GPU 0 PCIe"].expected_gbps == pytest.approx(16 * 3.938)
    a100 = {e.name: e for e in expectations(topology(
        [gpu(0, "A100", gen=4, nvgen=3), gpu(1, "A100", gen=4, nvgen=3)], {(0, 1): "NV12"}))}
    assert a100["GPU 0<->1 NVLink"].expected_gbps == pytest.approx(12 * 25.0)
    assert a100["GPU 1 PCIe"].expected_gbps == pytest.approx(16 * 1.969)


def test_a_healthy_machine_passes():
    records = link_gates(ceilings(topology([gpu(0), gpu(1)])), 60.0)
    assert verdicts(records) == {"GPU 0<->1 NVLink": "ok", "GPU 0 PCIe": "ok", "GPU 1 PCIe": "ok"}
    assert not any(r.failed for r in records)
    # one GPU: only its PCIe link
    assert verdicts(link_gates(ceilings(topology([gpu(0)])), 60.0)) == {"GPU 0 PCIe": "ok"}


def test_a_pair_with_fewer_nvlinks_than_the_others_is_degraded():
    """4 x H100 on NVSwitch where the 0<->2 pair came up with 12 of 18 links (recorded)."""
    topo = topology([gpu(i) for i in range(4)], {(0, 2): "NV12"})
    records = link_gates(ceilings(topo, per_pair={(0, 2): 255.0}), 60.0)
    bad = [r for r in records if r.failed]
    assert [(r.name, r.verdict) for r in bad] == [("GPU 0<->2 NVLink", "LINK DEGRADED")]
    assert bad[0].detail.startswith("12 NVLinks where the other GPU pairs have 18")


def test_a_slow_nvlink_pair_is_below_expected():
    records = link_gates(ceilings(topology([gpu(0), gpu(1)]), p2p=200.0), 60.0)
    (nv,) = [r for r in records if "NVLink" in r.name]
    assert nv.verdict == "BELOW EXPECTED" and nv.failed
    assert nv.reference == pytest.approx(0.6 * 450.0)
    assert "measured 200.000 GB/s, reference 270.000 GB/s" in nv.message()


def test_fewer_pcie_lanes_or_a_lower_generation_fail_naming_the_gpu():
    # GPU 1 trained at x8 of x16 and copies at about half the rate (recorded)
    lanes = link_gates(ceilings(topology([gpu(0), gpu(1, width=8)]),
                                per_gpu={1: (26.5, 26.0)}), 60.0)
    assert verdicts(lanes)["GPU 1 PCIe"] == "LINK DEGRADED"
    assert "trained at x8 of x16" in [r for r in lanes if r.name == "GPU 1 PCIe"][0].detail
    # GPU 1's slot only reaches gen4: below the other H100's gen5
    gen = link_gates(ceilings(topology([gpu(0), gpu(1, gen=4)]), per_gpu={1: (26.0, 26.0)}), 60.0)
    (pcie1,) = [r for r in gen if r.name == "GPU 1 PCIe"]
    assert pcie1.verdict == "LINK DEGRADED"
    assert "gen4 where the other NVIDIA H100 80GB HBM3 GPUs have gen5" in pcie1.detail
    # one GPU alone whose link runs at a fraction of gen5 x16
    alone = link_gates(ceilings(topology([gpu(0)]), host=(20.0, 20.0)), 60.0)
    assert verdicts(alone) == {"GPU 0 PCIe": "BELOW EXPECTED"}


def test_a_link_not_measured_fails_closed():
    doc = ceilings(topology([gpu(0), gpu(1)]))
    doc["host_links"] = None
    assert verdicts(link_gates(doc, 60.0))["GPU 0 PCIe"] == "NOT MEASURED"


def test_the_command_refuses_expect_links_on_cpu_devices():
    proc = subprocess.run([sys.executable, "-m", "bandwidth.ceiling", "--cpus", "2",
                           "--expect-links"], cwd=ROOT, capture_output=True, text=True,
                          timeout=60, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 2 and len(proc.stderr.splitlines()) == 1
    assert "--expect-links judges GPU links from NVML's facts" in proc.stderr
