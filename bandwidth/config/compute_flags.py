"""The compute a step overlaps with: the values of ``--compute``, ``--batch-size``,
``--seq-len``, ``--compute-ms`` and ``--compute-file`` (the flags are parser.py's table's, topic
compute), turned into Config fields (bandwidth.compute runs it)."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from bandwidth.errors import ConfigError

COMPUTES = ("none", "flops")     # the --compute names; "ms" and "file" come from their own flags
MAX_BATCH_SIZE = 1 << 20
MAX_STEP_MS = 3600 * 1000.0      # an hour per layer and pass: beyond any real step
MAX_LAYERS = 100_000


def parse_compute_ms(text: str, flag: str = "--compute-ms",
                     what: str = "the forward and backward milliseconds of a step"
                     ) -> tuple[float, float]:
    """``--compute-ms FWD,BWD`` (or ``--host-ms``): two finite milliseconds, not negative, not
    both 0."""
    parts = str(text).split(",")
    try:
        values = tuple(float(p) for p in parts)
    except ValueError:
        values = ()
    if (len(values) != 2 or not all(math.isfinite(v) and 0 <= v <= MAX_STEP_MS for v in values)
            or sum(values) == 0):
        raise ConfigError(f"{flag} must be {what}, two numbers from 0 to {MAX_STEP_MS:g} (not "
                          f"both 0) such as 30,60; got {str(text)[:40]!r}")
    return values  # type: ignore[return-value]


def load_compute_file(path: str) -> tuple[tuple[str, float, float], ...]:
    """``--compute-file``: (layer, forward ms, backward ms) in the file's order."""
    try:
        data = json.loads(Path(path).read_text())
    except OSError as exc:
        raise ConfigError(f"--compute-file {path}: cannot read it: {exc.strerror}") from None
    except (ValueError, RecursionError) as exc:
        raise ConfigError(f"--compute-file {path}: not valid JSON ({str(exc)[:80]})") from None
    entries = data.get("layers") if isinstance(data, dict) else None
    if not isinstance(entries, list) or not entries or len(entries) > MAX_LAYERS:
        raise ConfigError(f"--compute-file {path}: expected {{\"layers\": [{{\"name\": ..., "
                          "\"forward_ms\": ..., \"backward_ms\": ...}, ...]} with at least one "
                          "layer")
    layers = []
    for index, entry in enumerate(entries):
        name = entry.get("name") if isinstance(entry, dict) else None
        times = [entry.get(k) if isinstance(entry, dict) else None
                 for k in ("forward_ms", "backward_ms")]
        if not isinstance(name, str) or not name.isprintable() or not all(
                isinstance(t, (int, float)) and not isinstance(t, bool) and math.isfinite(t)
                and 0 <= t <= MAX_STEP_MS for t in times):
            shown = repr(entry)[:80]
            raise ConfigError(f"--compute-file {path}: layer {index} needs a name and forward_ms, "
                              f"backward_ms from 0 to {MAX_STEP_MS:g} (no negative or NaN "
                              f"time); got {shown}")
        layers.append((name, float(times[0]), float(times[1])))
    names = [name for name, _, _ in layers]
    if len(set(names)) != len(names):
        twice = next(n for n in names if names.count(n) > 1)
        raise ConfigError(f"--compute-file {path}: layer {twice!r} is listed twice")
    return tuple(layers)


def compute_fields(args: argparse.Namespace) -> dict:
    """The Config fields of the compute flags, checked (bad values raise ConfigError)."""
    given = [flag for flag, value in (("--compute flops", args.compute != "none"),
                                      ("--compute-ms", args.compute_ms is not None),
                                      ("--compute-file", args.compute_file is not None)) if value]
    if args.compute not in COMPUTES:
        raise ConfigError(f"unknown --compute {args.compute!r}; valid: {', '.join(COMPUTES)} "
                          "(or give --compute-ms / --compute-file)")
    if len(given) > 1:
        raise ConfigError(f"give one of {' and '.join(given)}: each says what a step computes")
    if given and "mxnet" in str(args.backend).lower():
        raise ConfigError(f"{given[0]} runs in the toolkit's step (its schedules' compute slots); "
                          "MXNet's kvstore has none: use --backend toolkit")
    if not 1 <= args.batch_size <= MAX_BATCH_SIZE:
        raise ConfigError(f"--batch-size must be a whole number from 1 to {MAX_BATCH_SIZE}; got "
                          f"{args.batch_size}")
    if args.seq_len is not None and not 1 <= args.seq_len <= MAX_BATCH_SIZE:
        raise ConfigError(f"--seq-len must be a whole number of tokens from 1 to "
                          f"{MAX_BATCH_SIZE}; got {args.seq_len}")
    compute = args.compute
    if args.compute_ms is not None:
        compute = "ms"
    if args.compute_file is not None:
        compute = "file"
    host_ms = None
    if args.host_ms is not None:
        host_ms = parse_compute_ms(args.host_ms, "--host-ms", "the host's milliseconds to issue "
                                   "the forward and the backward")
        if not given:
            raise ConfigError("--host-ms is the host's time to issue a step's compute: give the "
                              "compute too (--compute flops, --compute-ms or --compute-file)")
        if args.launch == "graph":
            raise ConfigError("--host-ms is the host's time to issue the compute, which a CUDA "
                              "graph's replay does not spend: use --launch eager or auto")
    return dict(compute=compute, batch_size=args.batch_size, seq_len=args.seq_len,
                compute_ms=None if args.compute_ms is None else parse_compute_ms(args.compute_ms),
                compute_layers_ms=None if args.compute_file is None
                else load_compute_file(args.compute_file), host_ms=host_ms)
