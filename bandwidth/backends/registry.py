"""The class that describes each kvstore mode under each backend (``store_class``): the toolkit's
own from the stores' registry, MXNet's from bandwidth.backends.mxnet_backend (imported only when
asked for). The backends' names are the configuration's (config.values.BACKENDS)."""

from __future__ import annotations

from bandwidth.config.options import Config
from bandwidth.stores.base import KVStore
from bandwidth.stores.registry import KVSTORES


def store_class(config: Config) -> type[KVStore]:
    """The class that describes ``config.kv_store`` under ``config.backend`` (ConfigError or
    UnsupportedError, one line, where that backend has no such mode or cannot take the config)."""
    if config.backend == "mxnet":
        from bandwidth.backends import mxnet_backend

        return mxnet_backend.store_class(config)
    return KVSTORES[config.kv_store]
