"""What exchanges the arrays: the toolkit's own kvstore modes, or another framework's real kvstore
driven through the same protocol, output and error check (``--backend``).

    python bandwidth/measure.py --backend mxnet --kv-store device --cpus 2 --network lenet
    python bandwidth/measure.py --backend toolkit,mxnet --kv-store local,device --cpus 2

A backend supplies, per kvstore mode, a ``KVStore`` class that describes the mode to the driver
(summary, bound, bus factor, why it cannot run here). The MXNet backend is imported only when it
is asked for, and it imports ``mxnet`` itself only when it measures.
"""

from __future__ import annotations

from bandwidth.config.options import Config
from bandwidth.errors import ConfigError
from bandwidth.stores.registry import KVSTORES, KVStore

BACKENDS: dict[str, str] = {
    "toolkit": "this toolkit's kvstore modes on PyTorch (bandwidth.stores)",
    "mxnet": "Apache MXNet 1.9.1's own kvstore and ps-lite (bandwidth.backends.mxnet_backend)",
}


def canonical_backend(name: str) -> str:
    name = name.strip().lower()
    if name not in BACKENDS:
        raise ConfigError(f"unknown --backend {name!r}; valid: {', '.join(BACKENDS)}")
    return name


def store_class(config: Config) -> type[KVStore]:
    """The class that describes ``config.kv_store`` under ``config.backend`` (ConfigError or
    UnsupportedError, one line, where that backend has no such mode or cannot take the config)."""
    if config.backend == "mxnet":
        from bandwidth.backends import mxnet_backend

        return mxnet_backend.store_class(config)
    return KVSTORES[config.kv_store]
