"""``run(config)``: plan a measurement, carry it out (in this process, or in one process per device
when the mode needs it), add the flat all-reduce reference, and return one Result."""

from __future__ import annotations

import contextlib
import math
from dataclasses import asdict, dataclass, field, replace
from typing import Callable

import networks
from bandwidth import backends
from bandwidth.measurement import protocol
from bandwidth.ceiling.bounds import Bound, BoundCache, judged
from bandwidth.config.options import Config
from bandwidth.hardware.devices import DeviceSet, free_bytes, resolve
from bandwidth.hardware.environment import describe as describe_environment
from bandwidth.errors import ConfigError, OutOfMemoryError, UnsupportedError
from bandwidth.processes.group import LocalGroup
from bandwidth.ceiling.hostmatrix import HostCeiling
from bandwidth.stores.registry import KVSTORES, KVStore
from bandwidth.plan.layout import DTYPE_BYTES
from bandwidth.processes.lifeline import Watchdog
from bandwidth.measurement.protocol import Report, Sample, Summary
from bandwidth.measurement.session import Session, launch_of
from bandwidth.processes.spawn import run_ranks

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


def check_memory(*plans: Plan) -> None:
    """Refuse, with the numbers, a run whose buffers do not fit. Several ``plans`` (the backends
    of one measurement, which ``run_together`` keeps in memory at once) add up."""
    first = plans[0]
    c, n = first.config, first.devices.n
    free = free_bytes(first.devices)
    if first.devices.is_cuda:
        # Replicas sharing a GPU (--gpus 0,0) each need their buffers on it; the expected sum
        # and the scratch are kept once per GPU.
        free_of = dict(zip(first.devices.ids, free))
        for gpu in sorted(set(first.devices.ids)):
            count = first.devices.ids.count(gpu)
            need = sum(count * _replica_bytes(plan) + _reference_bytes(plan)
                       + CHECK_SCRATCH_BYTES for plan in plans)
            have = free_of[gpu]
            label = f"cuda:{gpu}" + (f" ({count} replicas)" if count > 1 else "")
            if need > have:
                raise OutOfMemoryError(
                    f"{first.network_label} in {c.dtype} needs {need / 1e9:.2f} GB on {label} but "
                    f"only {have / 1e9:.2f} GB is free; use a smaller network or dtype")
        return
    need = sum(host_bytes(plan) for plan in plans)
    if need > free[0]:
        raise OutOfMemoryError(
            f"{first.network_label} in {c.dtype} on {n} CPU devices needs {need / 1e9:.2f} GB "
            f"of host memory but only {free[0] / 1e9:.2f} GB is available; use fewer --cpus "
            "or a smaller network")


def _replica_bytes(plan: Plan) -> int:
    """One replica's buffers: gradients, outputs and what the mode adds per device."""
    return 2 * plan.nbytes + plan.store_cls.extra_bytes_per_device(
        plan.nbytes, plan.devices.n, plan.config.optimizer != "none")


def _reference_bytes(plan: Plan) -> int:
    return 4 * plan.numel if plan.config.test_results else 0      # the float32 expected sum


def host_bytes(plan: Plan) -> int:
    """Host memory a run on CPU devices needs: every replica's buffers with the error check's,
    the mode's own host buffers (``staging_bytes``: none for ``local``, whose replicas are in host
    memory already, unless an optimizer keeps weights), and with one process per device each
    process's runtime."""
    n, nbytes = plan.devices.n, plan.nbytes
    need = n * (_replica_bytes(plan) + _reference_bytes(plan) + CHECK_SCRATCH_BYTES)
    need += plan.store_cls.staging_bytes(nbytes, n, plan.config.optimizer != "none", False)
    if plan.store_cls.process_per_device:
        need += n * (RANK_PROCESS_BYTES + RANK_NBYTES_FACTOR * nbytes)
    return int(need)


def measure_task(plan: Plan, indices: list[int], group,
                 on_report: Callable[[Report], None] | None, *, cluster=None,
                 first_replica: int = 0, replicas: int | None = None) -> dict:
    """Measure this process's replicas (``first_replica`` onwards, of ``replicas`` in the job)."""
    session, notes = open_session(plan, indices, group, cluster=cluster,
                                  first_replica=first_replica, replicas=replicas)
    try:
        measured = measure_session(plan, session, on_report, replicas, notes,
                                   session.store.server_nbytes())
        measured["launch"] = session.launch
        return measured
    finally:
        session.close()


def open_session(plan: Plan, indices: list[int], group, *, cluster=None, first_replica: int = 0,
                 replicas: int | None = None) -> tuple[Session, list[str]]:
    """The toolkit's Session for this process's replicas, and its set-up notes."""
    c = plan.config
    session = Session(c.kv_store, plan.shapes, plan.devices, indices, group, dtype=c.dtype,
                      optimizer=c.optimizer, seed=c.seed, chunk_mb=c.chunk_mb,
                      cpu_threads=c.cpu_threads, check=c.test_results, cluster=cluster,
                      first_replica=first_replica, replicas=replicas, launch=plan.launch,
                      owners=c.owners)
    notes = session.store.notes() + [n for n in (session.graph_failure, session.launch_trial,
                                                 session.threads_note) if n]
    return session, notes


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
    if plan.store_cls.process_per_device:
        tasks = ["measure"] + (["reference"] if wants_reference(plan) else [])
        out = run_ranks({"config": config.to_dict(), "tasks": tasks,
                         "print_reports": on_report is not None}, n, config.timeout_s)
        measured, reference = out["measure"], out.get("reference")
    else:
        if config.backend == "mxnet":        # MXNet's own kvstore, every device in this process
            from bandwidth.backends import mxnet_session
            measured = mxnet_session.measure_task(plan, on_report)
        else:
            measured = measure_task(plan, list(range(n)), LocalGroup(), on_report)
        reference = flat_reference(plan)
    ref_summary = reference_summary(plan, reference, n)
    found = (bounds or BoundCache()).bound(plan, ref_summary) if config.reference else None
    return finished(plan, measured, ref_summary, found)


