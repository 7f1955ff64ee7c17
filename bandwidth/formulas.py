"""Bandwidth formulas as tiny pure functions (derived in docs/formulas.md).

All rates are decimal: 1 GB/s = 1e9 bytes per second.
"""

import math
import statistics


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


# What a training step costs (--compute; docs/formulas.md, "What the network costs a step").
# Every time is a median over the run's iterations, measured in the same run: ``compute_s`` the
# step's compute alone (an infinitely fast network), ``exchange_s`` the exchange alone (no
# compute), ``step_s`` the step with both.

def paired_exposed_s(step_s: list[float], compute_s: list[float]) -> float:
    """Exposed communication, the time the network adds to a step, from interleaved iterations:
    the median over rounds of step k - compute alone k (0 at the least: a step a little faster
    than compute alone is timing noise, not a gain). The two iterations of a round run back to
    back, so a drift of the device's clock or of the host's load between rounds falls on both and
    cancels; the difference of the two medians does not cancel it, and a round disturbed in one
    list but not the other moves it (a 19 ms step against an exchange of 0.5 ms leaves little
    room)."""
    pairs = [s - c for s, c in zip(step_s, compute_s)]
    if not pairs:
        return 0.0
    return max(0.0, statistics.median(pairs))


def overlap_of(exposed: float, exchange_s: float) -> float:
    """The share of the exchange that compute hides: 1 - exposed (``paired_exposed_s``) /
    exchange alone, in [0, 1] (1: the exchange costs nothing; 0: none of it overlaps)."""
    if exchange_s <= 0:
        return 1.0
    return min(1.0, max(0.0, 1.0 - exposed / exchange_s))


def compute_slowdown(compute_in_step_s: float, compute_s: float) -> float:
    """How much slower compute runs inside the step than alone (1: no slower): they compete for
    the device's memory bandwidth and cores."""
    return compute_in_step_s / compute_s if compute_s > 0 else 1.0


def samples_per_s(batch_size: int, devices: int, step_s: float) -> float:
    """Training throughput: every device's batch once per step."""
    return batch_size * devices / step_s if step_s > 0 else 0.0


def performance_ratio(step_s: float, compute_s: float) -> float:
    """The seeds' performance ratio: compute alone / step = samples/s against a network that costs
    nothing (1: the network costs nothing; 0.05: the step is 20 x slower than its compute)."""
    return min(1.0, compute_s / step_s) if step_s > 0 else 0.0


def framework_split(framework_s: float, compute_s: float,
                    exposed_s: float) -> tuple[float, float, float]:
    """A framework's step (--framework) cut into (compute, network, the framework's own cost):
    the compute alone, what the ideal schedule exposes of the network, and the rest, F - C - E.
    The three add up to the framework's step; the last is negative where the framework's step
    beat the schedule's (its collectives were faster than the schedule's parts)."""
    return compute_s, exposed_s, framework_s - compute_s - exposed_s


def serial_step_s(compute_s: float, exchange_s: float) -> float:
    """The step with no overlap at all (the flat schedule: compute, then the exchange)."""
    return compute_s + exchange_s


def log_comb(n: int, k: int) -> float:
    """log(n choose k)."""
    return math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)


def median_ci(samples, confidence: float = 0.95) -> tuple[float, float] | None:
    """(low, high) of the median with at least ``confidence``, distribution-free, from order
    statistics (binomial with p = 1/2); None when the sample is too small for one (below 6
    samples at 95 %)."""
    x = sorted(float(v) for v in samples)
    n = len(x)
    if n < 2:
        return None
    # The largest k with P(Binomial(n, 1/2) < k) <= (1 - confidence) / 2: [x_(k), x_(n-k+1)].
    tail = (1.0 - confidence) / 2.0
    cdf, k = 0.0, 0
    while k < n // 2:
        # P(X = k) in logarithms: 2 ** n overflows a float from n = 1024 (a --repeat auto run
        # pools that many iterations within seconds on a fast host)
        nxt = cdf + math.exp(log_comb(n, k) - n * math.log(2.0))
        if nxt > tail:
            break
        cdf, k = nxt, k + 1
    if k == 0:
        return None
    return x[k - 1], x[n - k]
