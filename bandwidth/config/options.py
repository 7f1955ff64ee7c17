"""The command line, parsed once into a frozen Config. Code below this never touches argparse.

``parse_job`` checks the parsed flags together and freezes them into a ``Job`` of ``Config``s
(``job``); the flags are ``parser.build_parser``'s, the single values' parsers are in ``values``.
``Config`` and ``Job`` are importable from here too: this is config's front door. The names that
a registry owns (--kv-store's modes, what --predict covers) are checked where the job is built
(bandwidth.execution.commandline), which hands ``parse_job`` the modes by their canonical names.

Flag names follow MXNet's tools/bandwidth/measure.py (``--kv-store``, ``--gpus``, ``--num-batches``,
...) so that its users' commands keep working.
"""

from __future__ import annotations

import argparse
import math

from bandwidth.cliparse import check_output_path
from bandwidth.config.compute_flags import compute_fields
from bandwidth.config.job import (AUTO_REPEATS, DTYPES, GC_TYPES, LAUNCHES, OPTIMIZERS,
                                  OWNER_RULES, Config, Job, refuse_server_takes)
from bandwidth.config.values import (MAX_CHUNK_MB, canonical_backend,
                                     check_timeout, parse_baseline_processes, parse_confirm,
                                     parse_gpus, parse_graph_steps, parse_image_shape,
                                     parse_size, size_sweep)
from bandwidth.errors import ConfigError
from bandwidth.links.hostmatrix import load_matrix
from bandwidth.links.linkbound import parse_rate
from bandwidth.thresholds import parse_min_gbps, parse_min_percent, parse_repeat, parse_tolerance

__all__ = ["Config", "Job", "parse_job"]     # the front door of config/


def _check_scalars(args: argparse.Namespace) -> None:
    if args.num_batches < 1:
        raise ConfigError(f"--num-batches must be at least 1; got {args.num_batches}")
    if args.warmup < 0:
        raise ConfigError(f"--warmup must be 0 or more; got {args.warmup}")
    if args.disp_batches < 1:
        raise ConfigError(f"--disp-batches must be at least 1; got {args.disp_batches}")
    if args.disp_batches > args.num_batches:
        raise ConfigError(f"--disp-batches {args.disp_batches} exceeds --num-batches "
                          f"{args.num_batches}, so nothing would be reported")
    if args.num_classes < 1:
        raise ConfigError(f"--num-classes must be positive; got {args.num_classes}")
    if args.dtype not in DTYPES:
        raise ConfigError(f"unknown --dtype {args.dtype!r}; valid: {', '.join(DTYPES)}")
    if args.gc_type.lower() not in GC_TYPES:
        raise ConfigError(f"unknown --gc-type {args.gc_type!r}; valid: {', '.join(GC_TYPES)}")
    if args.gpus is not None and args.cpus is not None:
        raise ConfigError("give either --gpus or --cpus, not both")
    if args.max_in_flight is not None and args.max_in_flight < 1:
        raise ConfigError(f"--max-in-flight must be 1 or more; got {args.max_in_flight}")
    if args.server_admit is not None and args.server_admit < 1:
        raise ConfigError(f"--server-admit must be 1 or more; got {args.server_admit}")
    if args.num_servers is not None and args.num_servers < 0:
        raise ConfigError(f"--num-servers must be 0 or more; got {args.num_servers}")
    if args.cpus is not None and args.cpus < 1:
        raise ConfigError(f"--cpus must be at least 1; got {args.cpus}")
    if args.chunk_mb is not None and not (math.isfinite(args.chunk_mb) and 0 < args.chunk_mb
                                          <= MAX_CHUNK_MB):
        raise ConfigError(f"--chunk-mb must be a positive number of MB up to {MAX_CHUNK_MB:g}; "
                          f"got {args.chunk_mb:g}")
    if args.launch is not None and args.launch not in LAUNCHES:
        raise ConfigError(f"unknown --launch {args.launch!r}; valid: {', '.join(LAUNCHES)}")
    graph_steps = parse_graph_steps(args.graph_steps)
    if graph_steps is not None and args.launch == "eager":
        raise ConfigError("--graph-steps counts replays of a CUDA graph; --launch eager has none")
    if graph_steps is not None and args.cpus is not None:
        raise ConfigError("--graph-steps needs GPUs (CUDA graphs); CPU devices run eager")
    if args.owners not in OWNER_RULES:
        raise ConfigError(f"unknown --owners {args.owners!r}; valid: {', '.join(OWNER_RULES)}")
    if args.launch in ("graph", "auto") and args.cpus is not None:
        raise ConfigError(f"--launch {args.launch} needs GPUs (CUDA graphs); CPU devices run eager")
    if args.cpu_threads is not None and args.cpu_threads < 1:
        raise ConfigError(f"--cpu-threads must be at least 1; got {args.cpu_threads}")
    check_timeout(args.timeout)
    if not -(1 << 63) <= args.seed < (1 << 64):
        raise ConfigError(f"--seed must fit in 64 bits; got {str(args.seed)[:30]}")
    if not (math.isfinite(args.ci_width) and 0 < args.ci_width < 100):
        raise ConfigError(f"--ci-width must be a percentage above 0 and below 100; got "
                          f"{args.ci_width:g}")
    if not (math.isfinite(args.confirm_interval) and 0 <= args.confirm_interval <= 3600):
        raise ConfigError(f"--confirm-interval must be a number of seconds from 0 to 3600; got "
                          f"{args.confirm_interval:g}")
    if not (math.isfinite(args.time_budget) and 0 < args.time_budget < 1e7):
        raise ConfigError(f"--time-budget must be a positive number of seconds; got "
                          f"{args.time_budget:g}")


