"""``--backend mxnet``: the kvstore modes done by Apache MXNet 1.9.1's own kvstore and ps-lite.

    pip install '.[mxnet]'        # mxnet==1.9.1 and numpy<1.24 (MXNet uses np.bool)
    python bandwidth/measure.py --backend mxnet --kv-store device --cpus 2 --network lenet
    python bandwidth/measure.py --backend toolkit,mxnet --kv-store local,device --cpus 2
    python launch.py -n 2 -s 1 --scheduler python bandwidth/measure.py --backend mxnet \\
        --kv-store dist_sync --cpus 2 --network lenet

This module describes each MXNet kvstore type to the driver (one table line each) and says, in one
line, where MXNet itself would fail: the asynchronous servers without an optimizer (the driver's
``Traits.needs_optimizer`` check), ``nccl`` on CPU contexts or in a build without NCCL, gradient
compression on ``local``/``nccl``, GPU contexts in a build without CUDA. The measurement itself
is ``bandwidth.backends.mxnet_session``. Nothing here imports ``mxnet`` unless GPU contexts have
to be checked; a process whose ``DMLC_ROLE`` is ``server`` or ``scheduler`` must import it only to
serve (MXNet enters ps-lite's server loop inside ``import mxnet``).
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
import sys
import warnings
from dataclasses import dataclass
from typing import ClassVar

from bandwidth.config.options import Config
from bandwidth.errors import ConfigError, UnsupportedError
from bandwidth.stores.base import KVStore
from bandwidth.stores.costs import Costs
from bandwidth.stores.registry import KVSTORES
from bandwidth.stores.traits import Traits

INSTALL = "pip install 'mxnet==1.9.1' 'numpy<1.24'"
NOT_INSTALLED = f"MXNet is not installed: {INSTALL}"
DTYPES = ("float32", "float16")


@dataclass(frozen=True)
class MXNetType:
    """One MXNet kvstore type string, the C++ classes behind it, and what MXNet accepts with it."""

    name: str                       # mx.kv.create(name); also the toolkit's mode of that name
    classes: str
    summary: str
    distributed: bool = False       # KVStoreDist: runs under launch.py with servers and a scheduler
    sync: bool = True               # False: servers apply each push at once (needs an optimizer)
    gpu_only: bool = False          # KVStoreNCCL reduces GPU arrays only
    compression: bool = False       # set_gradient_compression: only types naming 'device' or 'dist'


_PS = "pushed to the ps-lite servers"
TYPES: dict[str, MXNetType] = {t.name: t for t in (
    MXNetType("local", "KVStoreLocal + CommCPU", "copied into pinned host memory, summed there by "
              "MXNet's CPU reduce (the optimizer too), copied back to every device"),
    MXNetType("device", "KVStoreLocal + CommDevice", "each key merged on one device (largest "
              "keys first onto the least-loaded), the optimizer run there, copied to every device",
              compression=True),
    MXNetType("nccl", "KVStoreNCCL", "ncclReduce of every key to the first GPU, then ncclBcast",
              gpu_only=True),
    MXNetType("dist_sync", "KVStoreDist + CommCPU", f"this worker's devices summed on the CPU, "
              f"{_PS}, which sum one push per worker (and apply the optimizer) before answering",
              distributed=True, compression=True),
    MXNetType("dist_sync_device", "KVStoreDist + CommDevice", f"this worker's devices summed on "
              f"one device per key, {_PS}, which sum one push per worker before answering",
              distributed=True, compression=True),
    MXNetType("dist_async", "KVStoreDist + CommCPU", f"this worker's devices summed on the CPU, "
              f"{_PS}, which apply every push at once with the optimizer",
              distributed=True, sync=False, compression=True),
    MXNetType("dist_async_device", "KVStoreDist + CommDevice", f"this worker's devices summed on "
              f"one device per key, {_PS}, which apply every push at once with the optimizer",
              distributed=True, sync=False, compression=True),
)}


class MXNetCosts(Costs):
    """MXNet's: the toolkit's mode of the same name sends the same bytes over the network (a
    worker pushes and pulls each key once); MXNet's merge and copy buffers need about one more
    copy of the arrays on each device."""

    def __init__(self, own: Costs):
        self.own = own
        self.traffic_words = own.traffic_words

    def network_nbytes(self, nbytes, local, total):
        return self.own.network_nbytes(nbytes, local, total)

    def traffic_rule(self, local, total):
        return self.own.traffic_rule(local, total)

    def extra_bytes_per_device(self, nbytes, n, optimizer):
        return nbytes


class MXNetStore(KVStore):
    """Describes one MXNet kvstore type to the driver (bus factor, bound, checks); MXNet itself does
    the exchange in ``mxnet_session.MXNetSession``, so this class is never instantiated."""

    backend: ClassVar[str] = "mxnet"
    mx_type: ClassVar[MXNetType]

    @classmethod
    def unavailable(cls, devices, dtype):
        if dtype not in DTYPES:
            return f"MXNet's kvstore is measured in {' or '.join(DTYPES)} here, not {dtype}"
        if cls.mx_type.gpu_only and not devices.is_cuda:
            return ("MXNet's nccl kvstore reduces GPU arrays only (on CPU contexts MXNet stops "
                    "with 'compile with USE_NCCL=1'); use --kv-store device or local with --cpus")
        if devices.is_cuda:
            return _gpu_reason(devices.ids, cls.mx_type.gpu_only)
        return None


def version() -> str | None:
    """The installed MXNet's version, read without importing it (None: not installed)."""
    try:
        return importlib.metadata.version("mxnet")
    except importlib.metadata.PackageNotFoundError:
        return None


