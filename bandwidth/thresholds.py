"""The gates' thresholds as the command lines give them: --tolerance, --min-gbps,
--min-percent-of-ceiling and --repeat (bad values are a ConfigError, exit 2). measure.py's config,
compare, the ceiling's --expect-links and the host gate all parse them, so they sit below all."""

from __future__ import annotations

from bandwidth.errors import ConfigError

def _percent(text: str | float) -> tuple[str, float]:
    """(the text as given, its number): ``10%`` and ``10`` are both 10; NaN where not a number."""
    raw = str(text).strip()
    body = raw[:-1].strip() if raw.endswith("%") else raw
    try:
        return raw, float(body)
    except ValueError:
        return raw, float("nan")


def parse_tolerance(text: str | float) -> float:
    """``--tolerance``: a percentage, ``10%`` or ``10`` (both 10 %); from 0 up to, not including,
    100. Returns the percentage."""
    raw, value = _percent(text)
    if not 0 <= value < 100:
        raise ConfigError(f"--tolerance must be a percentage from 0 up to 100, written 10% or 10 "
                          f"(both mean 10 %); got {raw!r}")
    return value


def parse_min_gbps(text: str | float) -> float:
    """``--min-gbps``: a floor in GB/s per GPU (busbw), a positive number."""
    try:
        value = float(str(text).strip())
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise ConfigError(f"--min-gbps must be a positive number of GB/s per GPU (busbw), such as "
                          f"431; got {str(text)!r}")
    return value


def parse_min_percent(text: str | float) -> float:
    """``--min-percent-of-ceiling``: a percentage above 0 and at most 100 (``60`` or ``60%``)."""
    raw, value = _percent(text)
    if not 0 < value <= 100:
        raise ConfigError(f"--min-percent-of-ceiling must be a percentage above 0 and at most "
                          f"100, such as 60; got {raw!r}")
    return value


def parse_repeat(text: str | int) -> int:
    """``--repeat``: how many times a measurement may run before the check fails; 1 or more."""
    try:
        value = int(str(text).strip())
    except ValueError:
        value = 0
    if value < 1:
        raise ConfigError(f"--repeat must be a whole number of runs, 1 or more, or auto; got "
                          f"{str(text)[:40]!r}")
    return value
