"""The compute of a step, done on one device: ``Runner(plan, device, dtype, units)``.

Each unit's FLOPs run as matrix multiplications in the run's dtype on the unit's device, in the
schedule's order: a unit of F FLOPs is ``m`` rows of a ``[m, K] @ [K, N]`` product (2 m K N = F,
``m`` rounded to a whole row, split into several products where the work buffers are too short).
``K`` and ``N`` are chosen per unit size by ``tune``, which times every shape of ``SHAPES`` (that
leaves at least ``MIN_ROWS`` rows, so rounding moves a unit's FLOPs by under 1 %) on the device
and keeps the fastest, as cuDNN's benchmark mode chooses convolution kernels: on an H200 at
resnet-50's batch 32 the fixed 1024 x 1024 of before left units of 3.3 GFLOP on 52 of 132 SMs,
and tuned shapes moved the products from 73 % to 78 % of a large bfloat16 product's rate (float32:
81 % to 89 %; CPU devices on 16 threads at batch 8: 71 % to 82 %). Milliseconds
(``--compute-ms``, ``--compute-file``) become FLOPs at the rate this device reached in
``calibrate``, so that the same contention with the exchange (the SMs and memory a product takes)
lasts the time asked. On CPU devices milliseconds are timed waits instead: they stand for a GPU's
compute, which leaves the host's cores to the exchange (the network lab's hosts share a few cores,
where products calibrated alone ran many times longer than asked once every host computed at
once). On a GPU the work is issued on the current stream and, while tracing, CUDA events mark each
unit's start and end (the timeline); on CPU devices it runs on the process's torch threads, marked
by ``perf_counter``.

The activations a step keeps for its backward pass (``ComputePlan.activation_nbytes``) are
allocated with the runner, so that a batch that would not fit in training is refused or fails
here too (plan.check_memory counts them); the products themselves run on work buffers.
"""

from __future__ import annotations

import statistics
import threading
import time

import torch

from bandwidth.compute.layers import ComputePlan, UnitWork, layer_units

_WIDTHS = (256, 512, 1024, 2048, 4096)
SHAPES = {   # the (K, N) tune chooses from; the first is the shape before tuning (calibrate's)
    "cuda": [(1024, 1024)] + [(k, n) for k in _WIDTHS for n in _WIDTHS
                              if k * n <= 4 * 2 ** 20 and (k, n) != (1024, 1024)],
    # fewer on CPU devices, where each try costs the unit's whole time on a few cores
    "cpu": [(1024, 1024), (256, 512), (512, 512), (512, 1024)],
}
MIN_ROWS = 64
HEAD_START_CYCLES = 2_000_000   # about 1 ms of a GPU's clock: longer than the host takes to queue
OPERAND = {"cuda": 16384 * 1024, "cpu": 2048 * 1024}   # elements of the [m, K] and [m, N] buffers
LARGE = {"cuda": 8192, "cpu": 2048}      # the "large matmul" whose rate the products are judged by
TORCH_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
_BOUND = threading.local()       # whether this thread's CUDA context is made current


def _bind_thread(device: torch.device) -> None:
    """On a thread other than the main one (autograd's backward under --framework), make the
    device's context current before the first product: none is there yet, and cuBLAS warned so
    ("no current CUDA context") on the user's screen. The main thread's device is left alone
    (one process may hold replicas on several GPUs)."""
    if threading.current_thread() is not threading.main_thread():
        torch.cuda.set_device(device)
    _BOUND.done = True


def work_bytes(device_type: str, dtype_bytes: int) -> int:
    """The work buffers of one runner: the [m, K] operand, the [m, N] result, the [K, N] weight."""
    weight = max(k * n for k, n in SHAPES[device_type])
    return (2 * OPERAND[device_type] + weight) * dtype_bytes