def installed() -> bool:
    if "mxnet" in sys.modules:             # None there: blocked, as if not installed
        return sys.modules["mxnet"] is not None
    return importlib.util.find_spec("mxnet") is not None


def import_mxnet():
    """``import mxnet`` on a worker (or in a single-process run); a failure is one line."""
    import numpy

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import mxnet
    except ImportError as exc:
        raise UnsupportedError(f"{NOT_INSTALLED} ({exc})") from None
    except AttributeError as exc:          # numpy >= 1.24 removed np.bool, which MXNet uses
        raise UnsupportedError(f"MXNet {version()} cannot be imported with numpy "
                               f"{numpy.__version__} ({str(exc).splitlines()[0]}): "
                               f"{INSTALL}") from None
    return mxnet


def store_class(config: Config) -> type[KVStore]:
    """The class that describes ``config.kv_store`` under MXNet, after the checks that need only
    the configuration (the device checks come from ``unavailable``)."""
    mx_type = TYPES.get(config.kv_store)
    if mx_type is None:
        raise ConfigError(f"--kv-store {config.kv_store} is one of the toolkit's own modes; MXNet "
                          f"has no such kvstore. Valid with --backend mxnet: {', '.join(TYPES)}")
    if not installed():
        raise UnsupportedError(NOT_INSTALLED)
    if config.gc_type != "none" and not mx_type.compression:
        raise UnsupportedError(
            f"--gc-type {config.gc_type} with --kv-store {config.kv_store}: MXNet compresses "
            "gradients only for the device and dist_* kvstores (it raises 'Gradient compression "
            "is not supported for this type of kvstore'); use --kv-store device or --gc-type none")
    if config.chunk_mb is not None or config.cpu_threads is not None:
        raise ConfigError("--chunk-mb and --cpu-threads tune the toolkit's own modes; MXNet's "
                          "kvstore reads MXNET_KVSTORE_REDUCTION_NTHREADS, "
                          "MXNET_KVSTORE_BIGARRAY_BOUND... from the environment instead")
    return _store_class(mx_type.name)


@functools.cache
def _store_class(name: str) -> type[MXNetStore]:
    mx_type, own = TYPES[name], KVSTORES[name]
    traits = Traits(
        summary=f"MXNet {version()} kvstore '{name}' ({mx_type.classes}): {mx_type.summary}",
        # The same hardware path bounds MXNet's implementation and the toolkit's.
        bound=own.traits.bound, bound_on_cpu=own.traits.bound_on_cpu,
        bound_kind=own.traits.bound_kind,
        distributed=mx_type.distributed, sync=mx_type.sync, needs_optimizer=not mx_type.sync)
    return type(f"MXNet_{name}", (MXNetStore,), {
        "name": name, "mx_type": mx_type, "traits": traits, "costs": MXNetCosts(own.costs)})


def _gpu_reason(ids: tuple[int, ...], nccl: bool) -> str | None:
    mx = import_mxnet()
    gpus = mx.context.num_gpus()
    if gpus == 0:
        return (f"this MXNet {mx.__version__} build has no CUDA (the PyPI mxnet is CPU-only, and "
                "MXNet's GPU builds stop at CUDA 11.x, which current GPUs and drivers outgrew): "
                "use --cpus N for CPU contexts, or the toolkit's own engine (--backend toolkit) "
                "on GPUs")
    if max(ids) >= gpus:
        return f"MXNet sees {gpus} GPU{'s' if gpus > 1 else ''}, not GPU {max(ids)}"
    if nccl and not mx.runtime.Features().is_enabled("NCCL"):
        return "this MXNet build has no NCCL (compiled without USE_NCCL=1); use --kv-store device"
    return None