def _device_sets(args: argparse.Namespace) -> list[tuple[tuple[int, ...] | None, int | None]]:
    """(gpus, cpus) per configuration: the --gpus sets, or 1..N with --scaling."""
    if args.cpus is not None:
        counts = range(1, args.cpus + 1) if args.scaling else [args.cpus]
        return [(None, c) for c in counts]
    if args.gpus is None and args.scaling:
        # --scaling over the default devices: every visible GPU, or the default CPU devices.
        from bandwidth.hardware.devices import DEFAULT_CPUS, visible_gpus
        visible = visible_gpus()
        if visible:
            return [(tuple(range(k)), None) for k in range(1, visible + 1)]
        return [(None, c) for c in range(1, DEFAULT_CPUS + 1)]
    if args.gpus is None:
        return [(None, None)]          # resolved later: every visible GPU, or 2 CPU devices
    sets = [parse_gpus(text) for text in args.gpus]
    if args.scaling:
        if len(sets) != 1:
            raise ConfigError("--scaling takes one --gpus list (or none: every visible GPU)")
        return [(sets[0][:k], None) for k in range(1, len(sets[0]) + 1)]
    return [(gpus, None) for gpus in sets]


def _networks(args: argparse.Namespace, dtype_bytes: int) -> list[str]:
    names = [n for n in args.network.split(",") if n]
    if not names:
        raise ConfigError("--network needs at least one name")
    out = []
    for name in names:
        if name == "flat":
            sizes = size_sweep(parse_size(args.minbytes), parse_size(args.maxbytes),
                               args.stepfactor)
            # sizes below one element round to the same buffer: measure each buffer once
            out += dict.fromkeys(f"flat:{max(1, size // dtype_bytes)}" for size in sizes)
        else:
            out.append(name)
    return out


def _backends(args: argparse.Namespace) -> list[str]:
    names = list(dict.fromkeys(canonical_backend(b) for b in args.backend.split(",") if b))
    if not names:
        raise ConfigError("--backend needs at least one name")
    if args.gc_type.lower() != "none" and "toolkit" in names:
        raise ConfigError(f"--gc-type {args.gc_type!r}: gradient compression is not implemented "
                          "in the toolkit's modes; use --gc-type none, or --backend mxnet for "
                          "MXNet's own")
    return names