def shape_for(flops: int, shapes: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The shapes of ``shapes`` that run ``flops`` in at least MIN_ROWS rows (the one with the
    most rows where none does)."""
    fits = [(k, n) for k, n in shapes if flops / (2 * k * n) >= MIN_ROWS]
    return fits or [min(shapes, key=lambda kn: kn[0] * kn[1])]


def products(flops: int, k: int, n: int, operand: int) -> list[int]:
    """The rows of each ``[m, k] @ [k, n]`` product that run ``flops``, buffers of ``operand``
    elements."""
    rows, cap = round(flops / (2 * k * n)), operand // max(k, n)
    return [cap] * (rows // cap) + ([rows % cap] if rows % cap else [])


class Runner:
    """``units``: the step's units in forward order (default: each layer of ``plan``); a
    schedule's FORWARD/BACKWARD slot of unit i runs ``layer(i, ...)``."""

    def __init__(self, plan: ComputePlan, device: torch.device, dtype: str,
                 units: list[UnitWork] | None = None):
        self.plan, self.device = plan, device
        self.units = units if units is not None else layer_units(plan)
        self.kind, self.dtype = device.type, dtype
        self.operand = OPERAND[self.kind]
        weight = max(k * n for k, n in SHAPES[self.kind])
        torch_dtype = TORCH_DTYPES[dtype]
        generator = torch.Generator(device="cpu").manual_seed(0)
        # Values in [-1, 1), the operand's scaled by 1/4096 (the widest K): products stay of
        # order 1 in every dtype (no inf).
        a = (torch.rand(self.operand, generator=generator) * 2 - 1) / max(_WIDTHS)
        b = (torch.rand(weight, generator=generator) * 2 - 1)
        self.a, self.b = a.to(device, torch_dtype), b.to(device, torch_dtype)
        self.out = torch.empty(self.operand, dtype=torch_dtype, device=device)
        self.shapes: dict[int, tuple[int, int]] = {}    # a unit's FLOPs -> its (K, N) (tune)
        self._views: dict[tuple[int, tuple[int, int]], list] = {}
        self.activations = torch.empty(
            max(1, plan.activation_nbytes(1)), dtype=torch_dtype, device=device)
        self.rate_flops = None       # FLOP/s of this runner's products (calibrate)
        self.forward_work = [unit.forward_flops for unit in self.units]
        self.backward_work = [unit.backward_flops for unit in self.units]
        self.marks: list[tuple[str, object, object, str]] = []   # (label, start, end, lane)

    # -- the work ---------------------------------------------------------------------------

    def _flops(self, flops: int) -> None:
        if self.kind == "cuda" and not getattr(_BOUND, "done", False):
            _bind_thread(self.device)
        for a, b, out in self._operands(flops):
            torch.mm(a, b, out=out)

    def _operands(self, flops: int) -> list[tuple[torch.Tensor, ...]]:
        """The views of the work buffers that ``flops``' products take, made once per size and
        shape (three views a product cost the host as much as a small product takes the GPU)."""
        shape = self.shapes.get(flops, SHAPES[self.kind][0])
        key = (flops, shape)
        if key not in self._views:
            k, n = shape
            self._views[key] = [(self.a[:rows * k].view(rows, k), self.b[:k * n].view(k, n),
                                 self.out[:rows * n].view(rows, n))
                                for rows in products(flops, k, n, self.operand)]
        return self._views[key]

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
        self.host(index, backward)
        _wait((unit.backward_ms if backward else unit.forward_ms) / 1e3)

    def host(self, index: int, backward: bool) -> None:
        """The host's time to issue the unit's work (--host-ms), spent before it is issued (as
        a layer's kernels start after the host issued them, and its gradients are ready after
        its kernels)."""
        unit = self.units[index]
        host_ms = unit.host_backward_ms if backward else unit.host_forward_ms
        if host_ms:
            _spin(host_ms / 1e3)

    def _work(self, index: int, backward: bool) -> None:
        if self.waits:
            self.wait(index, backward)
        else:
            self.host(index, backward)
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
        of a full-height product; with a plan in milliseconds, sets each layer's work from it.
        Then ``tune``."""
        k, n = SHAPES[self.kind][0]
        flops = 2 * k * n * (self.operand // max(k, n))
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
        self.tune()
        return self.rate_flops

    def tune(self, repeats: int = 10) -> dict[int, tuple[int, int]]:
        """Each unit size's fastest shape (module docstring), timed here once per process and
        device (runners of one device share the choice). On a GPU each try runs ``repeats``
        times after a first run, queued behind a wait of the GPU's own (so that the host's
        launches, which take longer than a small bfloat16 product, run ahead and the events
        time the products alone); on CPU devices one run each."""
        for flops in sorted(set(self.forward_work + self.backward_work) - {0}):
            key = (str(self.device), self.dtype, flops)
            if key not in _TUNED:
                _TUNED[key] = min(shape_for(flops, SHAPES[self.kind]),
                                  key=lambda kn: self._time(flops, kn, repeats))
            self.shapes[flops] = _TUNED[key]
        return self.shapes

    def _time(self, flops: int, shape: tuple[int, int], repeats: int) -> float:
        self.shapes[flops] = shape
        if self.kind != "cuda":
            start = time.perf_counter()
            self._flops(flops)
            return time.perf_counter() - start
        with torch.cuda.device(self.device):
            self._flops(flops)                          # the shape's first run (cuBLAS's choice)
            stream = torch.cuda.current_stream()
            start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
            torch.cuda._sleep(HEAD_START_CYCLES)        # the queue runs ahead of the GPU
            start.record(stream)
            for _ in range(repeats):
                self._flops(flops)
            end.record(stream)
            end.synchronize()
            return start.elapsed_time(end)

    @property
    def step_flops(self) -> int:
        """FLOPs one step runs (after calibrate, for a plan in milliseconds)."""
        return sum(self.forward_work) + sum(self.backward_work)

    def close(self) -> None:
        self.a = self.b = self.out = self.activations = None
        self._views = {}
        self.marks = []


_TUNED: dict[tuple[str, str, int], tuple[int, int]] = {}


def _wait(seconds: float) -> None:
    """Hold this thread ``seconds`` without using a core (sleep, then a short spin to the end)."""
    end = time.perf_counter() + seconds
    if seconds > 0.002:
        time.sleep(seconds - 0.001)
    while time.perf_counter() < end:
        pass


def _spin(seconds: float) -> None:
    """Keep this thread's core busy ``seconds`` (--host-ms: the host issuing a layer's work holds
    its core, and the interpreter, as a spin does)."""
    end = time.perf_counter() + seconds
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
