"""Test data whose reduced value is known in closed form, and MXNet's error measure.

Replica r holds, at flat index i, ``g_r[i] = (base[i] + r * delta[i]) / 64`` with integer
``base`` in [-32, 32] and ``delta`` in {-1, 0, 1}, both a hash of (i, seed). The sum over n replicas
is therefore ``(n * base + n(n-1)/2 * delta) / 64``: computed from the formula, never by replaying
the reduction, and exact in float32 (and in float16 up to about 40 replicas, bfloat16 up to 6), so
every mode must print ``error 0.000000`` in float32. Values are generated chunk by chunk from the
index alone; the reference sum is built once per device and kept in float32.
"""

from __future__ import annotations

import torch

from bandwidth.arrays.optimizers import Sgd

SCALE = 64.0
CHUNK_ELEMENTS = 1 << 20     # int64 temporaries of 8 MB each: a worker's transient stays small
_MASK = 0xFFFFFFFF


def _base_delta(start: int, stop: int, seed: int, device: torch.device):
    # One 32-bit multiplicative hash of (index, seed) per element: its low 16 bits give base, its
    # high 16 bits delta. Computed in int32, whose additions and products wrap modulo 2**32 as
    # the hash wants (the offset and the multiplier are taken as their signed 32-bit values);
    # the right shifts are arithmetic in int32, so each is masked to the bits a logical shift
    # keeps. Each 16-bit half x is mapped onto [0, m) as (x * m) >> 16. Half the bytes of int64
    # and no remainder: the fill runs before every step of a parameter-server worker, whose
    # pull overwrote its gradients (60 M elements of resnet-152 took 1.07 s in int64, 0.27 in
    # int32, one thread).
    h = torch.arange(0, stop - start, dtype=torch.int32, device=device)
    h.add_(_signed32(start + seed * 0x9E3779B1 + 1)).mul_(_signed32(2654435761))
    h.bitwise_xor_(h.bitwise_right_shift(15).bitwise_and_(0x1FFFF))
    high = h.bitwise_right_shift(16).bitwise_and_(0xFFFF)
    base = h.bitwise_and_(0xFFFF).mul_(65).bitwise_right_shift_(16).sub_(32)
    delta = high.mul_(3).bitwise_right_shift_(16).sub_(1)
    return base, delta


def _signed32(value: int) -> int:
    """``value`` modulo 2**32 as a signed 32-bit integer."""
    value &= _MASK
    return value - (1 << 32) if value >= 1 << 31 else value


def _chunks(numel: int):
    for start in range(0, numel, CHUNK_ELEMENTS):
        yield start, min(numel, start + CHUNK_ELEMENTS)


def fill_gradient(flat: torch.Tensor, rank: int, seed: int) -> None:
    """Write replica ``rank``'s gradient into ``flat`` (any dtype, any device)."""
    for start, stop in _chunks(flat.numel()):
        _fill(flat[start:stop], *_base_delta(start, stop, seed, flat.device), rank)


def _fill(view: torch.Tensor, base: torch.Tensor, delta: torch.Tensor, rank: int) -> None:
    """Replica ``rank``'s values of one chunk into ``view`` (``base`` is overwritten)."""
    values = base.add_(delta, alpha=rank) if abs(rank) < 1 << 20 else \
        base.long().add_(delta, alpha=rank)
    if view.dtype == torch.float32:         # integers and their 64ths are exact in float32
        torch.mul(values, 1.0 / SCALE, out=view)
    else:
        view.copy_((values.to(torch.float32) / SCALE).to(view.dtype))


def expected_sum(start: int, stop: int, replicas: int, seed: int, device) -> torch.Tensor:
    """Exact sum over ``replicas`` replicas of elements [start, stop), in float64."""
    base, delta = _base_delta(start, stop, seed, device)
    pairs = replicas * (replicas - 1) // 2
    return (replicas * base.long() + pairs * delta.long()).to(torch.float64) / SCALE


