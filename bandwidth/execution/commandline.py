"""measure.py's command line, whole: config's flags, parsed and range-checked (bandwidth.config),
with the names that registries own checked here, where the job is built, before anything is
planned: --kv-store's modes (the stores' registry), the modes --network-ceiling belongs to (the
distributed ones), the modes --predict covers (the model).

    args = build_parser().parse_args(argv)
    job = job_from_args(args)              # bad values: ConfigError, one line and exit status 2
"""

from __future__ import annotations

import argparse

from bandwidth.config import parser
from bandwidth.config.job import Job
from bandwidth.config.options import parse_job
from bandwidth.errors import ConfigError
from bandwidth.predict.model import MODES as PREDICTED
from bandwidth.stores.registry import DISTRIBUTED, canonical_name


def build_parser() -> argparse.ArgumentParser:
    """config's parser, --kv-store's help naming the registry's modes."""
    return parser.build_parser(tuple(DISTRIBUTED))


def job_from_args(args: argparse.Namespace) -> Job:
    """Validate the parsed flags and freeze them into a Job; bad values raise ConfigError."""
    modes = [canonical_name(m) for m in args.kv_store.split(",") if m]
    local = [m for m in modes if not DISTRIBUTED[m]]
    if args.network_ceiling is not None and local:
        raise ConfigError(f"--network-ceiling is the ceiling of the distributed modes (dist_*),"
                          f" not of --kv-store {','.join(local)}; drop it, or measure a "
                          "dist_* mode under launch.py")
    job = parse_job(args, modes)
    uncovered = [m for m in modes if m not in PREDICTED]
    if job.predict and uncovered:       # parse_job has asked for --link-rate first
        raise ConfigError(f"--predict: the model does not cover --kv-store {uncovered[0]}; "
                          f"it predicts {', '.join(PREDICTED)}")
    return job
