"""What the run ran on: versions, device names, driver and peer access, for the preamble and JSON."""

from __future__ import annotations

import os
import platform
import socket

import torch

import bandwidth
from bandwidth.devices import DeviceSet, peer_matrix


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
    }
    if not devices.is_cuda:
        env["devices"] = [{"label": label, "name": "host memory"} for label in devices.labels()]
        return env
    if torch.distributed.is_available() and torch.distributed.is_nccl_available():
        env["nccl"] = ".".join(str(v) for v in torch.cuda.nccl.version())
    env["driver"] = _driver_version()
    for label, i in zip(devices.labels(), devices.ids):
        props = torch.cuda.get_device_properties(i)
        env["devices"].append({"label": label, "name": props.name,
                               "memory_bytes": props.total_memory})
    env["peer_access"] = peer_matrix([devices.torch_device(k) for k in range(devices.n)])
    return env


def _driver_version() -> str | None:
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
