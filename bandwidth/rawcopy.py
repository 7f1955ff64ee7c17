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


def copy(dst: torch.Tensor, src: torch.Tensor, stream) -> None:
    """Copy contiguous ``src`` into ``dst`` (same dtype and size) on ``stream`` (a stream of the
    source device), asynchronously and without fences: the caller orders it with events. It leaves
    the stream's device current; callers restore theirs (see ``keep_device``)."""
    lib = _runtime() if stream is not None else None
    if lib is None:
        with torch.cuda.stream(stream) if stream is not None else _nothing():
            dst.copy_(src, non_blocking=True)
        return
    code = lib.cudaSetDevice(stream.device.index)
    if code == 0:
        code = lib.cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), src.numel() * src.element_size(),
                                   _MEMCPY_DEFAULT, stream.cuda_stream)
    if code != 0:
        raise RuntimeError(f"cudaMemcpyAsync from {src.device} to {dst.device} failed: CUDA error "
                           f"{code}")


class keep_device:
    """Restore the current CUDA device on exit (``copy`` switches it)."""

    def __enter__(self):
        self.device = torch.cuda.current_device() if torch.cuda.is_initialized() else None

    def __exit__(self, *exc):
        if self.device is not None:
            torch.cuda.set_device(self.device)
        return False


class _nothing:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False
