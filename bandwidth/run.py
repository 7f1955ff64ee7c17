"""``run(config)``: plan a measurement, carry it out (in this process, or in one process per device
when the mode needs it), add the flat all-reduce reference, and return one Result."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from typing import Callable

import networks
from bandwidth import backends, protocol
from bandwidth.bounds import Bound, BoundCache, judged
from bandwidth.config import Config
from bandwidth.devices import DeviceSet, free_bytes, resolve
from bandwidth.environment import describe as describe_environment
from bandwidth.errors import ConfigError, OutOfMemoryError, UnsupportedError
from bandwidth.group import LocalGroup
from bandwidth.hostceiling import HostCeiling
from bandwidth.kvstores import KVSTORES, KVStore
from bandwidth.layout import DTYPE_BYTES
from bandwidth.lifeline import Watchdog
from bandwidth.protocol import Report, Sample, Summary
from bandwidth.session import Session, launch_of
from bandwidth.spawn import run_ranks

# Scratch for the chunked data generation and error check (int64 and float64 temporaries).
CHECK_SCRATCH_BYTES = 6 * 8 * (1 << 22)
# Resident memory of one rank process beyond its arrays (the torch runtime, Gloo's threads).
RANK_PROCESS_BYTES = 330 * 1000 * 1000


@dataclass(frozen=True)
class Plan:
    config: Config
    shapes: list[tuple[str, tuple[int, ...]]]
    devices: DeviceSet
    store_cls: type[KVStore]

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
    def launch(self) -> str:
        """How the mode's steps are issued here: "graph" or "eager" (session.launch_of)."""
        return launch_of(self.store_cls, self.devices, self.config.launch, self.config.optimizer)


@dataclass(frozen=True)
class WorkerTraffic:
    """One worker's line in a distributed run's summary, gathered to the first worker. Rates use
    the worker's own median step time (the summary takes the slowest worker of each step)."""

    worker: int
    seconds_median: float
    busbw_median: float                  # MXNet's GB/sec per gpu from that time
    network_nbytes: float                # sent per step, and as many received (KVStore's rule)
    server_nbytes: tuple[int, ...] = ()  # of which to and from each server (empty: no servers)

    @property
    def network_gbps(self) -> float:
        return self.network_nbytes / self.seconds_median / 1e9

    def server_gbps(self) -> list[float]:
        return [nbytes / self.seconds_median / 1e9 for nbytes in self.server_nbytes]


@dataclass
class Result:
    plan: Plan
    environment: dict
    samples: list[Sample]
    reports: list[Report]
    summary: Summary
    reference: Summary | None
    ceiling: Bound | None = None
    notes: list[str] = field(default_factory=list)
    workers: list[WorkerTraffic] = field(default_factory=list)   # distributed modes only
    worker_hosts: list[str] = field(default_factory=list)   # distributed: each worker's host
    server_hosts: list[str] = field(default_factory=list)   # and each server's, as launched
    host_ceiling: HostCeiling | None = None            # --network-ceiling's figures
    launch: str | None = None          # how the steps were issued (None: as plan.launch says)
    link_bound: object = None                           # --link-rate: a linkbound.LinkBound

    @property
    def pct_of_ceiling(self) -> float | None:
        """None where there is no ceiling, or it is not a bound (Bound.not_a_bound)."""
        return None if self.ceiling is None else self.ceiling.pct(
            self.ceiling.figure(self.summary))


