"""What a step costs (``--compute``), measured in the same run as the exchange alone: the step's
compute alone (an infinitely fast network) and the step with both, through the one protocol
(warm-up discarded, device-synchronised, the slowest rank's time), their iterations interleaved
(``protocol.measure_interleaved``), then one untimed traced step for the timeline. Every replica
of this process computes on its own device (bandwidth.compute.runner); CPU devices of one process
take turns on its threads.

The step runs the schedule's events (bandwidth.schedules): the schedule's runner
(``schedules.runner.ScheduledStore``, the session's store) calls ``compute.slots.Slots`` for each
compute slot and around every event; under ``flat``, whose step is the mode's one operation, the
Slots run flat's events themselves: every unit's backward (last first), the exchange of all the
arrays, then every unit's forward (nothing overlaps). On GPUs a scheduled step and its compute
alone may each be one CUDA graph (compute.stepgraph: ``--launch graph``, or ``auto`` where its
trial steps are faster); the traced step then still runs a graph per part and per run of slots.
Where one process drives several GPUs, or a schedule's parts are not replayed from graphs
(``local``), and the slots are issued from graphs, the compute alone is one graph per GPU
(compute.stepgraph.AloneGraphs).

With ``--framework torch`` the same iterations interleave a third step: the schedule's step taken
by the framework itself (measurement.framework: DistributedDataParallel for ``ddp``, FSDP2 for
``fsdp``), over a module whose forward and backward run the same runners' compute.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict

from bandwidth.arrays.dtypes import DTYPE_BYTES
from bandwidth.compute.graphs import SlotGraphs
from bandwidth.compute.layers import unit_work
from bandwidth.compute.runner import Runner, large_matmul_rate
from bandwidth.compute.slots import Slots
from bandwidth.compute.stepgraph import (TRIAL_STEPS, AloneGraphs, StepGraphs,
                                         step_graph_unavailable)
from bandwidth.measurement import protocol
from bandwidth.measurement.framework import STEPS as FRAMEWORK_STEPS
from bandwidth.measurement.framework import SETUP_STEPS, framework_step
from bandwidth.plan.plan import Plan
from bandwidth.schedules.base import BACKWARD, FORWARD, Event, Schedule
from bandwidth.schedules.flat import Flat


class ComputeAlone:
    """The step's compute on every replica of this process, no exchange: every unit's backward,
    last first, then every unit's forward (the compute slots of a step, in a schedule's order)."""

    def __init__(self, session, runners: list[Runner], slots: Slots, events: list[Event],
                 graph=None):
        """``graph``: a CUDA graph replayed as the whole of each step (compute.stepgraph)."""
        self.session, self.runners, self.group = session, runners, session.group
        self.slots, self.graph = slots, graph
        self.events = [e for e in events if e.kind in (FORWARD, BACKWARD)]

    def prepare(self) -> None:
        pass

    def step(self) -> None:
        if self.graph is not None:
            self.graph.replay()
            return
        for event in self.events:
            self.slots(event)

    def synchronize(self) -> None:
        for runner in self.runners:
            runner.synchronize()

    def error(self) -> float:
        return -1.0


class StepWithCompute(ComputeAlone):
    """A training step: the schedule's events, compute slots and exchanges (checked as always)."""

    def __init__(self, session, runners: list[Runner], slots: Slots, events: list[Event],
                 graph=None):
        super().__init__(session, runners, slots, events, graph)
        self.events = events

    def prepare(self) -> None:
        self.session.prepare()

    def step(self) -> None:
        if self.graph is not None:                       # one replay: the session's step
            self.session.step(graph=self.graph)
            return
        store = self.session.store
        if getattr(store, "events", None) is None:       # flat: the mode's one operation
            self.slots.run(self.events, self.session.step)
            return
        store.compute, store.on_event = self.slots, self.slots.on_event
        try:                                             # the schedule's runner runs the events
            self.session.step()
        finally:
            store.compute = store.on_event = None

    def synchronize(self) -> None:
        super().synchronize()
        self.session.synchronize()

    def error(self) -> float:
        return self.session.error()


