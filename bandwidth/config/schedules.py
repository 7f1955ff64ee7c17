"""The schedule flags (``--schedule``, ``--bucket-mb``, ``--first-bucket-mb``, ``--framework``):
parsed, checked, and expanded into the (mode, schedule) pairs of a sweep."""

from __future__ import annotations

import argparse
import math

from bandwidth.config.job import FRAMEWORKS
from bandwidth.errors import ConfigError

MAX_BUCKET_MB = 1e6                       # MiB: 1 TiB, beyond any network


def parse_mib(flag: str, text: str) -> float:
    """A positive, finite number of MiB (``--bucket-mb``, ``--first-bucket-mb``)."""
    try:
        value = float(text)
    except ValueError:
        raise ConfigError(f"{flag} takes numbers of MiB, e.g. 25; got {text!r}") from None
    if not (math.isfinite(value) and 0 < value <= MAX_BUCKET_MB):
        raise ConfigError(f"{flag} must be a positive number of MiB up to {MAX_BUCKET_MB:g}; "
                          f"got {text}")
    return value


def schedule_sweep(args: argparse.Namespace) -> list[tuple[str, float, float]]:
    """(schedule, bucket MiB, first bucket MiB) of every schedule asked for: ddp once per
    --bucket-mb, the others once."""
    from bandwidth.schedules.ddp import DEFAULT_BUCKET_MB, DEFAULT_FIRST_BUCKET_MB
    from bandwidth.schedules.registry import canonical_name as schedule_name
    names = [schedule_name(n) for n in str(args.schedule).split(",") if n]
    if not names:
        raise ConfigError("--schedule needs at least one schedule")
    buckets = ([DEFAULT_BUCKET_MB] if args.bucket_mb is None else
               [parse_mib("--bucket-mb", b) for b in str(args.bucket_mb).split(",")])
    first = (DEFAULT_FIRST_BUCKET_MB if args.first_bucket_mb is None
             else parse_mib("--first-bucket-mb", args.first_bucket_mb))
    if "ddp" not in names and (args.bucket_mb is not None or args.first_bucket_mb is not None):
        raise ConfigError("--bucket-mb and --first-bucket-mb are the ddp schedule's; add "
                          "--schedule ddp")
    return [(name, bucket, first) for name in dict.fromkeys(names)
            for bucket in (buckets if name == "ddp" else [DEFAULT_BUCKET_MB])]


def schedule_pairs(modes: list[str], schedules: list[tuple[str, float, float]]) -> list:
    """Every (mode, schedule) pair a schedule can run; a single pair it cannot is an error."""
    from bandwidth.schedules.registry import SCHEDULES
    pairs = [(m, s) for m in modes for s in schedules if not SCHEDULES[s[0]].unavailable(m)]
    if not pairs:
        raise ConfigError(SCHEDULES[schedules[0][0]].unavailable(modes[0]))
    return pairs


def check_framework(framework: str, schedules: list[str], compute: str, optimizer: str) -> str:
    """``--framework``'s value, checked against the rest of the job: a name of FRAMEWORKS, every
    schedule with a counterpart in PyTorch (``Schedule.framework``), a compute for its module's
    forward and backward, no optimizer (the framework's step has none)."""
    from bandwidth.schedules.registry import SCHEDULES
    if framework not in FRAMEWORKS:
        raise ConfigError(f"unknown --framework {framework!r}; valid: {', '.join(FRAMEWORKS)}")
    if framework == "none":
        return framework
    runs = [name for name, cls in SCHEDULES.items() if cls.framework]
    lacking = [name for name in schedules if not SCHEDULES[name].framework]
    if lacking:
        raise ConfigError(f"--framework {framework} takes the {' and '.join(runs)} schedules' "
                          f"step through PyTorch's own ({', '.join(SCHEDULES[n].framework for n in runs)}); "
                          f"--schedule {lacking[0]} has no counterpart there: use --schedule "
                          f"{','.join(runs)}")
    if compute == "none":
        raise ConfigError(f"--framework {framework} runs the step's compute in its module's "
                          "forward and backward: give --compute flops, --compute-ms FWD,BWD or "
                          "--compute-file")
    if optimizer != "none":
        raise ConfigError(f"--framework {framework} times forward and backward without an "
                          f"optimizer step: drop --optimizer {optimizer}")
    return framework