def make_plan(config: Config, with_devices: bool = True) -> Plan:
    """Check everything that can be checked before allocating: network, devices, mode.
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
    store_cls = backends.store_class(config)
    if store_cls.needs_optimizer and config.optimizer == "none":
        raise UnsupportedError(f"--kv-store {config.kv_store} needs an optimizer: asynchronous "
                               "servers apply every push at once, which is only defined with one "
                               "(MXNet crashed here); add --optimizer sgd")
    if config.launch in ("graph", "auto") and not devices.is_cuda:
        raise UnsupportedError(f"--launch {config.launch} needs GPUs (CUDA graphs); CPU devices "
                               "run eager")
    reason = store_cls.unavailable(devices, config.dtype)
    if reason:
        raise UnsupportedError(f"--kv-store {config.kv_store} cannot run here: {reason}")
    return Plan(config, shapes, devices, store_cls)


def check_memory(plan: Plan) -> None:
    """Refuse, with the numbers, a run whose buffers do not fit."""
    c, n, nbytes = plan.config, plan.devices.n, plan.nbytes
    reference = 4 * plan.numel if c.test_results else 0      # the float32 expected sum
    replica_bytes = 2 * nbytes + plan.store_cls.extra_bytes_per_device(
        nbytes, n, c.optimizer != "none")
    per_device = replica_bytes + reference + CHECK_SCRATCH_BYTES
    free = free_bytes(plan.devices)
    if plan.devices.is_cuda:
        # Replicas sharing a GPU (--gpus 0,0) each need their buffers on it; the expected sum
        # and the scratch are kept once per GPU.
        free_of = dict(zip(plan.devices.ids, free))
        for gpu in sorted(set(plan.devices.ids)):
            count = plan.devices.ids.count(gpu)
            need = count * replica_bytes + reference + CHECK_SCRATCH_BYTES
            have = free_of[gpu]
            label = f"cuda:{gpu}" + (f" ({count} replicas)" if count > 1 else "")
            if need > have:
                raise OutOfMemoryError(
                    f"{plan.network_label} in {c.dtype} needs {need / 1e9:.2f} GB on {label} but "
                    f"only {have / 1e9:.2f} GB is free; use a smaller network or dtype")
    else:
        need = per_device * n + (n + 2) * nbytes    # the local mode's host buffers on top
        if plan.store_cls.process_per_device:
            # one process per device: each its own torch runtime and Gloo's working buffer
            # (vgg-16 on 2 CPU devices used 1.2 GB more than the buffers alone)
            need += n * (RANK_PROCESS_BYTES + nbytes // 2)
        if need > free[0]:
            raise OutOfMemoryError(
                f"{plan.network_label} in {c.dtype} on {n} CPU devices needs {need / 1e9:.2f} GB "
                f"of host memory but only {free[0] / 1e9:.2f} GB is available; use fewer --cpus "
                "or a smaller network")


def measure_task(plan: Plan, indices: list[int], group,
                 on_report: Callable[[Report], None] | None, *, cluster=None,
                 first_replica: int = 0, replicas: int | None = None) -> dict:
    """Measure this process's replicas (``first_replica`` onwards, of ``replicas`` in the job)."""
    c = plan.config
    session = Session(c.kv_store, plan.shapes, plan.devices, indices, group, dtype=c.dtype,
                      optimizer=c.optimizer, seed=c.seed, chunk_mb=c.chunk_mb,
                      cpu_threads=c.cpu_threads, check=c.test_results, cluster=cluster,
                      first_replica=first_replica, replicas=replicas, launch=plan.launch,
                      owners=c.owners)
    notes = session.store.notes() + [n for n in (session.graph_failure, session.launch_trial) if n]
    try:
        measured = measure_session(plan, session, on_report, replicas, notes,
                                   session.store.server_nbytes())
        measured["launch"] = session.launch
        return measured
    finally:
        session.close()


def measure_session(plan: Plan, session, on_report: Callable[[Report], None] | None,
                    replicas: int | None, notes: list[str],
                    server_nbytes: list[int] | None = None) -> dict:
    """The protocol on a ready session (this toolkit's, or another backend's), as a plain dict.
    ``server_nbytes``: what this worker pushes to each parameter server per step, if any."""
    c = plan.config
    with Watchdog(c.timeout_s, f"{c.kv_store} on {plan.network_label}") as dog:
        samples, reports = protocol.measure(
            Kicking(session, dog), iterations=c.num_batches, warmup=c.warmup,
            disp_batches=c.disp_batches, check=c.test_results, nbytes=plan.nbytes,
            on_report=on_report, bus_factor=plan.store_cls.bus_factor(
                plan.store_cls.counted_devices(plan.devices.n, replicas or plan.devices.n)))
    return {"samples": [asdict(s) for s in samples], "reports": [asdict(r) for r in reports],
            "notes": notes, "server_nbytes": list(server_nbytes or [])}


