"""The value parsers and checks of the command line, each a small function that raises
ConfigError with one clear line: sizes and size sweeps, device lists, image shapes, timeouts,
--graph-steps, --confirm, --baseline-processes, backend names and output paths. Other command
lines (the ceiling's, the predictor's) use them too."""

from __future__ import annotations

import math

from bandwidth.errors import ConfigError

SIZE_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
MAX_TIMEOUT_S = 7 * 24 * 3600             # a week: any longer is no bound at all
MAX_CHUNK_MB = 1e9                        # MB of 1e6 bytes: 1 PB
MAX_GRAPH_STEPS = 1024                    # --graph-steps N: replays queued per timed iteration
MAX_SIZE_BYTES = 1 << 50                  # 1 PiB: beyond any device's memory
MAX_SWEEP_SIZES = 1000                    # -b 1 -e 1G -f 1.05 has 395 sizes


def parse_graph_steps(text: str) -> int | None:
    """--graph-steps: "auto" (None) or a count from 1 to MAX_GRAPH_STEPS."""
    if str(text).strip().lower() == "auto":
        return None
    try:
        count = int(str(text).strip())
    except ValueError:
        count = 0
    if not 1 <= count <= MAX_GRAPH_STEPS:
        raise ConfigError(f"--graph-steps must be 'auto' or a whole number from 1 to "
                          f"{MAX_GRAPH_STEPS}; got {str(text)[:30]!r}")
    return count


def check_timeout(seconds: float, flag: str = "--timeout") -> None:
    """``--timeout``: a finite number of seconds, more than 0 and at most a week."""
    if not (math.isfinite(seconds) and 0 < seconds <= MAX_TIMEOUT_S):
        raise ConfigError(f"{flag} must be a number of seconds above 0 and at most "
                          f"{MAX_TIMEOUT_S} (a week); got {seconds:g}")


def parse_size(text: str) -> int:
    """nccl-tests' sizes: bytes with an optional K, M or G suffix (powers of two): 1M = 1048576."""
    body, unit = (text[:-1], text[-1].upper()) if text[-1:].isalpha() else (text, "")
    try:
        number = float(body) * SIZE_UNITS[unit]
        value = int(number) if math.isfinite(number) else 0
    except (KeyError, ValueError):
        value = 0
    if value <= 0:
        raise ConfigError(f"a size must be a positive number of bytes with an optional K, M or G "
                          f"suffix, such as 1M; got {text[:40]!r}")
    if value > MAX_SIZE_BYTES:
        raise ConfigError(f"size {text[:40]!r} is more than {MAX_SIZE_BYTES >> 50} PiB; give a "
                          "size that fits in memory, such as 1G")
    return value


def size_sweep(begin: int, end: int, factor: float) -> list[int]:
    """Sizes from ``begin`` to ``end`` multiplying by ``factor`` (nccl-tests' -b -e -f). Each size
    is larger than the one before (a product that rounds back to the same integer takes the next
    integer), and a sweep of more than MAX_SWEEP_SIZES sizes is refused."""
    if end < begin:
        raise ConfigError(f"-e {end} is smaller than -b {begin}")
    if not math.isfinite(factor) or (factor <= 1 and begin != end):
        raise ConfigError(f"-f must be a number greater than 1 to sweep sizes; got {factor:g}")
    sizes = [begin]
    while begin != end and sizes[-1] * factor <= end:
        sizes.append(max(int(sizes[-1] * factor), sizes[-1] + 1))
        if len(sizes) > MAX_SWEEP_SIZES:
            raise ConfigError(f"-b {begin} -e {end} -f {factor:g} makes more than "
                              f"{MAX_SWEEP_SIZES} sizes; raise -f or narrow -b/-e")
    return sizes


def parse_image_shape(text: str) -> tuple[int, int, int]:
    parts = text.split(",")
    try:
        dims = tuple(int(p) for p in parts)
    except ValueError:
        dims = ()
    if len(dims) != 3 or min(dims) <= 0:
        raise ConfigError(f"--image-shape must be three positive integers C,H,W such as 3,224,224; "
                          f"got {text!r}")
    return dims  # type: ignore[return-value]


def parse_gpus(text: str) -> tuple[int, ...]:
    try:
        ids = tuple(int(p) for p in text.split(",") if p.strip() != "")
    except ValueError:
        ids = ()
    if not ids or min(ids) < 0:
        raise ConfigError(f"--gpus must be a comma list of GPU ids such as 0,1; got {text!r}")
    # A GPU listed twice is allowed, as MXNet's measure.py allowed it: two replicas share that
    # GPU (--gpus 0,0 runs the multi-device paths on one GPU). The modes of one process per
    # device refuse it (KVStore.unavailable), since NCCL cannot hold one GPU twice.
    return ids


def parse_baseline_processes(text: str | None, auto: bool, saving: bool) -> int:
    """``--baseline-processes K``: 1 to 20, more than 1 only with --save-baseline and --repeat
    auto; default 3 there, else 1."""
    if text is None:
        return 3 if auto and saving else 1
    try:
        value = int(str(text).strip())
    except ValueError:
        value = 0
    if not 1 <= value <= 20:
        raise ConfigError(f"--baseline-processes must be a whole number of processes from 1 to "
                          f"20; got {str(text)[:40]!r}")
    if value > 1 and not (auto and saving):
        raise ConfigError("--baseline-processes measures the passes of --repeat auto for "
                          "--save-baseline: give both, or leave it out")
    return value


def parse_confirm(text: str) -> int:
    """``--confirm N``: confirmation passes of --repeat auto, a whole number from 0 to 10."""
    try:
        value = int(str(text).strip())
    except ValueError:
        value = -1
    if not 0 <= value <= 10:
        raise ConfigError(f"--confirm must be a whole number of confirmation passes from 0 to 10 "
                          f"(0: none); got {str(text)[:40]!r}")
    return value


BACKENDS: dict[str, str] = {
    "toolkit": "this toolkit's kvstore modes on PyTorch (bandwidth.stores)",
    "mxnet": "Apache MXNet 1.9.1's own kvstore and ps-lite (bandwidth.backends.mxnet_backend)",
}


def canonical_backend(name: str) -> str:
    name = name.strip().lower()
    if name not in BACKENDS:
        raise ConfigError(f"unknown --backend {name!r}; valid: {', '.join(BACKENDS)}")
    return name



