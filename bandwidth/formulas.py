"""Bandwidth formulas as tiny pure functions (derived in docs/formulas.md).

All rates are decimal: 1 GB/s = 1e9 bytes per second.
"""


def algbw_gbps(nbytes: float, seconds: float) -> float:
    """Algorithm bandwidth: the bytes of one buffer over the time of one exchange."""
    return nbytes / seconds / 1e9 if seconds > 0 else 0.0


def allreduce_factor(n: int) -> float:
    """Bus factor of an all-reduce over n ranks: each one sends and receives 2(n-1)/n of the data."""
    return 2.0 * (n - 1) / n if n > 0 else 0.0


def fsdp_factor(n: int) -> float:
    """Bus factor of one FSDP step over n ranks: two all-gathers and one reduce-scatter of the
    parameters, each moving (n-1)/n of the data into (or out of) every rank: 3(n-1)/n."""
    return 3.0 * (n - 1) / n if n > 0 else 0.0


def busbw_gbps(nbytes: float, seconds: float, factor: float) -> float:
    """Bus bandwidth = algbw x factor; for an all-reduce this is MXNet's 'GB/sec per gpu'."""
    return algbw_gbps(nbytes, seconds) * factor


def mxnet_size_mb(nbytes: int) -> float:
    """MXNet's 'total size' in MB (1e6 bytes)."""
    return nbytes / 1e6


def one_gpu_device_bound_gbps(n: int, memory_gbps: float) -> float:
    """The device mode's busbw bound with n replicas on one GPU (``--gpus 0,0``): a step of S
    bytes copies 2(n-1)S (each byte read and written: 4(n-1)S of memory traffic) and sums (n-1)S
    (two operands read, one written: 3(n-1)S), 7(n-1)S in all through one GPU's memory. At the
    fastest rate ``memory_gbps`` that memory was measured to move (GB/s of traffic, copies and
    sums overlapped or not) t >= 7(n-1)S / M, so busbw = S 2(n-1)/n / t is at most 2M / (7n);
    0 for n < 2."""
    if n < 2:
        return 0.0
    return 2.0 * memory_gbps / (7.0 * n)
