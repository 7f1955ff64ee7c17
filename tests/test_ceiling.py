"""The ceiling measurement (python -m bandwidth.ceiling): formulas, sizes, the result model and
its renderings, the CPU-device paths through real processes, the NVML topology reader against a
fake pynvml, the command line; and, on the GPU machine, the GPU paths."""

import json
import subprocess
import sys
import types

import pytest
import torch
from conftest import ROOT, main_without_torch, requires_cuda

from bandwidth.ceiling import render
from bandwidth.ceiling.collectives import COLLECTIVES, aligned_numel, figures
from bandwidth.ceiling.model import MATRICES, Ceilings, Matrix
from bandwidth.ceiling.suite import CeilingOptions, measure_ceilings
from bandwidth.ceiling.timing import median_seconds
from bandwidth.config.values import parse_size, size_sweep
from bandwidth.errors import ConfigError
from bandwidth.hardware.devices import DeviceSet
from bandwidth.hardware.topology import Topology, normalise_bus_id, read_topology

SMALL = CeilingOptions(nbytes=8 * 10**6, p2p_nbytes=8 * 10**6, p2p_burst=2, repeats=2, burst=2,
                       latency_repeat=10,
                       sizes=(1 << 16, 1 << 17), iters=3, warmup=1, timeout_s=100)


