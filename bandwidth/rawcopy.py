"""Asynchronous copies between GPUs without torch's per-copy fences.

torch's cross-device ``copy_`` brackets every copy with two events and two cross-device stream
waits (and creates and destroys those events each time): correct, but tens of microseconds of host
time per copy, which is as long as a 16 MB copy over NVLink takes. The device mode issues many
copies per step and orders them with its own events, so it calls the CUDA runtime's
``cudaMemcpyAsync`` directly, on the runtime library torch itself loaded. Where that library cannot
be found (a static build, CPU devices) ``copy`` falls back to torch's ``copy_``.
"""

from __future__ import annotations

import ctypes
import functools

import torch

_MEMCPY_DEFAULT = 4      # cudaMemcpyDefault: direction inferred from unified addresses


@functools.cache
def _runtime():
    if not torch.cuda.is_available():
        return None
    torch.cuda.init()
    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split()[-1] for line in maps if "libcudart.so" in line}
    except OSError:
        return None
    for path in sorted(paths):
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        lib.cudaMemcpyAsync.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
                                        ctypes.c_int, ctypes.c_void_p]
        lib.cudaMemcpyAsync.restype = ctypes.c_int
        lib.cudaSetDevice.argtypes = [ctypes.c_int]
        lib.cudaSetDevice.restype = ctypes.c_int
        return lib
    return None


def available() -> bool:
    return _runtime() is not None


class Copy:
    """One planned copy of contiguous ``src`` into ``dst`` (same dtype and size) on ``stream`` (a
    stream of the source device): asynchronous and without fences, the caller orders it with
    events. Pointers and sizes are worked out once; calling it issues the copy. It leaves the
    stream's device current: callers restore theirs (see ``keep_device``)."""

    def __init__(self, dst: torch.Tensor, src: torch.Tensor, stream):
        self.dst, self.src, self.stream = dst, src, stream
        self.lib = _runtime() if stream is not None else None
        if self.lib is not None:
            self.args = (dst.data_ptr(), src.data_ptr(), src.numel() * src.element_size(),
                         _MEMCPY_DEFAULT, stream.cuda_stream)
            self.device = stream.device.index

    def __call__(self) -> None:
        if self.lib is None:
            with torch.cuda.stream(self.stream) if self.stream is not None else _nothing():
                self.dst.copy_(self.src, non_blocking=True)
            return
        code = self.lib.cudaSetDevice(self.device)
        if code == 0:
            code = self.lib.cudaMemcpyAsync(*self.args)
        if code != 0:
            raise RuntimeError(f"cudaMemcpyAsync from {self.src.device} to {self.dst.device} "
                               f"failed: CUDA error {code}")


class keep_device:
    """Make the current CUDA device ``device`` again on exit (a ``Copy`` switches it)."""

    def __init__(self, device: int | None):
        self.device = device

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.device is not None:
            torch.cuda.set_device(self.device)
        return False


class _nothing:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False