class Reference:
    """The exact sum over ``replicas`` replicas, built once on ``device`` from the closed form and
    kept in float32 (exact: the values are multiples of 1/64 far below 2**24 / 64). With ``keep``
    False (a distributed worker, where memory must not grow with the job: issue 27) each chunk is
    computed again when checked instead, the same operations giving the same values."""

    def __init__(self, numel: int, replicas: int, seed: int, device: torch.device,
                 keep: bool = True):
        self.numel, self.replicas, self.seed, self.device = numel, replicas, seed, device
        self.sum = torch.empty(numel, dtype=torch.float32, device=device) if keep else None
        if keep:
            for start, stop in _chunks(numel):
                self.sum[start:stop] = self._computed(start, stop)
        # In chunks: a whole-array abs() in float64 would take twice the sum's own memory (60 GiB
        # for llama-8b), which check_memory does not count.
        self.abs_total = sum(float(self.chunk(start, stop).abs().sum(dtype=torch.float64))
                             for start, stop in _chunks(numel))

    def _computed(self, start: int, stop: int) -> torch.Tensor:
        return self._sum_of(*_base_delta(start, stop, self.seed, self.device))

    def _sum_of(self, base: torch.Tensor, delta: torch.Tensor) -> torch.Tensor:
        pairs = self.replicas * (self.replicas - 1) // 2
        if 33 * self.replicas + pairs >= 1 << 31:        # past int32: in int64
            base, delta = base.long(), delta.long()
        return (base * self.replicas).add_(delta, alpha=pairs).to(torch.float32).div_(SCALE)

    def chunk(self, start: int, stop: int) -> torch.Tensor:
        """The expected sum of elements [start, stop)."""
        return self.sum[start:stop] if self.sum is not None else self._computed(start, stop)

    def error_terms(self, outputs: list[torch.Tensor], optimizer: Sgd | None,
                    steps: int, refill_rank: int | None = None) -> tuple[float, float]:
        """MXNet's error, split for combining across processes: (sum over these outputs of
        |got - expected|, sum of |expected|); error = first / second, summed over GPUs as MXNet
        did. With an optimizer the expected weights are ``steps`` updates from zero.
        ``refill_rank``: each chunk, once checked, is overwritten with that replica's gradient
        (a parameter-server worker pulls into its gradients), the hash computed once for both."""
        scale = 1.0 if optimizer is None else -optimizer.lr * steps
        wrong = 0.0
        for out in outputs:
            for start, stop in _chunks(out.numel()):
                base_delta = None
                if refill_rank is not None:
                    base_delta = _base_delta(start, stop, self.seed, self.device)
                expected = self.sum[start:stop] if self.sum is not None else \
                    self._sum_of(*base_delta) if base_delta else self._computed(start, stop)
                expected = expected * scale if scale != 1.0 else expected
                diff = out[start:stop].to(torch.float32) - expected
                wrong += float(diff.abs_().sum(dtype=torch.float64))
                if base_delta is not None:
                    _fill(out[start:stop], *base_delta, refill_rank)
        return wrong, abs(scale) * self.abs_total


def piece_error_terms(pieces, replicas: int, seed: int, scale: float = 1.0) -> tuple[float,
                                                                                     float]:
    """MXNet's error terms, as ``Reference.error_terms`` gives them, for arrays held in pieces
    (a framework's parameters and gradients, each its own tensor; a shard of them): ``pieces``
    are (start, tensor) with ``start`` the tensor's first element in the flat buffer of every
    array; each is compared, times ``scale``, chunk by chunk with the closed-form sum over
    ``replicas`` replicas. Returns (sum of |scale x got - expected|, sum of |expected|)."""
    wrong = total = 0.0
    for start, tensor in pieces:
        flat = tensor.detach().reshape(-1)
        for first, stop in _chunks(flat.numel()):
            expected = expected_sum(start + first, start + stop, replicas, seed, flat.device)
            got = flat[first:stop].to(torch.float64) * scale
            wrong += float((got - expected).abs_().sum())
            total += float(expected.abs().sum())
    return wrong, total
