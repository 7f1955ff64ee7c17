"""The environment's driver version (NVML, else /proc, else nvidia-smi) and its compact link
description, the part of the hardware fingerprint that a lost NVLink or a narrower PCIe link
changes."""

import stat
import sys

from bandwidth.hardware import environment
from bandwidth.hardware.devices import DeviceSet
from bandwidth.hardware.topology import GpuLinks, Topology, compact_links, nvlink_count

PROC_TEXT = ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  "
             "(dvs-builder@U16-I3-B03-4-3)  Thu Sep 18 00:00:00 UTC 2025\n"
             "GCC version:  gcc version 13.3.0 (Ubuntu 13.3.0-6ubuntu2~24.04)\n")
PROC_TEXT_PROPRIETARY = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar 5\n"


def fake_smi(folder, body: str):
    """An ``nvidia-smi`` on PATH that runs ``body`` (a shell script)."""
    path = folder / "nvidia-smi"
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return folder


def no_nvml(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)


def test_the_driver_comes_from_proc_without_pynvml(monkeypatch, tmp_path):
    no_nvml(monkeypatch)
    monkeypatch.setenv("PATH", str(tmp_path))                 # no nvidia-smi either
    for text, version in ((PROC_TEXT, "580.159.04"), (PROC_TEXT_PROPRIETARY, "550.54.15")):
        (tmp_path / "version").write_text(text)
        assert environment.driver_version(str(tmp_path / "version")) == version


def test_the_driver_comes_from_nvidia_smi_when_proc_has_none(monkeypatch, tmp_path):
    no_nvml(monkeypatch)
    monkeypatch.setenv("PATH", str(fake_smi(tmp_path, 'echo "580.159.04"; echo "580.159.04"')))
    assert environment.driver_version(str(tmp_path / "absent")) == "580.159.04"


def test_no_driver_anywhere_is_none_and_a_hung_nvidia_smi_is_cut_off(monkeypatch, tmp_path):
    no_nvml(monkeypatch)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert environment.driver_version(str(tmp_path / "absent")) is None
    fake_smi(tmp_path, "sleep 30")
    monkeypatch.setattr(environment, "NVIDIA_SMI_TIMEOUT_S", 0.5)
    assert environment.driver_version(str(tmp_path / "absent")) is None
    fake_smi(tmp_path, "echo 'NVIDIA-SMI has failed' >&2; exit 9")
    assert environment.driver_version(str(tmp_path / "absent")) is None


def test_cpu_devices_have_no_links_or_driver():
    env = environment.describe(DeviceSet("cpu", (0, 1)))
    assert env["links"] is None and env["driver"] is None
    assert [d["name"] for d in env["devices"]] == ["host memory", "host memory"]


def test_compact_links_keep_nvlink_counts_per_pair_and_pcie_per_gpu():
    gpus = [GpuLinks(0, pcie_gen=1, pcie_gen_max=5, pcie_width=16, nvlinks=18),
            GpuLinks(1, pcie_gen=5, pcie_gen_max=5, pcie_width=8, nvlinks=12),
            GpuLinks(3, pcie_gen_max=None, pcie_width=None)]
    matrix = [["X", "NV12", "SYS"], ["NV12", "X", None], ["SYS", None, "X"]]
    assert compact_links(Topology(gpus, matrix)) == {
        "nvlinks": {"0-1": 12, "0-3": 0, "1-3": None},
        "pcie": {"0": {"gen": 5, "width": 16}, "1": {"gen": 5, "width": 8},
                 "3": {"gen": None, "width": None}}}
    assert [nvlink_count(x) for x in ("NV18", "PIX", "NODE", None)] == [18, 0, 0, None]


def test_links_without_nvml_are_none(monkeypatch):
    no_nvml(monkeypatch)
    assert environment.links(DeviceSet("cuda", (0, 1))) is None


def test_the_preamble_shows_the_links():
    from bandwidth.report.text import links_text

    assert links_text({"nvlinks": {"0-1": 18}, "pcie": {"0": {"gen": 5, "width": 16},
                                                        "1": {"gen": None, "width": 8}}}) == \
        "GPU 0<->1 18 NVLinks; PCIe: GPU 0 gen5 x16, GPU 1 gen? x8"


def test_replicas_sharing_a_gpu_are_named_as_such():
    # --gpus 0,0 is two replicas on one GPU, not two GPUs; each GPU is read once for its links.
    assert DeviceSet("cuda", (0, 0)).describe() == "2 replicas on 1 GPU (0,0)"
    assert DeviceSet("cuda", (0, 0, 1)).describe() == "3 replicas on 2 GPUs (0,0,1)"
    assert DeviceSet("cuda", (0, 1)).describe() == "2 GPUs (0,1)"
    assert DeviceSet("cpu", (0, 1)).describe() == "2 CPU devices (replicas in host memory)"
