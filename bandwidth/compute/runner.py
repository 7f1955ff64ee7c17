"""The compute of a step, done on one device: ``Runner(plan, device, dtype, units)``.

Each unit's FLOPs run as matrix multiplications in the run's dtype on the unit's device, in the
schedule's order: a unit of F FLOPs is ``m`` rows of a ``[m, T] @ [T, T]`` product (2 m T^2 = F,
``m`` rounded to a whole row, at most ``MAX_ROWS`` rows per product), with ``T`` = ``TILE`` =
1024 (on a GPU a product of that width runs near the dense rate; on CPU devices 512-wide ones
fell further below a large product's rate than 1024-wide ones). Milliseconds (``--compute-ms``,
``--compute-file``) become FLOPs at the rate this device reached in ``calibrate``, so that the
same contention with the exchange (the SMs and memory a product takes) lasts the time asked. On
CPU devices milliseconds are timed waits instead: they stand for a GPU's compute, which leaves the
host's cores to the exchange (the network lab's hosts share a few cores, where products
calibrated alone ran many times longer than asked once every host computed at once). On a
GPU the work is issued on the current stream and, while tracing, CUDA events mark each unit's
start and end (the timeline); on CPU devices it runs on the process's torch threads, marked by
``perf_counter``.

The activations a step keeps for its backward pass (``ComputePlan.activation_nbytes``) are
allocated with the runner, so that a batch that would not fit in training is refused or fails
here too (plan.check_memory counts them); the products themselves run on work buffers.
"""

from __future__ import annotations

import statistics
import time

import torch

from bandwidth.compute.layers import ComputePlan, UnitWork, layer_units

TILE = {"cuda": 1024, "cpu": 1024}
MAX_ROWS = {"cuda": 16384, "cpu": 2048}
LARGE = {"cuda": 8192, "cpu": 2048}      # the "large matmul" whose rate the products are judged by
TORCH_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def work_bytes(device_type: str, dtype_bytes: int) -> int:
    """The work buffers of one runner: [rows, T] operand and result, [T, T] weight."""
    tile, rows = TILE[device_type], MAX_ROWS[device_type]
    return (2 * rows * tile + tile * tile) * dtype_bytes


