"""The kvstore modes: one module each, one table line each."""

from __future__ import annotations

from bandwidth.errors import ConfigError
from bandwidth.stores.base import KVStore
from bandwidth.stores.device import DeviceStore
from bandwidth.stores.dist import DistAsync, DistAsyncDevice, DistSync, DistSyncDevice
from bandwidth.stores.local import LocalStore
from bandwidth.stores.nccl import DistNcclStore, NcclStore

KVSTORES: dict[str, type[KVStore]] = {
    "local": LocalStore,
    "device": DeviceStore,
    "nccl": NcclStore,
    "dist_sync": DistSync,
    "dist_async": DistAsync,
    "dist_sync_device": DistSyncDevice,
    "dist_async_device": DistAsyncDevice,
    "dist_nccl": DistNcclStore,
}
ALIASES: dict[str, str] = {"dist_device_sync": "dist_sync_device",
                           "dist_device_async": "dist_async_device"}


def canonical_name(name: str) -> str:
    name = ALIASES.get(name, name)
    if name not in KVSTORES:
        raise ConfigError(f"unknown --kv-store {name!r}; valid: {', '.join(KVSTORES)}")
    return name
