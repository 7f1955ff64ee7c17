"""The schedules: one module each, one table line each (``--schedule``)."""

from __future__ import annotations

from bandwidth.errors import ConfigError
from bandwidth.schedules.backward import Backward
from bandwidth.schedules.base import Schedule
from bandwidth.schedules.ddp import Ddp
from bandwidth.schedules.flat import Flat
from bandwidth.schedules.fsdp import Fsdp

SCHEDULES: dict[str, type[Schedule]] = {
    "flat": Flat,
    "backward": Backward,
    "ddp": Ddp,
    "fsdp": Fsdp,
}


def canonical_name(name: str) -> str:
    if name not in SCHEDULES:
        raise ConfigError(f"unknown --schedule {name!r}; valid: {', '.join(SCHEDULES)}")
    return name
