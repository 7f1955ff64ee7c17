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

    def __init__(self, dst: torch.Tensor, src: torch.Tensor, stream, via_torch: bool = False,
                 kernel: bool = False):
        """``via_torch``: issue it as torch's ``copy_`` on ``stream`` instead; ``kernel``: as an
        elementwise kernel on ``stream`` (``kernel_copy``: a copy inside one GPU captured in a
        CUDA graph, see DeviceStore.capture)."""
        self.dst, self.src, self.stream = dst, src, stream
        self.kernel = kernel and stream is not None
        self.lib = (_runtime() if stream is not None and not via_torch and not self.kernel
                    else None)
        if self.lib is not None:
            self.args = (dst.data_ptr(), src.data_ptr(), src.numel() * src.element_size(),
                         _MEMCPY_DEFAULT, stream.cuda_stream)
            self.device = stream.device.index

    def __call__(self) -> None:
        if self.kernel:
            with torch.cuda.stream(self.stream):
                kernel_copy(self.dst, self.src)
            return
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


_BITS = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def kernel_copy(dst: torch.Tensor, src: torch.Tensor) -> None:
    """``dst = src`` bit for bit, as an elementwise kernel on the current stream (``src | 0`` on
    integer views of the same width) rather than a memcpy: inside a CUDA graph a copy within one
    GPU's memory (torch's ``copy_``, ``cudaMemcpyAsync``) becomes a memcpy node, which an H100 ran
    11 % slower than the same copy issued on a stream, and this kernel replayed from a graph ran
    faster than either (docs/ceiling.md)."""
    bits = _BITS[src.element_size()]
    torch.bitwise_or(src.view(bits), 0, out=dst.view(bits))


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


# Peer copies for the ceiling measurement (bandwidth.ceiling). p2pBandwidthLatencyTest copies with
# cudaMemcpyPeerAsync; with peer access disabled the driver stages such a copy through host memory.

_PEER_ACCESS_ALREADY_ENABLED = 704   # cudaErrorPeerAccessAlreadyEnabled
_PEER_ACCESS_NOT_ENABLED = 705       # cudaErrorPeerAccessNotEnabled


@functools.cache
def _peer_runtime():
    """The runtime library with the peer-copy entry points declared (None where there is none)."""
    lib = _runtime()
    if lib is None:
        return None
    lib.cudaMemcpyPeerAsync.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p,
                                        ctypes.c_int, ctypes.c_size_t, ctypes.c_void_p]
    lib.cudaMemcpyPeerAsync.restype = ctypes.c_int
    lib.cudaDeviceEnablePeerAccess.argtypes = [ctypes.c_int, ctypes.c_uint]
    lib.cudaDeviceEnablePeerAccess.restype = ctypes.c_int
    lib.cudaDeviceDisablePeerAccess.argtypes = [ctypes.c_int]
    lib.cudaDeviceDisablePeerAccess.restype = ctypes.c_int
    lib.cudaGetLastError.argtypes = []
    lib.cudaGetLastError.restype = ctypes.c_int
    lib.cudaGetErrorString.argtypes = [ctypes.c_int]
    lib.cudaGetErrorString.restype = ctypes.c_char_p
    lib.cudaDeviceGetPCIBusId.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_int]
    lib.cudaDeviceGetPCIBusId.restype = ctypes.c_int
    return lib


def _error_text(lib, code: int) -> str:
    name = lib.cudaGetErrorString(code)
    return f"CUDA error {code} ({name.decode() if name else 'unknown'})"


class PeerCopy:
    """``cudaMemcpyPeerAsync`` of ``nbytes`` (default: all of ``src``) from ``src`` to ``dst`` on
    ``stream`` (a torch stream, usually of the source device), without torch's fences. Whether
    it goes over the peer link or through host memory depends on whether this process enabled
    peer access. Needs the runtime library (``available()``). Leaves the stream's device current.

        copy = PeerCopy(b1, a0, torch.cuda.Stream(device=0)); copy(); torch.cuda.synchronize(0)
    """

    def __init__(self, dst: torch.Tensor, src: torch.Tensor, stream, nbytes: int | None = None):
        self.lib = _peer_runtime()
        if self.lib is None:
            raise RuntimeError("the CUDA runtime library torch loaded was not found")
        nbytes = src.numel() * src.element_size() if nbytes is None else nbytes
        if nbytes > min(src.numel() * src.element_size(), dst.numel() * dst.element_size()):
            raise ValueError(f"a peer copy of {nbytes} bytes does not fit its buffers")
        self.args = (dst.data_ptr(), dst.device.index, src.data_ptr(), src.device.index, nbytes,
                     stream.cuda_stream)
        self.device = stream.device.index
        self.what = f"{src.device} to {dst.device}"

    def __call__(self) -> None:
        code = self.lib.cudaSetDevice(self.device)
        if code == 0:
            code = self.lib.cudaMemcpyPeerAsync(*self.args)
        if code != 0:
            self.lib.cudaGetLastError()          # clear it, so torch does not trip over it later
            raise RuntimeError(f"cudaMemcpyPeerAsync from {self.what} failed: "
                               f"{_error_text(self.lib, code)}")


def disable_peer_access(device: int, peer: int) -> bool:
    """Make sure ``device`` cannot access ``peer`` directly in this process (what
    p2pBandwidthLatencyTest's P2P=Disabled runs rely on). Returns True if it had been enabled.
    torch enables peer access on its first cross-device copy and never disables it, so call
    this only in a process that makes no torch cross-device copy afterwards."""
    lib, code = _on_device(device, lambda lib: lib.cudaDeviceDisablePeerAccess(peer))
    if code in (0, _PEER_ACCESS_NOT_ENABLED):    # 705 (not enabled) is the expected answer
        return code == 0
    raise RuntimeError(f"cudaDeviceDisablePeerAccess({peer}) on GPU {device} failed: "
                       f"{_error_text(lib, code)}")


def enable_peer_access(device: int, peer: int) -> None:
    """Let ``device`` access ``peer`` directly (as torch's first cross-device copy would); an
    already enabled pair is fine. Raises RuntimeError where the pair has no peer access."""
    lib, code = _on_device(device, lambda lib: lib.cudaDeviceEnablePeerAccess(peer, 0))
    if code not in (0, _PEER_ACCESS_ALREADY_ENABLED):
        raise RuntimeError(f"cudaDeviceEnablePeerAccess({peer}) on GPU {device} failed: "
                           f"{_error_text(lib, code)}")


def _on_device(device: int, call) -> tuple:
    """(the runtime library, the status of ``call(lib)`` made with ``device`` current), the
    caller's device current again and the runtime's last error cleared (so that torch does not
    trip over an expected one)."""
    lib = _peer_runtime()
    if lib is None:
        raise RuntimeError("the CUDA runtime library torch loaded was not found")
    with keep_device(torch.cuda.current_device()):
        code = lib.cudaSetDevice(device)
        if code == 0:
            code = call(lib)
        lib.cudaGetLastError()
    return lib, code


def pci_bus_id(device: int) -> str | None:
    """The PCI bus id of a CUDA device as the runtime reports it (``0000:00:06.0``), or None."""
    lib = _peer_runtime()
    if lib is None:
        return None
    buf = ctypes.create_string_buffer(32)
    code = lib.cudaDeviceGetPCIBusId(buf, len(buf), device)
    if code != 0:
        lib.cudaGetLastError()
        return None
    return buf.value.decode()
