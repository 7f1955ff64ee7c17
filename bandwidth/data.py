"""Test data whose reduced value is known in closed form, and MXNet's error measure.

Replica r holds, at flat index i, ``g_r[i] = (base[i] + r * delta[i]) / 64`` with integer
``base`` in [-32, 32] and ``delta`` in {-1, 0, 1}, both a hash of (i, seed). The sum over n replicas
is therefore ``(n * base + n(n-1)/2 * delta) / 64``: computed from the formula, never by replaying
the reduction, and exact in float32 (and in float16 up to about 40 replicas, bfloat16 up to 6), so
every mode must print ``error 0.000000`` in float32. Values are generated chunk by chunk from the
index alone, so neither the data nor the reference needs a second full-size buffer.
"""

from __future__ import annotations

import torch

from bandwidth.optimizers import Sgd

SCALE = 64.0
CHUNK_ELEMENTS = 1 << 24
_MASK = 0xFFFFFFFF


def _hash(index: torch.Tensor, salt: int) -> torch.Tensor:
    # 32-bit multiplicative hash; int64 products wrap, which keeps the low 32 bits exact.
    h = (index * 2654435761 + salt * 40503 + 1) & _MASK
    h = h ^ (h >> 15)
    h = (h * 2246822519) & _MASK
    return h ^ (h >> 13)


def _base_delta(start: int, stop: int, seed: int, device: torch.device):
    index = torch.arange(start, stop, dtype=torch.int64, device=device)
    base = _hash(index, 2 * seed) % 65 - 32
    delta = _hash(index, 2 * seed + 1) % 3 - 1
    return base, delta


def _chunks(numel: int):
    for start in range(0, numel, CHUNK_ELEMENTS):
        yield start, min(numel, start + CHUNK_ELEMENTS)


def fill_gradient(flat: torch.Tensor, rank: int, seed: int) -> None:
    """Write replica ``rank``'s gradient into ``flat`` (any dtype, any device)."""
    for start, stop in _chunks(flat.numel()):
        base, delta = _base_delta(start, stop, seed, flat.device)
        flat[start:stop] = ((base + rank * delta).to(torch.float32) / SCALE).to(flat.dtype)


def expected_sum(start: int, stop: int, replicas: int, seed: int, device) -> torch.Tensor:
    """Exact sum over ``replicas`` replicas of elements [start, stop), in float64."""
    base, delta = _base_delta(start, stop, seed, device)
    pairs = replicas * (replicas - 1) // 2
    return (replicas * base + pairs * delta).to(torch.float64) / SCALE


def error_terms(outputs: list[torch.Tensor], replicas: int, seed: int, optimizer: Sgd | None,
                steps: int) -> tuple[float, float]:
    """MXNet's error, split for combining across processes: (sum over these outputs of
    |got - expected|, sum of |expected|). error = first / second, summed over GPUs as MXNet did."""
    numel = outputs[0].numel()
    wrong = torch.zeros((), dtype=torch.float64)
    total = torch.zeros((), dtype=torch.float64)
    for start, stop in _chunks(numel):
        ref = expected_sum(start, stop, replicas, seed, outputs[0].device)
        if optimizer is not None:
            ref = optimizer.expected(ref, steps)
        total += ref.abs().sum().cpu()
        for out in outputs:
            ref_here = ref.to(out.device, non_blocking=False)
            wrong += (out[start:stop].to(torch.float64) - ref_here).abs().sum().cpu()
    return float(wrong), float(total)
