"""``run(config)``, the pipeline of one measurement, top to bottom: plan it and check that it fits
(bandwidth.plan), carry it out through its backend (bandwidth.backends.engines: in this process,
or one process per device through bandwidth.processes), add the flat all-reduce reference of the
same bytes, judge it against its ceiling (bandwidth.ceiling.bounds), and return one Result
(bandwidth.results.result) for the report to render."""

from __future__ import annotations

import contextlib
from dataclasses import asdict, replace
from typing import Callable

from bandwidth.backends import engines
from bandwidth.backends.registry import store_class
from bandwidth.ceiling.bounds import Bound, BoundCache, judged
from bandwidth.config.options import Config
from bandwidth.hardware.environment import describe as describe_environment
from bandwidth.measurement import protocol
from bandwidth.measurement.protocol import Report, Sample, Summary
from bandwidth.measurement.tasks import Kicking, reference_stage, reference_summary, say
from bandwidth.plan.plan import Plan, check_memory, make_plan
from bandwidth.launch.supervision.lifeline import Watchdog
from bandwidth.processes.spawn import run_ranks
from bandwidth.results.costs import step_costs
from bandwidth.results.result import Result


def run(config: Config, on_report: Callable[[Report], None] | None = None,
        plan: Plan | None = None, bounds: BoundCache | None = None) -> Result:
    """Measure ``config``. ``on_report`` receives each MXNet-style report as it happens (in a run of
    one process per device, rank 0 prints them itself instead). ``bounds``: the ceilings of a
    sweep, measured once per mode kind and device set (default: this configuration's own)."""
    plan = plan or make_plan(config, store_class)
    check_memory(plan)
    n = plan.devices.n
    if plan.store_cls.traits.process_per_device:
        tasks = ["measure"] + (["reference"] if wants_reference(plan) else [])
        out = run_ranks({"config": config.to_dict(), "tasks": tasks,
                         "print_reports": on_report is not None}, n, config.timeout_s)
        measured, reference = out["measure"], out.get("reference")
    else:
        measured = engines.engine(config).measure_here(plan, on_report)
        reference = flat_reference(plan, say if on_report is not None else None)
    ref_summary = reference_summary(plan, reference, n)
    found = (bounds or BoundCache()).bound(plan, ref_summary) if config.reference else None
    return finished(plan, measured, ref_summary, found)


def can_run_together(plans: list[Plan]) -> bool:
    """Whether ``plans`` are one measurement under several backends that ``run_together`` can
    interleave: the same configuration but for --backend, each a mode of one process."""
    if len(plans) < 2 or len({p.config.backend for p in plans}) < len(plans):
        return False
    keys = {replace(p.config, backend="toolkit") for p in plans}
    return len(keys) == 1 and not any(p.store_cls.traits.process_per_device
                                      or p.store_cls.traits.distributed for p in plans)


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
            session, notes = engines.engine(plan.config).open_here(plan, stack)
            stack.callback(session.close)
            opened.append((session, notes))
        names = [p.config.backend for p in plans]
        with Watchdog(c.timeout_s, f"{c.kv_store} on {first.network_label} "
                                   f"({', '.join(names)} interleaved)") as dog:
            measured = protocol.measure_interleaved(
                [Kicking(session, dog) for session, _ in opened], iterations=c.num_batches,
                warmup=c.warmup, disp_batches=c.disp_batches, check=c.test_results,
                nbytes=first.nbytes,
                bus_factors=[p.bus_factor(p.devices.n) for p in plans])
        launches = [getattr(session, "launch", None) for session, _ in opened]
        steps = [getattr(session, "graph_steps", 1) for session, _ in opened]
    reference = reference_summary(first, flat_reference(first), first.devices.n)
    found = None
    if c.reference:
        found = bounds.probe_again(first, reference) if probe_twice else \
            bounds.bound(first, reference)
    results = []
    for plan, (_, notes), (samples, reports), launch, graph_steps in zip(plans, opened, measured,
                                                                         launches, steps):
        others = [name for name in names if name != plan.config.backend]
        together = (f"iterations interleaved with {', '.join(others)}'s in this process (the "
                    "first of each iteration rotating)")
        results.append(finished(plan, {"samples": [asdict(x) for x in samples],
                                       "reports": [asdict(r) for r in reports],
                                       "notes": notes + [together], "launch": launch,
                                       "graph_steps": graph_steps},
                                reference, found))
    return results


def wants_reference(plan: Plan) -> bool:
    # The reference is an NCCL all-reduce, one process per device: not for replicas sharing a GPU.
    return plan.config.reference and plan.devices.n > 1 and not plan.devices.shares_gpu


def flat_reference(plan: Plan, say: Callable[[str], None] | None = None) -> dict | None:
    """The toolkit's flat all-reduce of ``plan``'s bytes in one process per device, whatever the
    backend (None: not wanted here); ``say`` announces it."""
    if not wants_reference(plan):
        return None
    if say is not None:
        say(reference_stage(plan.devices.n))
    flat = replace(plan.config, backend="toolkit", gc_type="none")
    return run_ranks({"config": flat.to_dict(), "tasks": ["reference"], "print_reports": False},
                     plan.devices.n, plan.config.timeout_s)["reference"]


def finished(plan: Plan, measured: dict, reference: Summary | None,
             found: Bound | None) -> Result:
    """The Result of ``measured`` (a measure_session dict), judged against ``found``."""
    samples = [Sample(**s) for s in measured["samples"]]
    summary = Summary.of(samples, plan.nbytes, plan.bus_factor(plan.devices.n))
    ceiling = None if found is None else judged(found, found.figure(summary),
                                                on_cpu=not plan.devices.is_cuda)
    return Result(plan=plan, environment=describe_environment(plan.devices), samples=samples,
                  reports=[Report(**r) for r in measured["reports"]], summary=summary,
                  reference=reference, ceiling=ceiling, notes=measured["notes"],
                  launch=measured.get("launch"), cpu_threads=measured.get("cpu_threads"),
                  graph_steps=measured.get("graph_steps") or 1,
                  costs=step_costs(measured, summary.seconds_median, plan.config.batch_size,
                                   plan.devices.n))
