"""Which devices take part, and the few device operations the modes share.

A run uses either GPUs (``--gpus``) or N "CPU devices" (``--cpus``): replicas in host memory, so
that
every mode runs on a machine without a GPU. On CPU devices there are no streams or events: every
operation is synchronous, and the helpers below turn into no-ops.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass

import torch

from bandwidth.errors import ConfigError

DEFAULT_CPUS = 2


@dataclass(frozen=True)
class DeviceSet:
    kind: str                 # "cuda" or "cpu"
    ids: tuple[int, ...]      # GPU ids, or 0..N-1 for CPU devices

    @property
    def n(self) -> int:
        return len(self.ids)

    @property
    def is_cuda(self) -> bool:
        return self.kind == "cuda"

    @property
    def shares_gpu(self) -> bool:
        """Some GPU holds more than one replica (``--gpus 0,0``)."""
        return self.is_cuda and len(set(self.ids)) < len(self.ids)

    def torch_device(self, index: int) -> torch.device:
        """The torch device of the index-th participant (CPU devices all live in host memory)."""
        return torch.device("cuda", self.ids[index]) if self.is_cuda else torch.device("cpu")

    def labels(self) -> list[str]:
        return [f"{self.kind}:{i}" for i in self.ids]

    def describe(self) -> str:
        if self.is_cuda:
            listed = ",".join(map(str, self.ids))
            if self.shares_gpu:         # a GPU listed twice (--gpus 0,0)
                gpus = len(set(self.ids))
                return f"{self.n} replicas on {gpus} GPU{'s' if gpus > 1 else ''} ({listed})"
            return f"{self.n} GPU{'s' if self.n > 1 else ''} ({listed})"
        return f"{self.n} CPU device{'s' if self.n > 1 else ''} (replicas in host memory)"


def visible_gpus() -> int:
    """How many GPUs this process sees (0 without CUDA)."""
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def resolve(gpus: tuple[int, ...] | None, cpus: int | None) -> DeviceSet:
    """Explicit --cpus, explicit --gpus (checked to exist), else every visible GPU, else 2 CPUs."""
    if cpus is not None:
        return DeviceSet("cpu", tuple(range(cpus)))
    visible = visible_gpus()
    if gpus is None:
        return DeviceSet("cuda", tuple(range(visible))) if visible else DeviceSet(
            "cpu", tuple(range(DEFAULT_CPUS)))
    missing = [g for g in gpus if g >= visible]
    if missing:
        have = f"GPUs 0..{visible - 1}" if visible else "no GPU"
        raise ConfigError(f"--gpus {','.join(map(str, gpus))}: GPU {missing[0]} does not exist; this "
                          f"machine has {have} visible (use --cpus N to run on CPU devices)")
    return DeviceSet("cuda", gpus)


def synchronize(devices: DeviceSet) -> None:
    if devices.is_cuda:
        for i in devices.ids:
            torch.cuda.synchronize(i)


def peer_matrix(devices: list[torch.device]) -> list[list[bool]]:
    """access[i][j]: device i can read and write device j directly (P2P); [] on CPU devices."""
    if not devices or devices[0].type != "cuda":
        return []
    return [[a == b or torch.cuda.can_device_access_peer(a, b) for b in devices] for a in devices]


def peer_warning(peers: list[list[bool]], ids: list[int]) -> str | None:
    """The warning for GPU pairs without direct access (None: every pair has it, or no GPUs).

    ``peers[i][j]``: device ``ids[i]`` can access device ``ids[j]`` directly. Pairs are named by
    GPU id: ``0<->2`` neither way, ``0->2`` only 0 cannot access 2.
    """
    n = len(peers)
    pairs = n * (n - 1)
    enabled = sum(peers[i][j] for i in range(n) for j in range(n) if i != j)
    if enabled == pairs:
        return None
    lacking = []
    for i in range(n):
        for j in range(i + 1, n):
            if not peers[i][j] and not peers[j][i]:
                lacking.append(f"{ids[i]}<->{ids[j]}")
            elif not peers[i][j]:
                lacking.append(f"{ids[i]}->{ids[j]}")
            elif not peers[j][i]:
                lacking.append(f"{ids[j]}->{ids[i]}")
    return (f"only {enabled} out of {pairs} GPU pairs have direct (peer-to-peer) access; the "
            f"others are staged through host memory (a->b: GPU a cannot access GPU b): "
            f"{', '.join(lacking)}")


def free_bytes(devices: DeviceSet) -> list[int]:
    """Free memory of each participant; CPU devices share the host's available memory."""
    if devices.is_cuda:
        return [torch.cuda.mem_get_info(i)[0] for i in devices.ids]
    return [host_available_bytes()] * devices.n


def host_available_bytes() -> int:
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


# Streams and events: real on GPUs, absent (None) on CPU devices.

def new_stream(device: torch.device):
    return torch.cuda.Stream(device=device) if device.type == "cuda" else None


def new_event(device: torch.device):
    return torch.cuda.Event() if device.type == "cuda" else None


def on_streams(*streams) -> contextlib.ExitStack:
    """Make each given stream current on its own device (a cross-GPU copy_ runs on the source
    device's current stream and orders itself after the destination device's current stream)."""
    stack = contextlib.ExitStack()
    for stream in streams:
        if stream is not None:
            stack.enter_context(torch.cuda.stream(stream))
    return stack


def current_stream(device: torch.device):
    """The stream torch runs this device's operations on now (None on CPU devices)."""
    return torch.cuda.current_stream(device) if device.type == "cuda" else None


def record(event, stream) -> None:
    if event is not None:
        event.record(stream)


def wait(stream, event) -> None:
    if stream is not None and event is not None:
        stream.wait_event(event)


def host_wait(event) -> None:
    if event is not None:
        event.synchronize()


def empty(numel: int, dtype: torch.dtype, device: torch.device, pinned: bool = False) -> torch.Tensor:
    return torch.empty(numel, dtype=dtype, device=device, pin_memory=pinned)