def run_ceiling(*args, timeout=120):
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    return subprocess.run([sys.executable, "-m", "bandwidth.ceiling", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout, check=False)


# ----- formulas and sizes -----

def test_sizes_are_powers_of_two_as_in_nccl_tests():
    assert parse_size("1M") == 1 << 20 and parse_size("64K") == 1 << 16
    assert parse_size("1G") == 1 << 30 and parse_size("4096") == 4096
    assert size_sweep(1 << 20, 1 << 30, 2)[-1] == 1 << 30
    assert len(size_sweep(1 << 20, 1 << 30, 2)) == 11
    with pytest.raises(ConfigError, match="1X"):
        parse_size("1X")


def test_bus_factors_are_nccl_tests():
    assert COLLECTIVES["all_reduce"].bus_factor(2) == 1.0
    assert COLLECTIVES["all_reduce"].bus_factor(8) == 1.75
    assert COLLECTIVES["reduce_scatter"].bus_factor(8) == 0.875
    assert COLLECTIVES["all_gather"].bus_factor(4) == 0.75
    assert COLLECTIVES["broadcast"].bus_factor(8) == 1.0
    f = figures("all_reduce", 1 << 30, 0.00650, 2)
    assert f["algbw_gbps"] == pytest.approx((1 << 30) / 0.0065 / 1e9)
    assert f["busbw_gbps"] == f["algbw_gbps"]
    assert figures("all_gather", 10**9, 1.0, 4)["busbw_gbps"] == pytest.approx(0.75)


def test_sizes_align_to_equal_float32_shards():
    assert aligned_numel(1 << 20, 2) == 1 << 18
    assert aligned_numel(1 << 20, 3) % 3 == 0
    assert aligned_numel(4, 8) == 8


def test_median_of_bursts_per_call():
    calls = []
    seconds = median_seconds(lambda: calls.append(1), lambda: None, repeats=3, warmup=1, burst=4)
    assert len(calls) == 16 and 0 <= seconds < 0.01


def test_options_refuse_unknown_parts_and_name_the_valid_ones():
    with pytest.raises(ConfigError, match="unknown part.*p2p-disabled"):
        CeilingOptions(skip=frozenset({"p2pp"}))
    with pytest.raises(ConfigError, match="repeats"):
        CeilingOptions(repeats=0)


# ----- CPU devices: what applies is measured, the rest is n/a with its reason -----

@pytest.fixture(scope="module")
def cpu_ceilings():
    return measure_ceilings(DeviceSet("cpu", (0, 1)), SMALL, progress=lambda m: None)


@pytest.mark.timeout(120)
def test_cpu_devices_mark_gpu_figures_not_applicable(cpu_ceilings):
    c = cpu_ceilings
    assert [m.key for m in c.p2p] == list(MATRICES)
    for m in c.p2p:
        assert m.values is None and "CPU devices" in m.reason
    assert c.host_links is None and "CPU devices" in c.not_applicable["host_links"]
    assert c.topology is None and c.not_applicable["topology"]
    assert c.failures == []


@pytest.mark.timeout(120)
def test_cpu_devices_measure_memory_and_gloo_all_reduce(cpu_ceilings):
    c = cpu_ceilings
    assert c.host_memory.copy_gbps > 0 and c.host_memory.sum_gbps > 0
    assert c.host_memory.threads >= 1
    s = c.collectives
    assert s.backend == "gloo" and "Gloo stands in for NCCL" in s.note
    assert [r["nbytes"] for r in s.rows] == [1 << 16, 1 << 17]
    for row in s.rows:
        assert set(row["results"]) == set(COLLECTIVES)
        for name, r in row["results"].items():
            assert r["wrong"] == 0, name
            assert r["busbw_gbps"] > 0 and r["seconds"] > 0


@pytest.mark.timeout(120)
def test_json_round_trip_uses_null_never_zero(cpu_ceilings):
    doc = json.loads(json.dumps({"ceilings": cpu_ceilings.to_dict()}))
    back = Ceilings.from_dict(doc["ceilings"])
    assert back == cpu_ceilings
    assert doc["ceilings"]["schema_version"] == 1
    assert doc["ceilings"]["host_links"] is None
    assert all(m["values"] is None and m["reason"] for m in doc["ceilings"]["p2p"])


@pytest.mark.timeout(120)
def test_text_says_n_a_with_the_reason(cpu_ceilings):
    text = "\n".join(render.lines(cpu_ceilings))
    assert ("Unidirectional P2P=Enabled Bandwidth (P2P Writes) Matrix (GB/s): n/a (CPU devices"
            in text)
    assert "Host<->device bandwidth (GB/s): n/a" in text
    assert "Gloo stands in for NCCL" in text and "busbw" in text


def test_matrix_text_reads_like_p2p_bandwidth_latency_test():
    m = Matrix("unidirectional_enabled", *MATRICES["unidirectional_enabled"], "method",
               [0, 1], [[1850.123, 387.4], [None, 1849.5]])
    lines = render.matrix_lines(m)
    assert lines[0] == "Unidirectional P2P=Enabled Bandwidth (P2P Writes) Matrix (GB/s)"
    assert lines[1] == "   D\\D       0       1"
    assert lines[2] == "     0 1850.12  387.40"
    assert lines[3] == "     1     n/a 1849.50"
    lat = Matrix("latency_enabled", *MATRICES["latency_enabled"], "m", [0, 1], [[2.0, 2.2]] * 2)
    assert render.matrix_lines(lat)[1].startswith("   GPU")


# ----- topology, through a fake pynvml -----

class _NVMLError(Exception):
    pass


def _fake_pynvml(switched: bool, fail_width: bool = False):
    bus = {0: b"00000000:00:06.0", 1: b"00000000:00:07.0"}
    by_bus = {normalise_bus_id(v): k for k, v in bus.items()}
    nv = types.SimpleNamespace(
        NVMLError=_NVMLError, NVML_NVLINK_MAX_LINKS=18, NVML_FEATURE_ENABLED=1,
        NVML_NVLINK_DEVICE_TYPE_SWITCH=2, NVML_DEVICE_ARCH_HOPPER=9,
        NVML_TOPOLOGY_SYSTEM=50, NVML_TOPOLOGY_HOSTBRIDGE=30,
        nvmlInit=lambda: None, nvmlShutdown=lambda: None,
        nvmlDeviceGetHandleByPciBusId=lambda b: by_bus[normalise_bus_id(b.decode())],
        nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceGetName=lambda h: "NVIDIA H200",
        nvmlDeviceGetPciInfo=lambda h: types.SimpleNamespace(busId=bus[h]),
        nvmlDeviceGetCurrPcieLinkGeneration=lambda h: 5,
        nvmlDeviceGetMaxPcieLinkGeneration=lambda h: 5,
        nvmlDeviceGetMaxPcieLinkWidth=lambda h: 16,
        nvmlDeviceGetNvLinkVersion=lambda h, link: 4,
        nvmlDeviceGetArchitecture=lambda h: 9,
        nvmlDeviceGetTopologyCommonAncestor=lambda a, b: 30,
    )

    def width(h):
        if fail_width:
            raise _NVMLError("Not Supported")
        return 16

    def state(h, link):
        if not switched:
            raise _NVMLError("Not Supported")
        return 1

    nv.nvmlDeviceGetCurrPcieLinkWidth = width
    nv.nvmlDeviceGetNvLinkState = state
    nv.nvmlDeviceGetNvLinkRemotePciInfo = lambda h, link: types.SimpleNamespace(
        busId=b"00000000:00:10.0")
    nv.nvmlDeviceGetNvLinkRemoteDeviceType = lambda h, link: 2
    return nv


def test_topology_without_pynvml_gives_a_reason(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)
    topo, reason = read_topology([0, 1])
    assert topo is None and "pynvml" in reason


def test_topology_of_gpus_on_an_nvswitch(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", _fake_pynvml(switched=True))
    topo, reason = read_topology([0, 1], ["0000:00:06.0", "0000:00:07.0"])
    assert reason is None
    assert topo.matrix == [["X", "NV18"], ["NV18", "X"]]
    g = topo.gpus[0]
    assert (g.name, g.pcie_gen, g.pcie_width_max, g.nvlinks, g.nvlink_generation) == \
        ("NVIDIA H200", 5, 16, 18, 4)
    assert g.pci_bus_id == "0000:00:06.0" and g.errors == {}
    assert Topology.from_dict(json.loads(json.dumps(topo.to_dict()))) == topo
    assert "NV18" in "\n".join(render.topology_lines(
        types.SimpleNamespace(topology=topo, not_applicable={})))


def test_topology_records_each_failing_field_as_null(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", _fake_pynvml(switched=False, fail_width=True))
    topo, _ = read_topology([0, 1], ["0000:00:06.0", "0000:00:07.0"])
    g = topo.gpus[1]
    assert g.pcie_width is None and g.errors["pcie_width"] == "Not Supported"
    assert g.nvlinks is None and "nvlinks" in g.errors
    assert topo.matrix[0][1] == "PHB"


def test_topology_falls_back_to_nvml_p2p_status(monkeypatch):
    nv = _fake_pynvml(switched=True)
    nv.nvmlDeviceGetNvLinkRemotePciInfo = nv.nvmlDeviceGetNvLinkRemoteDeviceType = \
        lambda h, link: (_ for _ in ()).throw(_NVMLError("Not Supported"))
    nv.NVML_P2P_CAPS_INDEX_NVLINK, nv.NVML_P2P_STATUS_OK = 2, 0
    nv.nvmlDeviceGetP2PStatus = lambda a, b, index: 0
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    topo, _ = read_topology([0, 1], ["0000:00:06.0", "0000:00:07.0"])
    assert topo.matrix == [["X", "NV18"], ["NV18", "X"]]


# ----- the command line -----

@pytest.mark.parametrize("args, message", [
    (["-b", "1X", "--cpus", "2"], "1X"),
    (["--cpus", "2", "--skip", "nope"], "unknown part"),
    (["--cpus", "2", "-b", "1M", "-e", "64K"], "smaller than -b"),
    (["--gpus", "0", "--cpus", "2"], "exclude each other"),
    (["--cpus", "2", "--repeats", "x"], "invalid int value"),
])
def test_bad_input_is_one_line_and_status_2(args, message):
    done = run_ceiling(*args)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr and len(done.stderr.strip().splitlines()) == 1


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU message")
def test_gpus_that_do_not_exist_are_refused():
    done = run_ceiling("--gpus", "0,1")
    assert done.returncode == 2 and "does not exist" in done.stderr


@pytest.mark.timeout(120)
def test_cli_on_cpu_devices_writes_json_under_one_key(tmp_path):
    out = tmp_path / "c.json"
    done = run_ceiling("--cpus", "2", "-b", "64K", "-e", "64K", "-n", "2", "-w", "1",
                       "--repeats", "1", "--mb", "4", "--json", str(out))
    assert done.returncode == 0, done.stderr
    assert "P2P=Disabled Latency Matrix (us): n/a" in done.stdout
    doc = json.loads(out.read_text())
    assert list(doc) == ["ceilings"]
    assert doc["ceilings"]["collectives"]["rows"][0]["nbytes"] == 65536
    assert "# gloo collectives" in done.stderr          # progress goes to stderr
    assert "# collectives: 65,536 B done (1 of 1 sizes, " in done.stderr     # a line per size


def test_unpeered_child_refuses_without_gpus():
    if torch.cuda.is_available():
        pytest.skip("checks the no-GPU message")
    done = subprocess.run([sys.executable, "-m", "bandwidth.ceiling.unpeered", "--gpus", "0,1",
                           "--nbytes", "1000"], cwd=ROOT, capture_output=True, text=True,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, timeout=60,
                          check=False)
    assert done.returncode == 2 and done.stderr.startswith("error:")


# ----- GPUs (benchmarks/gpu_all.sh on the GPU machine) -----

GPUS = tuple(range(torch.cuda.device_count())) if torch.cuda.is_available() else ()


@pytest.fixture(scope="module")
def gpu_ceilings():
    options = CeilingOptions(nbytes=64 * 10**6, p2p_nbytes=64 * 10**6, repeats=3, burst=5,
                             latency_repeat=100,
                             sizes=(1 << 20, 1 << 24), iters=10, warmup=2, timeout_s=300)
    return measure_ceilings(DeviceSet("cuda", GPUS), options, progress=lambda m: None)


@pytest.mark.gpu
@requires_cuda
@pytest.mark.timeout(600)
def test_gpu_matrices_are_square_positive_and_peer_access_helps(gpu_ceilings):
    c, n = gpu_ceilings, len(GPUS)
    assert c.failures == []
    for m in c.p2p:
        assert m.values is not None, (m.key, m.reason)
        assert len(m.values) == n and all(len(row) == n for row in m.values)
        assert all(v is None or v > 0 for row in m.values for v in row)
    if n > 1:
        uni_on, uni_off = c.matrix("unidirectional_enabled"), c.matrix("unidirectional_disabled")
        lat_on, lat_off = c.matrix("latency_enabled"), c.matrix("latency_disabled")
        if uni_on.values[0][1] is not None:
            assert uni_off.values[0][1] < uni_on.values[0][1]
            assert lat_on.values[0][1] < lat_off.values[0][1]


@pytest.mark.gpu
@requires_cuda
@pytest.mark.timeout(600)
def test_gpu_host_links_collectives_and_topology(gpu_ceilings):
    c = gpu_ceilings
    if len(GPUS) > 1:
        assert c.host_path["bound_busbw_gbps"] > 0
    for h in c.host_links:
        assert h.h2d_pinned_gbps > h.h2d_pageable_gbps > 0 and h.device_add_gbps > 0
    if len(GPUS) > 1:
        assert c.collectives.backend == "nccl"
        for row in c.collectives.rows:
            assert all(r["wrong"] == 0 and r["busbw_gbps"] > 0 for r in row["results"].values())
        assert "torch.cuda.nccl" in c.collectives.timing
    pytest.importorskip("pynvml")
    assert c.topology is not None, c.not_applicable.get("topology")
    assert [g.gpu for g in c.topology.gpus] == list(GPUS)
    assert c.topology.matrix[0][0] == "X"


@pytest.mark.gpu
@requires_cuda
@pytest.mark.timeout(300)
def test_gpu_collectives_one_process_and_one_per_gpu_give_right_results():
    if len(GPUS) < 2:
        pytest.skip("needs two GPUs")
    from bandwidth.ceiling import collectives
    devices = DeviceSet("cuda", GPUS)
    assert collectives.one_process(devices)
    for one in (True, False):
        rows = collectives.sweep(devices, [1 << 20, 3 << 20], iters=3, warmup=1, repeats=2,
                                 timeout_s=240, one=one)
        assert [r["nbytes"] for r in rows] == [1 << 20, 3 << 20]
        for row in rows:
            assert set(row["results"]) == set(collectives.COLLECTIVES)
            for name, r in row["results"].items():
                assert r["wrong"] == 0 and r["busbw_gbps"] > 0, (one, name, r)


@pytest.mark.parametrize("argv", [["--help"], ["--cpus", "0"], ["--mb", "nan"],
                                  ["--gpus", "0", "--cpus", "2"]])
def test_help_and_bad_flags_answer_without_importing_torch(argv):
    # As measure.py: importing torch costs 2 s of CPU; --help and a typo answer first.
    imported, status, stderr = main_without_torch("bandwidth.ceiling.cli:main", argv)
    assert (imported, status) == (False, 0 if argv == ["--help"] else 2), stderr
    assert "Traceback" not in stderr