class Runner:
    """``units``: the step's units in forward order (default: each layer of ``plan``); a
    schedule's FORWARD/BACKWARD slot of unit i runs ``layer(i, ...)``."""

    def __init__(self, plan: ComputePlan, device: torch.device, dtype: str,
                 units: list[UnitWork] | None = None):
        self.plan, self.device = plan, device
        self.units = units if units is not None else layer_units(plan)
        self.kind = device.type
        self.tile, self.max_rows = TILE[self.kind], MAX_ROWS[self.kind]
        torch_dtype = TORCH_DTYPES[dtype]
        generator = torch.Generator(device="cpu").manual_seed(0)
        # Values in [-1, 1) scaled by 1/T: products stay of order 1 in every dtype (no inf).
        a = (torch.rand(self.max_rows, self.tile, generator=generator) * 2 - 1) / self.tile
        b = (torch.rand(self.tile, self.tile, generator=generator) * 2 - 1)
        self.a, self.b = a.to(device, torch_dtype), b.to(device, torch_dtype)
        self.out = torch.empty(self.max_rows, self.tile, dtype=torch_dtype, device=device)
        self.activations = torch.empty(
            max(1, plan.activation_nbytes(1)), dtype=torch_dtype, device=device)
        self.rate_flops = None       # FLOP/s of this runner's products (calibrate)
        self.forward_work = [unit.forward_flops for unit in self.units]
        self.backward_work = [unit.backward_flops for unit in self.units]
        self.marks: list[tuple[str, object, object, str]] = []   # (label, start, end, lane)

    # -- the work ---------------------------------------------------------------------------

    def _flops(self, flops: int) -> None:
        rows = round(flops / (2 * self.tile * self.tile))
        while rows > 0:
            take = min(rows, self.max_rows)
            torch.mm(self.a[:take], self.b, out=self.out[:take])
            rows -= take

    def mark(self):
        if self.kind == "cuda":
            # On this device's current stream (the one its products run on), whichever device
            # is current: replicas of one process sit on several GPUs.
            event = torch.cuda.Event(enable_timing=True)
            event.record(torch.cuda.current_stream(self.device))
            return event
        return time.perf_counter()

    @property
    def waits(self) -> bool:
        """Milliseconds on CPU devices are timed waits (module docstring)."""
        return self.plan.timed and self.kind == "cpu"

    def wait(self, index: int, backward: bool) -> None:
        unit = self.units[index]
        _wait((unit.backward_ms if backward else unit.forward_ms) / 1e3)

    def _work(self, index: int, backward: bool) -> None:
        if self.waits:
            self.wait(index, backward)
        else:
            self._flops((self.backward_work if backward else self.forward_work)[index])

    def layer(self, index: int, backward: bool, trace: bool = False) -> None:
        """One unit's forward (or backward) work; ``trace``: marked for the timeline."""
        if not trace:
            self._work(index, backward)
            return
        start = self.mark()
        self._work(index, backward)
        name = f"{'bwd' if backward else 'fwd'} {self.units[index].name}"
        self.marks.append((name, start, self.mark(), "compute"))

    def forward(self) -> None:
        for index in range(len(self.units)):
            self.layer(index, backward=False)

    def backward(self) -> None:
        for index in reversed(range(len(self.units))):
            self.layer(index, backward=True)

    def step(self) -> None:
        self.forward()
        self.backward()

    def synchronize(self) -> None:
        if self.kind == "cuda":
            torch.cuda.synchronize(self.device)

    # -- what it reached ---------------------------------------------------------------------

    def marked_seconds(self, origin) -> list[tuple[str, float, float, str]]:
        """The marks since ``clear_marks`` as (label, start, end, lane), seconds after
        ``origin`` (a ``mark``); synchronise first."""
        def since(mark) -> float:
            if self.kind == "cuda":
                return origin.elapsed_time(mark) / 1e3
            return mark - origin
        return [(label, since(start), since(end), lane) for label, start, end, lane in self.marks]

    def clear_marks(self) -> None:
        self.marks = []

    def calibrate(self, repeats: int = 5) -> float:
        """This device's rate of the runner's products (FLOP/s), the median of ``repeats`` runs
        of a full-height product; with a plan in milliseconds, sets each layer's work from it."""
        flops = 2 * self.max_rows * self.tile * self.tile
        self._flops(flops)                       # warm-up (kernel choice, clocks)
        self.synchronize()
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            self._flops(flops)
            self.synchronize()
            times.append(time.perf_counter() - start)
        self.rate_flops = flops / statistics.median(times)
        if self.waits:
            self.forward_work = [0] * len(self.units)
            self.backward_work = [0] * len(self.units)
        elif self.plan.timed:
            self.forward_work = [round(unit.forward_ms / 1e3 * self.rate_flops)
                                 for unit in self.units]
            self.backward_work = [round(unit.backward_ms / 1e3 * self.rate_flops)
                                  for unit in self.units]
        return self.rate_flops

    @property
    def step_flops(self) -> int:
        """FLOPs one step runs (after calibrate, for a plan in milliseconds)."""
        return sum(self.forward_work) + sum(self.backward_work)

    def close(self) -> None:
        self.a = self.b = self.out = self.activations = None
        self.marks = []


def _wait(seconds: float) -> None:
    """Hold this thread ``seconds`` without using a core (sleep, then a short spin to the end)."""
    end = time.perf_counter() + seconds
    if seconds > 0.002:
        time.sleep(seconds - 0.001)
    while time.perf_counter() < end:
        pass


def large_matmul_rate(device: torch.device, dtype: str, repeats: int = 3) -> float:
    """FLOP/s of one large square product (``LARGE``) in ``dtype`` on ``device``: the dense rate
    the runner's products are judged against, measured in the same run."""
    size = LARGE[device.type]
    torch_dtype = TORCH_DTYPES[dtype]
    a = torch.rand(size, size, device=device).to(torch_dtype) / size
    b = torch.rand(size, size, device=device).to(torch_dtype)
    out = torch.empty(size, size, dtype=torch_dtype, device=device)

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    torch.mm(a, b, out=out)
    sync()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        torch.mm(a, b, out=out)
        sync()
        times.append(time.perf_counter() - start)
    return 2 * size ** 3 / statistics.median(times)
