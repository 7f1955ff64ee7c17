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


def one_gpu_device_bound_gbps(n: int, copy_gbps: float, add_gbps: float) -> float:
    """The device mode's busbw bound with n replicas on one GPU (``--gpus 0,0``): a step of S
    bytes copies 2(n-1)S (4(n-1)S of memory traffic at the copy rate) and sums (n-1)S (3(n-1)S
    at the add rate), so t >= (n-1)S(4/copy + 3/add) and busbw = S 2(n-1)/n / t is at most
    2 / (n (4/copy + 3/add)). Rates in GB/s of memory traffic; 0 for n < 2."""
    if n < 2:
        return 0.0
    return 2.0 / (n * (4.0 / copy_gbps + 3.0 / add_gbps))
