"""What the run ran on: versions, device names, driver, peer access and links, for the preamble,
JSON and the hardware fingerprint of regression checks (bandwidth.results.document.fingerprint)."""

from __future__ import annotations

import os
import platform
import re
import socket
import subprocess

import torch

import bandwidth
from bandwidth.hardware.devices import DeviceSet, peer_matrix

PROC_DRIVER_VERSION = "/proc/driver/nvidia/version"
NVIDIA_SMI_TIMEOUT_S = 10.0
# "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  ..." (or "Open Kernel Module for
# x86_64  580.159.04"): the first whole dotted number after "Kernel Module".
_PROC_VERSION_RE = re.compile(r"Kernel Module.*?\s(\d+\.\d+(?:\.\d+)*)\s")


def describe(devices: DeviceSet) -> dict:
    env = {
        "toolkit": bandwidth.__version__,
        "host": socket.gethostname(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "nccl": None,
        "driver": None,
        "cpu_count": os.cpu_count(),
        "devices": [],
        "peer_access": [],
        "links": None,             # CPU devices, or no NVML: nothing known of the links
    }
    if not devices.is_cuda:
        env["devices"] = [{"label": label, "name": "host memory"} for label in devices.labels()]
        return env
    if torch.distributed.is_available() and torch.distributed.is_nccl_available():
        env["nccl"] = ".".join(str(v) for v in torch.cuda.nccl.version())
    env["driver"] = driver_version()
    for label, i in zip(devices.labels(), devices.ids):
        props = torch.cuda.get_device_properties(i)
        env["devices"].append({"label": label, "name": props.name,
                               "memory_bytes": props.total_memory})
    env["peer_access"] = peer_matrix([devices.torch_device(k) for k in range(devices.n)])
    env["links"] = links(devices)
    return env


def links(devices: DeviceSet) -> dict | None:
    """NVLinks per GPU pair and PCIe generation and width per GPU (topology.compact_links), or
    None without NVML (pip install '.[topology]')."""
    from bandwidth.hardware import rawcopy
    from bandwidth.hardware.topology import compact_links, read_topology

    gpus = list(dict.fromkeys(devices.ids))      # each GPU once, however often it is listed
    topo, _ = read_topology(gpus, [rawcopy.pci_bus_id(g) for g in gpus])
    return None if topo is None else compact_links(topo)


def driver_version(proc_path: str = PROC_DRIVER_VERSION) -> str | None:
    """The NVIDIA driver version: from NVML when pynvml is installed, else from the kernel
    module's ``/proc/driver/nvidia/version``, else from ``nvidia-smi``; None when none answers."""
    return _driver_from_nvml() or _driver_from_proc(proc_path) or _driver_from_smi()


def _driver_from_nvml() -> str | None:
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
        try:
            version = pynvml.nvmlSystemGetDriverVersion()
        finally:
            pynvml.nvmlShutdown()
    except pynvml.NVMLError:
        return None
    return version.decode() if isinstance(version, bytes) else version


def _driver_from_proc(path: str) -> str | None:
    try:
        with open(path) as f:
            match = _PROC_VERSION_RE.search(f.read())
    except OSError:
        return None
    return match.group(1) if match else None


def _driver_from_smi() -> str | None:
    try:
        done = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                              stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=NVIDIA_SMI_TIMEOUT_S, check=False)
    except (OSError, subprocess.SubprocessError):      # not installed, or hung past the timeout
        return None
    if done.returncode != 0 or not done.stdout.strip():
        return None
    return done.stdout.strip().splitlines()[0].strip()     # one line per GPU, all the same
