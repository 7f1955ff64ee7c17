"""The plan of one measurement: the network's arrays, the devices, the mode's class, checked
before anything is allocated (``make_plan``), and whether its buffers fit (``check_memory``).

The planner imports none of the stages it plans for: its caller hands it the registry's factory
of the mode's class (bandwidth.backends.registry.store_class), as a registry owns its factories.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Callable

import networks
from bandwidth.arrays.dtypes import DTYPE_BYTES
from bandwidth.compute.layers import ComputePlan, compute_plan
from bandwidth.compute.runner import work_bytes
from bandwidth.config.options import Config
from bandwidth.errors import ConfigError, OutOfMemoryError, UnsupportedError
from bandwidth.hardware.devices import DeviceSet, free_bytes, resolve
from bandwidth.plan.launching import launch_of
from bandwidth.plan.onegpu import one_gpu
from bandwidth.schedules.base import Schedule
from bandwidth.schedules.registry import SCHEDULES
from bandwidth.schedules.torchmodel import framework_unavailable

# Scratch for the chunked data generation and error check (int64 and float64 temporaries).
CHECK_SCRATCH_BYTES = 6 * 8 * (1 << 22)
# Resident memory of one rank process beyond its arrays (the torch runtime, Gloo's threads), and
# beyond that, per byte of the arrays (Gloo's working buffers, the flat reference's buffers): vgg-16
# under nccl on 2 CPU devices used 7.13 GB in all, 2.5 x its 553 MB per process beyond the buffers.
RANK_PROCESS_BYTES = 330 * 1000 * 1000
RANK_NBYTES_FACTOR = 2.5


@dataclass(frozen=True)
class Plan:
    config: Config
    shapes: list[tuple[str, tuple[int, ...]]]
    devices: DeviceSet
    store_cls: type                    # the mode's KVStore class under its backend
    # ``# note:`` lines about how the devices were chosen (one GPU: bandwidth.plan.onegpu).
    notes: tuple[str, ...] = ()

    @cached_property
    def compute(self) -> ComputePlan | None:
        """What each layer of a step computes (--compute; None: the exchange alone)."""
        return compute_plan(self.config, self.shapes)

    @property
    def numel(self) -> int:
        return networks.num_elements(self.shapes)

    @property
    def nbytes(self) -> int:
        return self.numel * DTYPE_BYTES[self.config.dtype]

    @property
    def network_label(self) -> str:
        c = self.config
        if c.network.startswith("flat:"):
            return f"flat {human_bytes(self.nbytes)}"
        if c.network in networks.NETWORKS and networks.supported_layers(c.network, c.image_shape):
            layers = c.num_layers or networks.NETWORKS[c.network].default_layers
            return f"{c.network}-{layers}"
        return c.network

    @property
    def input_text(self) -> str:
        """`` (image shape 3,224,224, 1000 classes)`` where the network's arrays depend on them."""
        c = self.config
        if not networks.takes_image(c.network):
            return ""
        return f" (image shape {','.join(map(str, c.image_shape))}, {c.num_classes} classes)"

    @property
    def launch(self) -> str:
        """How the mode's steps are issued here: "graph", "auto" or "eager" (launching.launch_of;
        a schedule other than flat: one graph per part where its parts and the mode allow)."""
        return launch_of(self.store_cls, self.devices, self.config.launch, self.config.optimizer,
                         self.schedule)

    def bus_factor(self, n: int) -> float:
        """The bus factor of this run's step over ``n`` counted devices: the mode's, or the
        schedule's where it moves other bytes (fsdp)."""
        if self.schedule is None:
            return self.store_cls.costs.bus_factor(n)
        return self.schedule.bus_factor(self.store_cls, n)

    @cached_property
    def schedule(self) -> Schedule | None:
        """The schedule's parts and events (bandwidth.schedules); None for flat, whose step is
        the mode's own single operation, run as it always was."""
        c = self.config
        if c.schedule == "flat":
            return None
        return SCHEDULES[c.schedule](self.shapes, DTYPE_BYTES[c.dtype], bucket_mb=c.bucket_mb,
                                     first_bucket_mb=c.first_bucket_mb)


