"""One process's measurement as a plain dict (what crosses processes): the mode's task on this
process's replicas (``measure_task``), the protocol on a ready session of any backend
(``measure_session``), and the flat all-reduce reference (``reference_task``)."""

from __future__ import annotations

import sys
from dataclasses import asdict
from typing import Callable

from bandwidth.measurement import protocol
from bandwidth.measurement.costs import measure_costs
from bandwidth.measurement.protocol import Report, Sample, Summary
from bandwidth.measurement.session import Session
from bandwidth.plan.launching import launch_of, schedule_launch_note
from bandwidth.plan.plan import Plan
from bandwidth.progress import Stages
from bandwidth.textformat import format_bytes
from bandwidth.launch.supervision.lifeline import Watchdog
from bandwidth.stores.registry import KVSTORES


def say(message: str) -> None:
    """A stage of a long measurement, on stderr (the process that reports says it)."""
    print(f"# {message}", file=sys.stderr, flush=True)


def measure_task(plan: Plan, indices: list[int], group,
                 on_report: Callable[[Report], None] | None, *, cluster=None,
                 first_replica: int = 0, replicas: int | None = None,
                 stages: Stages | None = None) -> dict:
    """Measure this process's replicas (``first_replica`` onwards, of ``replicas`` in the job).
    ``stages``: where a long wait says what it is doing (the fill, the warm-up, an iteration)."""
    if stages is not None:
        stages.enter(f"setting up: filling {format_bytes(plan.nbytes * len(indices))} of "
                     f"arrays on {len(indices)} device{'s' if len(indices) > 1 else ''}")
    session, notes = open_session(plan, indices, group, cluster=cluster,
                                  first_replica=first_replica, replicas=replicas)
    try:
        c = plan.config
        staged = session if stages is None else Staged(session, stages, c.warmup, c.num_batches)
        measured = measure_session(plan, staged, on_report, replicas, notes,
                                   session.store.server_nbytes)
        if stages is not None:
            stages.enter(None)          # what follows (--compute, the reference) says itself
        measured["launch"] = session.launch
        measured["graph_steps"] = session.graph_steps        # 1 unless replays are queued
        measured["cpu_threads"] = session.cpu_threads_used
        # A parameter-server worker's time with each server in every measured step (its rate
        # with each peer; bandwidth.stores.peerwait): the last num_batches steps so far.
        peers = getattr(session.store, "peer_seconds", None)
        if peers:
            measured["peer_seconds"] = [[list(pair) for pair in step]
                                        for step in peers[-plan.config.num_batches:]]
        if plan.compute is not None:
            c = plan.config
            with Watchdog(c.timeout_s, f"{c.kv_store} on {plan.network_label} with compute") as dog:
                measured["costs"] = measure_costs(plan, session, lambda s: Kicking(s, dog),
                                                  say=say if on_report is not None else None)
            framework = measured["costs"].get("framework")
            if framework is not None:
                measured["notes"] = measured["notes"] + framework["notes"]
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
                      owners=c.owners, graph_steps=1 if plan.compute else c.graph_steps,
                      schedule=plan.schedule)
    schedule_note = None if plan.schedule is None else schedule_launch_note(
        plan.schedule, plan.store_cls, plan.devices, c.launch, c.optimizer,
        session.graph is not None)
    notes = session.store.notes() + [n for n in (schedule_note, session.graph_failure,
                                                 session.launch_trial, session.graph_note,
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
            on_report=on_report, bus_factor=plan.bus_factor(
                plan.store_cls.costs.counted_devices(plan.devices.n, replicas or plan.devices.n)))
    return {"samples": [asdict(s) for s in samples], "reports": [asdict(r) for r in reports],
            "notes": notes, "server_nbytes": list(server_nbytes or [])}


class Staged:
    """``session`` whose untimed ``prepare`` and ``error`` tell ``stages`` (bandwidth.progress)
    what the iteration is doing: on CPU devices a warm-up or an error check of a large network
    takes seconds, and the set-up before ``iter 1`` tens of them. The timed step is untouched."""

    def __init__(self, session, stages: Stages, warmup: int, iterations: int):
        self._session, self._stages = session, stages
        self._warmup, self._iterations, self._done = warmup, iterations, 0

    def prepare(self) -> None:
        self._done += 1
        self._say("the step and its untimed set-up")     # a worker refills what the pull overwrote
        self._session.prepare()

    def error(self) -> float:
        self._say("checking the result")
        return self._session.error()

    def _say(self, what: str) -> None:
        i, warmup = self._done, self._warmup
        name = (f"warming up ({i} of {warmup})" if i <= warmup
                else f"iteration {i - warmup} of {self._iterations}")
        self._stages.enter(f"{name}: {what}", i - 1, warmup + self._iterations)

    def __getattr__(self, name: str):
        return getattr(self._session, name)


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


def reference_task(plan: Plan, indices: list[int], group, replicas: int | None = None,
                   say: Callable[[str], None] | None = None) -> dict:
    """The same bytes as one flat array through the nccl mode (a torch.distributed all-reduce)
    over the same processes; ``replicas``: the devices in the all-reduce (default: this host's).
    ``say``: where the stage is announced (the process that reports)."""
    c = plan.config
    if say is not None:
        say(reference_stage(replicas or plan.devices.n))
    session = Session("nccl", [("flat", (plan.numel,))], plan.devices, indices, group,
                      dtype=c.dtype, optimizer="none", seed=c.seed, chunk_mb=c.chunk_mb, check=False,
                      launch=launch_of(KVSTORES["nccl"], plan.devices, c.launch),
                      graph_steps=c.graph_steps)
    try:
        with Watchdog(c.timeout_s, f"the flat all-reduce reference of {plan.network_label}") as dog:
            samples, _ = protocol.measure(
                Kicking(session, dog), iterations=c.num_batches, warmup=c.warmup,
                disp_batches=c.num_batches, check=False, nbytes=plan.nbytes,
                bus_factor=KVSTORES["nccl"].costs.bus_factor(replicas or plan.devices.n))
    finally:
        session.close()
    return {"samples": [asdict(s) for s in samples]}


def reference_stage(n: int) -> str:
    """The line that announces the reference (seconds on CPU devices: its processes start, fill
    the bytes and reduce them)."""
    return f"reference: one flat all-reduce of the same bytes over {n} processes ..."


def reference_summary(plan: Plan, reference: dict | None, n: int) -> Summary | None:
    """The Summary of ``reference_task``'s output (None: not measured), for an all-reduce over
    ``n`` devices."""
    if reference is None:
        return None
    return Summary.of([Sample(**s) for s in reference["samples"]], plan.nbytes,
                      KVSTORES["nccl"].costs.bus_factor(n))