def parse_job(args: argparse.Namespace, modes: list[str]) -> Job:
    """Validate the parsed flags and freeze them into a Job; bad values raise ConfigError.
    ``modes``: --kv-store's, by the names the stores' registry gives them (the caller's check)."""
    from bandwidth.arrays.dtypes import DTYPE_BYTES
    from bandwidth.config.schedules import check_framework, schedule_pairs, schedule_sweep

    _check_scalars(args)
    for flag, path in (("--json", args.json_path), ("--csv", args.csv_path),
                       ("--plot", args.plot_path), ("--save-baseline", args.save_baseline)):
        check_output_path(flag, path)
    optimizer = "none" if args.optimizer in (None, "None", "none") else args.optimizer.lower()
    if optimizer not in OPTIMIZERS:
        raise ConfigError(f"unknown --optimizer {args.optimizer!r}; valid: {', '.join(OPTIMIZERS)}")
    if not modes:
        raise ConfigError("--kv-store needs at least one mode")
    backends = _backends(args)
    unsynced = [m for m in modes if m.startswith("dist_async")]
    refuse_server_takes(args.server_takes, (unsynced or modes)[0], args.max_in_flight)
    matrix = None if args.network_ceiling is None else load_matrix(args.network_ceiling)
    auto = str(args.repeat).strip().lower() == "auto"
    repeat = AUTO_REPEATS if auto else parse_repeat(args.repeat)
    link_rate_bits = None if args.link_rate is None else parse_rate(args.link_rate, "--link-rate")
    if args.predict and link_rate_bits is None:
        raise ConfigError("--predict needs --link-rate RATE (every host's link, each way)")
    image_shape = parse_image_shape(args.image_shape)
    compute = compute_fields(args)
    schedules = schedule_sweep(args)
    framework = check_framework(args.framework, [name for name, _, _ in schedules],
                                compute["compute"], optimizer)
    common = dict(num_layers=args.num_layers, image_shape=image_shape,
                  num_classes=args.num_classes, num_batches=args.num_batches, warmup=args.warmup,
                  disp_batches=args.disp_batches, test_results=bool(args.test_results),
                  optimizer=optimizer, dtype=args.dtype, reference=args.reference,
                  chunk_mb=args.chunk_mb, cpu_threads=args.cpu_threads, timeout_s=args.timeout,
                  seed=args.seed, gc_type=args.gc_type.lower(), launch=args.launch,
                  owners=args.owners, graph_steps=parse_graph_steps(args.graph_steps),
                  max_in_flight=args.max_in_flight, server_order=args.server_order,
                  server_admit=args.server_admit, server_keys=args.server_keys,
                  server_takes=args.server_takes, framework=framework,
                  probe=args.probe, **compute)
    # The backend varies fastest, so that the rows of a comparison sit side by side.
    configs = tuple(Config(network=network, kv_store=mode, gpus=gpus, cpus=cpus, backend=backend,
                           schedule=schedule, bucket_mb=bucket_mb, first_bucket_mb=first,
                           **common)
                    for mode, (schedule, bucket_mb, first) in schedule_pairs(modes, schedules)
                    for network in _networks(args, DTYPE_BYTES[args.dtype])
                    for gpus, cpus in _device_sets(args)
                    for backend in backends)
    return Job(configs=configs, json_path=args.json_path, csv_path=args.csv_path,
               plot_path=args.plot_path, dry_run=args.dry_run, ceiling=args.ceiling,
               save_baseline=args.save_baseline, baseline=args.baseline,
               tolerance_pct=parse_tolerance(args.tolerance), repeat=repeat,
               min_gbps=None if args.min_gbps is None else parse_min_gbps(args.min_gbps),
               force=args.force, baseline_row=args.baseline_row, speedup=args.speedup,
               network_ceiling=matrix, repeat_auto=auto, ci_width_pct=args.ci_width,
               time_budget_s=args.time_budget, allow_missing=args.allow_missing,
               confirm=parse_confirm(args.confirm), confirm_interval_s=args.confirm_interval,
               baseline_processes=parse_baseline_processes(args.baseline_processes, auto,
                                                           args.save_baseline is not None),
               min_pct_of_ceiling=None if args.min_percent_of_ceiling is None
               else parse_min_percent(args.min_percent_of_ceiling),
               junit_path=args.junit_path, summary_md=args.summary_md,
               link_rate_bits=link_rate_bits, num_servers=args.num_servers,
               predict=args.predict, all_worker_lines=args.all_worker_lines)

