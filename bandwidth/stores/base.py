"""The small interface every kvstore mode fills in.

A mode receives this process's replicas (flat gradient and output buffers, see
bandwidth.arrays.layout),
the optimizer (or None) and a group for cross-process work, and supplies only its own operation:
set-up in ``__init__``, one reduce + broadcast of every array in ``step``, its bus factor, and
``unavailable`` saying when it cannot run here and why. The driver never tests a mode's name.
"""

from __future__ import annotations

from typing import ClassVar

from bandwidth.arrays.layout import Layout, Replica
from bandwidth.arrays.optimizers import Sgd
from bandwidth.formulas import allreduce_factor
from bandwidth.hardware.devices import DeviceSet


class KVStore:
    name: ClassVar[str]
    summary: ClassVar[str]
    # The same on CPU devices (replicas in host memory), where the words differ (no GPU there).
    summary_on_cpu: ClassVar[str | None] = None
    # The link that bounds this mode; shown beside its figures.
    bound: ClassVar[str]
    # The same on CPU devices (replicas in host memory), where it differs: no PCIe, no GPU link.
    bound_on_cpu: ClassVar[str | None] = None
    # Which ceiling bandwidth.ceiling.bounds measures for it: "peer link", "host path", "flat
    # all-reduce".
    bound_kind: ClassVar[str | None] = None
    # True: one process per device, started by the tool (torch.distributed needs it).
    process_per_device: ClassVar[bool] = False
    # True: runs under launch.py with workers and servers; __init__ takes a ``cluster``.
    distributed: ClassVar[bool] = False
    # True: MXNet refuses it without an optimizer (the async parameter servers).
    needs_optimizer: ClassVar[bool] = False
    # True: on GPUs ``capture`` records one step as a CUDA graph, which the session replays.
    graph_capable: ClassVar[bool] = False
    # False: ``--launch auto`` issues this mode's steps eagerly even where it can capture them
    # (``can_capture``), which then only ``--launch graph`` asks for.
    auto_graph: ClassVar[bool] = True
    # True: ``make_layout`` and ``__init__`` take ``owners``, a key placement rule (config.py).
    takes_owners: ClassVar[bool] = False
    # Why algbw means nothing with one device (None: it still measures a path, e.g. local's
    # host path on one GPU): a one-rank all-reduce moves no byte.
    alone_moves_nothing: ClassVar[str | None] = None
    # Replicas the default run (no --gpus, no --cpus) puts on a machine of one GPU, where one
    # device moves nothing across a link: 2 (``--gpus 0,0``) where the mode measures that GPU so.
    replicas_on_one_gpu: ClassVar[int] = 1
    # What a run of one GPU still measures (None: nothing, MXNet's 0 alone; the hint says more).
    one_gpu_measures: ClassVar[str | None] = None
    # What a worker's network traffic is called in the distributed summary: (out, in).
    traffic_words: ClassVar[tuple[str, str]] = ("pushed", "pulled")

    @classmethod
    def summary_text(cls, devices: DeviceSet) -> str:
        """What this mode does on ``devices``, in words (CPU devices are not GPUs)."""
        return cls.summary_on_cpu if cls.summary_on_cpu and not devices.is_cuda else cls.summary

    @classmethod
    def bound_text(cls, devices: DeviceSet) -> str:
        """What bounds this mode on ``devices``, in words."""
        return cls.bound_on_cpu if cls.bound_on_cpu and not devices.is_cuda else cls.bound

    @classmethod
    def can_capture(cls, devices: DeviceSet, optimizer: str = "none") -> bool:
        """Whether ``capture`` can record a step on ``devices`` with ``optimizer`` (a name)."""
        return cls.graph_capable

    @classmethod
    def unavailable(cls, devices: DeviceSet, dtype: str) -> str | None:
        """Why this mode cannot run on ``devices`` with ``dtype`` (None: it can)."""
        return None

    @classmethod
    def key_order(cls, shapes: list[tuple[str, tuple[int, ...]]], n: int) -> list[int]:
        """Order of the keys in the flat buffers (default: key order)."""
        return list(range(len(shapes)))

    @classmethod
    def make_layout(cls, shapes, n: int, cluster=None) -> Layout:
        """How the arrays sit in the flat buffers."""
        return Layout.build(shapes, cls.key_order(shapes, n))

    @classmethod
    def bus_factor(cls, n: int) -> float:
        """Bytes each device moves per byte of the arrays: MXNet's 2(n-1)/n, nccl-tests' busbw."""
        return allreduce_factor(n)

    @classmethod
    def counted_devices(cls, local: int, total: int) -> int:
        """The n of the bus factor: MXNet counts this worker's devices (even for its
        parameter-server modes); an all-reduce over every worker counts them all."""
        return local

    @classmethod
    def network_nbytes(cls, nbytes: int, local: int, total: int) -> float:
        """Bytes one worker of ``local`` devices (``total`` in the job) sends over the network per
        step, and receives as many, for arrays of ``nbytes``; 0 for the single-host modes."""
        return 0.0

    @classmethod
    def traffic_rule(cls, local: int, total: int) -> str:
        """How ``network_nbytes`` counts, in words, for the summary's note."""
        return ""

    @classmethod
    def extra_bytes_per_device(cls, nbytes: int, n: int, optimizer: bool) -> int:
        """Device memory this mode needs beyond the gradient and output buffers."""
        return 0

    @classmethod
    def staging_bytes(cls, nbytes: int, n: int, optimizer: bool, on_gpu: bool) -> int:
        """Host memory this mode allocates for ``n`` devices besides their own buffers (with
        CPU devices, those are in host memory already and counted per device)."""
        return 0

    def __init__(self, replicas: list[Replica], layout: Layout, optimizer: Sgd | None, group,
                 chunk_elements: int | None, cpu_threads: int | None = None):
        self.replicas = replicas
        self.layout = layout
        self.optimizer = optimizer
        self.group = group
        self.chunk_elements = chunk_elements
        self.cpu_threads = cpu_threads

    def notes(self) -> list[str]:
        """Set-up facts worth printing (peer access, key placement, stand-ins)."""
        return []

    def server_nbytes(self) -> list[int]:
        """Bytes this worker pushes to (and pulls from) each server per step; [] without
        servers."""
        return []

    def reset_weights(self) -> None:
        """With an optimizer: put the weights back to zero, as ``__init__`` left them, after
        untimed trial steps (default: the outputs, where most modes keep them)."""
        for replica in self.replicas:
            replica.outputs.zero_()

    # True: a step consumes what ``prepare`` wrote, so a replayed graph needs a fresh prepare (a
    # set of buffers of its own) for every replay (bandwidth.measurement.session).
    prepared_steps = False

    # True: with one CPU device, the worker's pull may land in its own gradients (an answer
    # comes only after the server holds the push, so the pushed bytes have left), and the
    # session keeps no outputs buffer: it refills the gradients, untimed, before each step. A
    # worker then holds S less (issue 27: resnet-50 at 50 x 5 within 20 GB).
    pulls_into_gradients = False

    def prepare(self) -> None:
        """Untimed work before each step (default: none)."""

    def step(self) -> None:
        raise NotImplementedError

    def start(self) -> None:
        """Begin a step without waiting for it where the mode can (a collective with
        ``async_op``, messages in flight), so that a schedule (bandwidth.schedules) has several
        parts' exchanges in flight at once; ``finish`` completes it. Default: the whole step now."""
        self.step()

    def finish(self) -> None:
        """Complete what ``start`` began: afterwards the outputs hold the step's result."""

    def capture(self):
        """One step recorded as a ``torch.cuda.CUDAGraph`` (GPUs only, ``graph_capable`` modes):
        the session replays it in place of ``step``. Called once, untimed, before the first step;
        it must leave the buffers as ``__init__`` did."""
        raise NotImplementedError

    def record_step(self) -> None:
        """What ``capture`` records, issued on the current stream while a larger graph is being
        captured there (a whole scheduled step, bandwidth.schedules.graphs.capture_step): every
        other stream the step uses is forked from the current one and joined back to it. Called
        after ``capture`` (which ran the eager warm-up), on one GPU."""
        raise NotImplementedError

    def as_part(self) -> None:
        """Called by a schedule (bandwidth.schedules.runner) on the store of each of its parts,
        before the first step: a mode may plan a part's step otherwise than a whole network's.
        Default: the same."""

    def close(self) -> None:
        """Release what ``__init__`` set up."""