def make_plan(config: Config, store_class: Callable[[Config], type],
              with_devices: bool = True) -> Plan:
    """Check everything that can be checked before allocating: network, devices, mode.
    ``store_class`` gives the mode's KVStore class under its backend (the caller's registry,
    bandwidth.backends.registry.store_class); it is asked after the network and the devices are
    checked, so that a bad command line's first error is the same whichever backend it names.
    ``with_devices`` False (a parameter server, which holds no device arrays): no device check."""
    try:
        shapes = networks.get_shapes(config.network, image_shape=config.image_shape,
                                     num_classes=config.num_classes, num_layers=config.num_layers)
    except ValueError as exc:          # NetworkError, or a shape a network cannot take
        raise ConfigError(str(exc)) from None
    if networks.num_elements(shapes) > networks.MAX_ELEMENTS:
        raise ConfigError(f"{config.network} at these sizes (image shape "
                          f"{','.join(map(str, config.image_shape))}, {config.num_classes} classes)"
                          f" has more than 2^48 elements; no device holds that")
    devices = resolve(config.gpus, config.cpus) if with_devices else DeviceSet("cpu", (0,))
    store_cls = store_class(config)
    if store_cls.traits.needs_optimizer and config.optimizer == "none":
        raise UnsupportedError(f"--kv-store {config.kv_store} needs an optimizer: asynchronous "
                               "servers apply every push at once, which is only defined with one "
                               "(MXNet crashed here); add --optimizer sgd")
    if config.launch in ("graph", "auto") and not devices.is_cuda:
        raise UnsupportedError(f"--launch {config.launch} needs GPUs (CUDA graphs); CPU devices "
                               "run eager")
    schedule_cls = SCHEDULES.get(config.schedule)
    if schedule_cls is None:
        raise ConfigError(f"unknown --schedule {config.schedule!r}; valid: {', '.join(SCHEDULES)}")
    reason = schedule_cls.unavailable(config.kv_store)
    if reason:
        raise UnsupportedError(reason)
    if config.schedule != "flat" and config.backend != "toolkit":
        raise UnsupportedError(f"--schedule {config.schedule} runs on the toolkit's modes only, "
                               f"not --backend {config.backend} (MXNet's kvstore pushes as it "
                               "pleases)")
    reason = framework_unavailable(schedule_cls) if config.framework != "none" else None
    if reason:
        raise UnsupportedError(f"--framework {config.framework} cannot run here: {reason}")
    if config.launch == "graph" and not schedule_cls.graph_parts:
        raise UnsupportedError(f"--schedule {config.schedule} issues its parts eagerly (no CUDA "
                               "graph); leave --launch out or use --launch eager")
    devices, notes = one_gpu(config, devices, store_cls) if with_devices else (devices, ())
    reason = store_cls.unavailable(devices, config.dtype)
    if reason:
        raise UnsupportedError(f"--kv-store {config.kv_store} cannot run here: {reason}")
    plan = Plan(config, shapes, devices, store_cls, notes)
    if config.compute != "none" and config.graph_steps not in (None, 1):
        raise ConfigError("--graph-steps N queues N exchanges per iteration; a step with "
                          "--compute has one exchange: leave --graph-steps out")
    plan.compute                       # a compute file that does not match fails here
    if config.graph_steps is not None and with_devices:
        if not devices.is_cuda:        # no GPU visible: the default devices are CPU devices
            raise UnsupportedError("--graph-steps counts replays of a CUDA graph, and this run "
                                   "is on CPU devices (no GPU visible), which run eager: drop "
                                   "--graph-steps")
        if plan.schedule is not None:
            plan = replace(plan, notes=notes + (
                f"--graph-steps {config.graph_steps} does nothing here: a --schedule "
                f"{config.schedule} step is one step per timed iteration (its parts' graphs "
                "replayed once each)",))
        elif plan.launch == "eager":   # local, the parameter-server modes, an optimizer...
            plan = replace(plan, notes=notes + (
                f"--graph-steps {config.graph_steps} does nothing here: {config.kv_store} on "
                f"{devices.describe()} runs eager with these settings (no CUDA graph to "
                "replay)",))
    return plan