class Kicking:
    """``session`` whose untimed ``prepare`` (once per iteration) tells ``watchdog`` that the
    previous iteration completed: ``--timeout`` bounds each iteration, in every mode."""

    def __init__(self, session, watchdog: Watchdog):
        self._session, self._watchdog, self._iteration = session, watchdog, 0

    def prepare(self) -> None:
        self._iteration += 1
        self._watchdog.kick(f"iteration {self._iteration} (warm-up included)")
        self._session.prepare()

    def __getattr__(self, name: str):
        return getattr(self._session, name)


def reference_task(plan: Plan, indices: list[int], group, replicas: int | None = None) -> dict:
    """The same bytes as one flat array through the nccl mode (a torch.distributed all-reduce)
    over the same processes; ``replicas``: the devices in the all-reduce (default: this host's)."""
    c = plan.config
    session = Session("nccl", [("flat", (plan.numel,))], plan.devices, indices, group,
                      dtype=c.dtype, optimizer="none", seed=c.seed, chunk_mb=c.chunk_mb, check=False,
                      launch=launch_of(KVSTORES["nccl"], plan.devices, c.launch))
    try:
        with Watchdog(c.timeout_s, f"the flat all-reduce reference of {plan.network_label}") as dog:
            samples, _ = protocol.measure(
                Kicking(session, dog), iterations=c.num_batches, warmup=c.warmup,
                disp_batches=c.num_batches, check=False, nbytes=plan.nbytes,
                bus_factor=KVSTORES["nccl"].bus_factor(replicas or plan.devices.n))
    finally:
        session.close()
    return {"samples": [asdict(s) for s in samples]}


def run(config: Config, on_report: Callable[[Report], None] | None = None,
        plan: Plan | None = None, bounds: BoundCache | None = None) -> Result:
    """Measure ``config``. ``on_report`` receives each MXNet-style report as it happens (in a run of
    one process per device, rank 0 prints them itself instead). ``bounds``: the ceilings of a
    sweep, measured once per mode kind and device set (default: this configuration's own)."""
    plan = plan or make_plan(config)
    check_memory(plan)
    n = plan.devices.n
    # The reference is an NCCL all-reduce, one process per device: not for replicas sharing a GPU.
    want_reference = config.reference and n > 1 and not plan.devices.shares_gpu
    if plan.store_cls.process_per_device:
        tasks = ["measure"] + (["reference"] if want_reference else [])
        out = run_ranks({"config": config.to_dict(), "tasks": tasks,
                         "print_reports": on_report is not None}, n, config.timeout_s)
        measured, reference = out["measure"], out.get("reference")
    else:
        if config.backend == "mxnet":        # MXNet's own kvstore, every device in this process
            from bandwidth.backends import mxnet_session
            measured = mxnet_session.measure_task(plan, on_report)
        else:
            measured = measure_task(plan, list(range(n)), LocalGroup(), on_report)
        reference = None
        if want_reference:                   # the toolkit's flat all-reduce, whatever the backend
            flat = replace(config, backend="toolkit", gc_type="none")
            reference = run_ranks({"config": flat.to_dict(), "tasks": ["reference"],
                                   "print_reports": False}, n, config.timeout_s)["reference"]
    samples = [Sample(**s) for s in measured["samples"]]
    factor = plan.store_cls.bus_factor(n)
    ref_summary = reference_summary(plan, reference, n)
    summary = Summary.of(samples, plan.nbytes, factor)
    ceiling = None
    if config.reference:
        found = (bounds or BoundCache()).bound(plan, ref_summary)
        ceiling = None if found is None else judged(found, found.figure(summary),
                                                    on_cpu=not plan.devices.is_cuda)
    return Result(plan=plan, environment=describe_environment(plan.devices), samples=samples,
                  reports=[Report(**r) for r in measured["reports"]], summary=summary,
                  reference=ref_summary, ceiling=ceiling, notes=measured["notes"],
                  launch=measured.get("launch"))


def reference_summary(plan: Plan, reference: dict | None, n: int) -> Summary | None:
    """The Summary of ``reference_task``'s output (None: not measured), for an all-reduce over
    ``n`` devices."""
    if reference is None:
        return None
    return Summary.of([Sample(**s) for s in reference["samples"]], plan.nbytes,
                      KVSTORES["nccl"].bus_factor(n))


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
