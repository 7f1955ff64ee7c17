"""The kvstore modes: one module each, one table line each."""

from __future__ import annotations

from bandwidth.errors import ConfigError
from bandwidth.kvstores.base import KVStore
from bandwidth.kvstores.device import DeviceStore
from bandwidth.kvstores.local import LocalStore
from bandwidth.kvstores.nccl import NcclStore

KVSTORES: dict[str, type[KVStore]] = {
    "local": LocalStore,
    "device": DeviceStore,
    "nccl": NcclStore,
}
ALIASES: dict[str, str] = {}


def canonical_name(name: str) -> str:
    name = ALIASES.get(name, name)
    if name not in KVSTORES:
        raise ConfigError(f"unknown --kv-store {name!r}; valid: {', '.join(KVSTORES)}")
    return name