def check_memory(*plans: Plan) -> None:
    """Refuse, with the numbers, a run whose buffers do not fit. Several ``plans`` (the backends
    of one measurement, which ``run_together`` keeps in memory at once) add up."""
    first = plans[0]
    c, n = first.config, first.devices.n
    free = free_bytes(first.devices)
    if first.devices.is_cuda:
        # Replicas sharing a GPU (--gpus 0,0) each need their buffers on it; the expected sum
        # and the scratch are kept once per GPU. --graph-steps N is counted as N sets of buffers,
        # the most it can keep (nccl keeps one per replay; the other modes fewer, see
        # measurement/session.py); auto adds sets only within the memory it finds free.
        free_of = dict(zip(first.devices.ids, free))
        for gpu in sorted(set(first.devices.ids)):
            count = first.devices.ids.count(gpu)
            need = sum(count * _replica_bytes(plan) * _sets(plan) + _reference_bytes(plan)
                       + CHECK_SCRATCH_BYTES for plan in plans)
            have = free_of[gpu]
            label = f"cuda:{gpu}" + (f" ({count} replicas)" if count > 1 else "")
            if need > have:
                raise OutOfMemoryError(
                    f"{first.network_label} in {c.dtype} needs {need / 1e9:.2f} GB on {label} but "
                    f"only {have / 1e9:.2f} GB is free; use a smaller network or dtype"
                    + _batch_hint(first))
        return
    need = sum(host_bytes(plan) for plan in plans)
    if need > free[0]:
        raise OutOfMemoryError(
            f"{first.network_label} in {c.dtype} on {n} CPU devices needs {need / 1e9:.2f} GB "
            f"of host memory but only {free[0] / 1e9:.2f} GB is available; use fewer --cpus "
            "or a smaller network" + _batch_hint(first))


def _batch_hint(plan: Plan) -> str:
    """With --compute, what the batch's activations take of a replica's need."""
    if plan.compute is None:
        return ""
    activations = plan.compute.activation_nbytes(DTYPE_BYTES[plan.config.dtype])
    return (f", or a smaller --batch-size (the activations of batch {plan.config.batch_size} "
            f"take {activations / 1e9:.2f} GB per replica)")


def _replica_bytes(plan: Plan) -> int:
    """One replica's buffers: gradients, outputs and what the mode adds per device."""
    optimizer = plan.config.optimizer != "none"
    extra = 0 if plan.schedule is None else plan.schedule.extra_bytes_per_device(
        plan.nbytes, plan.devices.n, optimizer)
    if plan.schedule is not None and plan.config.framework != "none":
        extra += plan.schedule.framework_bytes(plan.nbytes, plan.devices.n)
    return 2 * plan.nbytes + extra + plan.store_cls.costs.extra_bytes_per_device(
        plan.nbytes, plan.devices.n, optimizer) + compute_bytes(plan)


def compute_bytes(plan: Plan) -> int:
    """One replica's compute (--compute): the activations a step keeps and the runner's work
    buffers (bandwidth.compute.runner)."""
    if plan.compute is None:
        return 0
    dtype_bytes = DTYPE_BYTES[plan.config.dtype]
    return (plan.compute.activation_nbytes(dtype_bytes)
            + work_bytes(plan.devices.kind, dtype_bytes))


def _sets(plan: Plan) -> int:
    """Sets of buffers a run keeps: --graph-steps N where steps are graph replays."""
    steps = plan.config.graph_steps
    if plan.schedule is not None:      # one step per iteration (measurement/session.py)
        return 1
    return steps if steps and plan.launch in ("graph", "auto") else 1


def _reference_bytes(plan: Plan) -> int:
    return 4 * plan.numel if plan.config.test_results else 0      # the float32 expected sum


def host_bytes(plan: Plan) -> int:
    """Host memory a run on CPU devices needs: every replica's buffers with the error check's,
    the mode's own host buffers (``staging_bytes``: none for ``local``, whose replicas are in host
    memory already, unless an optimizer keeps weights), and with one process per device each
    process's runtime."""
    n, nbytes = plan.devices.n, plan.nbytes
    need = n * (_replica_bytes(plan) + _reference_bytes(plan) + CHECK_SCRATCH_BYTES)
    need += plan.store_cls.costs.staging_bytes(nbytes, n, plan.config.optimizer != "none", False)
    if plan.store_cls.traits.process_per_device:
        need += n * (RANK_PROCESS_BYTES + RANK_NBYTES_FACTOR * nbytes)
    return int(need)


def size_line(shapes, dtype: str = "float32") -> str:
    """MXNet's line: the count and size of the arrays in MB of 1e6 bytes (MXNet: float32)."""
    size_mb = sum(math.prod(s) for _, s in shapes) * DTYPE_BYTES[dtype] / 1e6
    return f"num of arrays = {len(shapes)}, total size = {size_mb:f} MB"


def human_bytes(nbytes: int) -> str:
    """1048576 -> '1M', 1536 -> '1.5K' (powers of two, as nccl-tests' sizes)."""
    for unit, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if nbytes >= scale:
            return f"{nbytes / scale:g}{unit}"
    return f"{nbytes}B"
