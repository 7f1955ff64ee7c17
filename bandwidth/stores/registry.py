"""The kvstore modes: one module each, one table line each.

The names, and which modes are distributed, are known here without importing the stores (and
torch with them): measure.py checks its flags against them before the 2 s that importing torch
costs, so --help, --list-networks and a typo answer at once. ``KVSTORES``, the classes, imports
the stores on first use."""

from __future__ import annotations

from typing import TYPE_CHECKING

from bandwidth.errors import ConfigError

if TYPE_CHECKING:
    from bandwidth.stores.base import KVStore

# Each mode: whether it runs under launch.py with workers and servers (its ``traits.distributed``;
# tests/test_config.py checks the two agree).
DISTRIBUTED: dict[str, bool] = {
    "local": False,
    "device": False,
    "nccl": False,
    "dist_sync": True,
    "dist_async": True,
    "dist_sync_device": True,
    "dist_async_device": True,
    "dist_nccl": True,
}
ALIASES: dict[str, str] = {"dist_device_sync": "dist_sync_device",
                           "dist_device_async": "dist_async_device"}


def canonical_name(name: str) -> str:
    name = ALIASES.get(name, name)
    if name not in DISTRIBUTED:
        raise ConfigError(f"unknown --kv-store {name!r}; valid: {', '.join(DISTRIBUTED)}")
    return name


def _classes() -> dict[str, type[KVStore]]:
    from bandwidth.stores.device import DeviceStore
    from bandwidth.stores.dist import DistAsync, DistAsyncDevice, DistSync, DistSyncDevice
    from bandwidth.stores.local import LocalStore
    from bandwidth.stores.nccl import DistNcclStore, NcclStore

    classes = {"local": LocalStore, "device": DeviceStore, "nccl": NcclStore,
               "dist_sync": DistSync, "dist_async": DistAsync,
               "dist_sync_device": DistSyncDevice, "dist_async_device": DistAsyncDevice,
               "dist_nccl": DistNcclStore}
    assert list(classes) == list(DISTRIBUTED)
    return classes


def __getattr__(name: str):
    # ``from bandwidth.stores.registry import KVSTORES``: the classes, imported on first use.
    if name == "KVSTORES":
        globals()["KVSTORES"] = table = _classes()
        return table
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