def can_run_together(plans: list[Plan]) -> bool:
    """Whether ``plans`` are one measurement under several backends that ``run_together`` can
    interleave: the same configuration but for --backend, each a mode of one process."""
    if len(plans) < 2 or len({p.config.backend for p in plans}) < len(plans):
        return False
    keys = {replace(p.config, backend="toolkit") for p in plans}
    return len(keys) == 1 and not any(p.store_cls.process_per_device or p.store_cls.distributed
                                      for p in plans)


def run_together(plans: list[Plan], bounds: BoundCache | None = None) -> list[Result]:
    """One measurement under several backends (``can_run_together``), their iterations
    interleaved in one process (protocol.measure_interleaved): iteration k of every backend runs
    back to back, the first one rotating, so that load from other processes and the host's state
    fall on all of them alike. The flat reference is measured once for all; on CPU devices the
    ceiling's probe runs before the iterations and again after them, and the faster probe is kept,
    so that a probe slowed by other processes at one moment cannot pass for the bound."""
    first = plans[0]
    c = first.config
    check_memory(*plans)
    bounds = bounds or BoundCache()
    probe_twice = c.reference and not first.devices.is_cuda
    if probe_twice:
        bounds.bound(first, None)          # a probe before the iterations (cached; see below)
    opened, stack = [], contextlib.ExitStack()
    with stack:
        for plan in plans:
            if plan.config.backend == "mxnet":
                from bandwidth.backends import mxnet_session
                stack.enter_context(mxnet_session.failures(plan.config.kv_store))
                session = mxnet_session.open_session(plan)
                notes = session.notes()
            else:
                session, notes = open_session(plan, list(range(first.devices.n)), LocalGroup())
            stack.callback(session.close)
            opened.append((session, notes))
        names = [p.config.backend for p in plans]
        with Watchdog(c.timeout_s, f"{c.kv_store} on {first.network_label} "
                                   f"({', '.join(names)} interleaved)") as dog:
            measured = protocol.measure_interleaved(
                [Kicking(session, dog) for session, _ in opened], iterations=c.num_batches,
                warmup=c.warmup, disp_batches=c.disp_batches, check=c.test_results,
                nbytes=first.nbytes,
                bus_factors=[p.store_cls.bus_factor(p.devices.n) for p in plans])
        launches = [getattr(session, "launch", None) for session, _ in opened]
    reference = reference_summary(first, flat_reference(first), first.devices.n)
    found = None
    if c.reference:
        found = bounds.probe_again(first, reference) if probe_twice else \
            bounds.bound(first, reference)
    results = []
    for plan, (_, notes), (samples, reports), launch in zip(plans, opened, measured, launches):
        others = [name for name in names if name != plan.config.backend]
        together = (f"iterations interleaved with {', '.join(others)}'s in this process (the "
                    "first of each iteration rotating)")
        results.append(finished(plan, {"samples": [asdict(x) for x in samples],
                                       "reports": [asdict(r) for r in reports],
                                       "notes": notes + [together], "launch": launch},
                                reference, found))
    return results


def wants_reference(plan: Plan) -> bool:
    # The reference is an NCCL all-reduce, one process per device: not for replicas sharing a GPU.
    return plan.config.reference and plan.devices.n > 1 and not plan.devices.shares_gpu


def flat_reference(plan: Plan) -> dict | None:
    """The toolkit's flat all-reduce of ``plan``'s bytes in one process per device, whatever the
    backend (None: not wanted here)."""
    if not wants_reference(plan):
        return None
    flat = replace(plan.config, backend="toolkit", gc_type="none")
    return run_ranks({"config": flat.to_dict(), "tasks": ["reference"], "print_reports": False},
                     plan.devices.n, plan.config.timeout_s)["reference"]


def finished(plan: Plan, measured: dict, reference: Summary | None,
             found: Bound | None) -> Result:
    """The Result of ``measured`` (a measure_session dict), judged against ``found``."""
    samples = [Sample(**s) for s in measured["samples"]]
    summary = Summary.of(samples, plan.nbytes, plan.store_cls.bus_factor(plan.devices.n))
    ceiling = None if found is None else judged(found, found.figure(summary),
                                                on_cpu=not plan.devices.is_cuda)
    return Result(plan=plan, environment=describe_environment(plan.devices), samples=samples,
                  reports=[Report(**r) for r in measured["reports"]], summary=summary,
                  reference=reference, ceiling=ceiling, notes=measured["notes"],
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
