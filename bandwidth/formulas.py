"""Bandwidth formulas as tiny pure functions (derived in docs/formulas.md).

All rates are decimal: 1 GB/s = 1e9 bytes per second.
"""


def algbw_gbps(nbytes: float, seconds: float) -> float:
    """Algorithm bandwidth: the bytes of one buffer over the time of one exchange."""
    return nbytes / seconds / 1e9 if seconds > 0 else 0.0


def allreduce_factor(n: int) -> float:
    """Bus factor of an all-reduce over n ranks: each one sends and receives 2(n-1)/n of the data."""
    return 2.0 * (n - 1) / n if n > 0 else 0.0


def busbw_gbps(nbytes: float, seconds: float, factor: float) -> float:
    """Bus bandwidth = algbw x factor; for an all-reduce this is MXNet's 'GB/sec per gpu'."""
    return algbw_gbps(nbytes, seconds) * factor


def mxnet_size_mb(nbytes: int) -> float:
    """MXNet's 'total size' in MB (1e6 bytes)."""
    return nbytes / 1e6