def exchange_steps(plan: Plan) -> int:
    """Exchanges a worker's measurement takes (a parameter server serves this many): the
    exchange alone's warm-up and iterations, and with --compute as many steps with compute and
    the traced one (and with --framework, the framework's steps, set-up ones included)."""
    c = plan.config
    alone = c.warmup + c.num_batches
    if plan.compute is None:
        return alone
    # the framework's steps move the bytes of the schedule's (DDP's buckets, FSDP2's units)
    framework = alone + SETUP_STEPS if c.framework != "none" else 0
    return 2 * alone + 1 + framework


def schedule_of(plan: Plan) -> Schedule:
    """The step's schedule (--schedule); ``flat``'s events where the plan has none (every unit's
    backward, the mode's one exchange of all the arrays, every unit's forward)."""
    return plan.schedule or Flat(plan.shapes, DTYPE_BYTES[plan.config.dtype])


def measure_costs(plan: Plan, session, kick, say=None) -> dict:
    """Compute alone, the step, the rates and one step's timeline, as a plain dict; with
    ``--framework``, the framework's step too (measurement.framework), its iterations
    interleaved with the other two. ``kick`` wraps a session so that the watchdog sees each
    iteration (tasks.Kicking); ``say(stage)``, where given, tells each stage as it starts (they
    take minutes on a large network on CPUs)."""
    say = say or (lambda message: None)
    c = plan.config
    schedule = schedule_of(plan)
    units = unit_work(plan.compute, [(u.name, u.keys) for u in schedule.units], plan.shapes)
    runners = [Runner(plan.compute, r.device, c.dtype, units) for r in session.replicas]
    slots = Slots(runners, [part.label for part in schedule.parts])
    events = schedule.events()
    framework = None
    try:
        say(f"--compute: calibrating the compute of {len(units)} units on "
            f"{len(runners)} replica(s)")
        rates = [runner.calibrate() for runner in runners]
        whole, alone_graph, compute_launch = choose_launch(plan, session, runners, slots, events)
        say("--compute: the large matrix product's rate (the device's reference)")
        large = large_matmul_rate(runners[0].device, c.dtype)
        steps = [kick(ComputeAlone(session, runners, slots, events, alone_graph)),
                 kick(StepWithCompute(session, runners, slots, events, whole and whole.step))]
        if c.framework != "none":
            say(f"--framework {c.framework}: the {schedule.name} schedule's step through "
                f"{FRAMEWORK_STEPS[schedule.name].wraps}, {SETUP_STEPS} untimed steps to set up")
            framework = framework_step(plan, session, runners[0])
            steps.append(kick(framework))
        say(f"--compute: the step with compute and the compute alone"
            f"{' and the framework' if framework else ''}'s step, {c.warmup} + "
            f"{c.num_batches} iterations each, interleaved")
        # Interleaved, iteration by iteration, the first rotating: load from other processes
        # falls on each alike (protocol.measure_interleaved).
        measured = protocol.measure_interleaved(
            steps, iterations=c.num_batches, warmup=c.warmup, disp_batches=c.num_batches,
            check=c.test_results, nbytes=plan.nbytes, bus_factors=[0.0] * len(steps))
        alone, step = measured[0][0], measured[1][0]
        say("--compute: one traced step (the timeline)")
        timeline = trace(StepWithCompute(session, runners, slots, events), session)
        alone_own = sorted(s.own_seconds for s in alone)[len(alone) // 2]
        out = {"compute_samples": [asdict(s) for s in alone],
               "step_samples": [asdict(s) for s in step],
               "timeline": timeline, "schedule": schedule.name,
               "step_flops": sum(runner.step_flops for runner in runners),
               # per device, as the large product's: replicas on separate GPUs compute at once
               # (two H100s read 156 % of one H100's rate), replicas sharing one take turns
               "compute_rate_flops": sum(r.step_flops for r in runners) / alone_own
               / len({str(r.device) for r in runners}) if alone_own > 0 else 0.0,
               "calibrated_rate_flops": min(rates),
               "large_matmul_rate_flops": large,
               "device_type": runners[0].device.type, "compute_launch": compute_launch}
        if framework is not None:
            out["framework"] = {"name": framework.name, "wraps": framework.wraps,
                                "notes": framework.notes(),
                                "samples": [asdict(s) for s in measured[2][0]]}
        return out
    finally:
        if framework is not None:
            framework.close()
        for runner in runners:
            runner.close()


def choose_launch(plan: Plan, session, runners: list[Runner], slots: Slots,
                  events: list[Event]) -> tuple:
    """How the compute is issued (--launch): (the step graph or None, the compute alone's graph
    or None, the summary's word for it); sets ``slots.graphs`` where runs of slots replay."""
    c = plan.config
    compute_launch = "eager"
    if c.host_ms is not None:               # the host's time to issue it: no graph replays
        return None, None, "eager (--host-ms)"
    if runners[0].kind == "cuda" and not runners[0].waits and c.launch != "eager":
        graphs = SlotGraphs(runners, events)  # the host issues a run of slots in one launch
        alone = ComputeAlone(session, runners, slots, events)
        if c.launch == "graph" or graphs.faster(alone, slots):
            slots.graphs, compute_launch = graphs, "graph"
    whole = None
    if step_graph_unavailable(session, runners) is None:
        whole = StepGraphs(session, runners)    # a step, and its compute alone: one replay
        if c.launch == "graph" or whole_is_faster(plan, session, runners, slots, events, whole):
            compute_launch = "step graph"
        else:
            whole = None
    alone_graph = whole and whole.alone
    # Several GPUs, or a schedule's many runs of slots that are not one graph with their
    # exchanges (local): the compute alone as one replay per GPU. flat's two runs stay two.
    if alone_graph is None and compute_launch == "graph" \
            and (len({r.device for r in runners}) > 1 or len(schedule_of(plan).parts) > 1):
        alone_graph = AloneGraphs(runners, events)
        compute_launch = "graph per GPU"
    return whole, alone_graph, compute_launch


def whole_is_faster(plan: Plan, session, runners: list[Runner], slots: Slots,
                    events: list[Event], whole: StepGraphs) -> bool:
    """``--launch auto``: whether steps with compute run faster as one replay of ``whole`` than
    as before (a graph per part, the compute as ``slots`` issues it): TRIAL_STEPS untimed steps
    each way after one of each, interleaved, the slowest rank's medians. They are the session's
    steps (counted for the error check, which stays exact); only single-host modes capture
    their parts, so no parameter server counts them (``exchange_steps``)."""
    (one, _), (parts, _) = protocol.measure_interleaved(
        [StepWithCompute(session, runners, slots, events, whole.step),
         StepWithCompute(session, runners, slots, events)],
        iterations=TRIAL_STEPS, warmup=1, disp_batches=TRIAL_STEPS, check=False,
        nbytes=plan.nbytes, bus_factors=[0.0, 0.0])
    return (statistics.median(s.seconds for s in one)
            < statistics.median(s.seconds for s in parts))


def trace(step: StepWithCompute, session) -> list[dict]:
    """One untimed step with every unit's compute and every exchange marked: [{device, on, lane,
    label, start_s, end_s}] (``on``: the physical device the replica runs on), seconds from the
    step's start on each device's clock (a GPU's events on its stream, CPU devices'
    perf_counter)."""
    step.prepare()
    step.synchronize()
    for runner in step.runners:
        runner.clear_marks()
    origins = [runner.mark() for runner in step.runners]
    step.slots.tracing = True
    try:
        step.step()
    finally:
        step.slots.tracing = False
    step.synchronize()
    events = []
    for replica, runner, origin in zip(session.replicas, step.runners, origins):
        device = f"replica {replica.rank} ({runner.device})"      # GPUs may hold several
        events += [{"device": device, "on": str(runner.device), "lane": lane, "label": label,
                    "start_s": start, "end_s": end}
                   for label, start, end, lane in runner.marked_seconds(origin)]
        runner.clear_marks()
    return events
