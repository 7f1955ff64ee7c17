"""What a step costs (``--compute``), measured in the same run as the exchange alone: the step's
compute alone (an infinitely fast network) and the step with both, each through the one protocol
(``protocol.measure``: warm-up discarded, device-synchronised, the slowest rank's time), then one
untimed traced step for the timeline. Every replica of this process computes on its own device
(bandwidth.compute.runner); CPU devices of one process take turns on its threads.

The step here is the flat schedule's: every layer's forward, every layer's backward, then the
exchange of all the arrays (nothing overlaps). A schedule stage that orders the exchange of
parts of the arrays between the layers' compute replaces ``StepWithCompute.step``.
"""

from __future__ import annotations

from dataclasses import asdict

from bandwidth.compute.runner import Runner, large_matmul_rate
from bandwidth.measurement import protocol
from bandwidth.plan.plan import Plan


class ComputeAlone:
    """The step's compute on every replica of this process, no exchange."""

    def __init__(self, session, runners: list[Runner]):
        self.session, self.runners, self.group = session, runners, session.group

    def prepare(self) -> None:
        pass

    def step(self) -> None:
        for runner in self.runners:
            runner.step()

    def synchronize(self) -> None:
        for runner in self.runners:
            runner.synchronize()

    def error(self) -> float:
        return -1.0


class StepWithCompute(ComputeAlone):
    """A training step: the compute, then the session's exchange (checked as always)."""

    def prepare(self) -> None:
        self.session.prepare()

    def step(self) -> None:
        super().step()
        self.session.step()

    def synchronize(self) -> None:
        super().synchronize()
        self.session.synchronize()

    def error(self) -> float:
        return self.session.error()


def measure_costs(plan: Plan, session, kick) -> dict:
    """Compute alone, the step, the rates and one step's timeline, as a plain dict. ``kick``
    wraps a session so that the watchdog sees each iteration (tasks.Kicking)."""
    c = plan.config
    runners = [Runner(plan.compute, r.device, c.dtype) for r in session.replicas]
    try:
        rates = [runner.calibrate() for runner in runners]
        large = large_matmul_rate(runners[0].device, c.dtype)
        alone, _ = protocol.measure(kick(ComputeAlone(session, runners)), iterations=c.num_batches,
                                    warmup=c.warmup, disp_batches=c.num_batches, check=False,
                                    nbytes=plan.nbytes, bus_factor=0.0)
        step, _ = protocol.measure(kick(StepWithCompute(session, runners)),
                                   iterations=c.num_batches, warmup=c.warmup,
                                   disp_batches=c.num_batches, check=c.test_results,
                                   nbytes=plan.nbytes, bus_factor=0.0)
        timeline = trace(session, runners)
        alone_own = sorted(s.own_seconds for s in alone)[len(alone) // 2]
        return {"compute_samples": [asdict(s) for s in alone],
                "step_samples": [asdict(s) for s in step],
                "timeline": timeline,
                "step_flops": sum(runner.step_flops for runner in runners),
                "compute_rate_flops": sum(r.step_flops for r in runners) / alone_own,
                "calibrated_rate_flops": min(rates),
                "large_matmul_rate_flops": large,
                "device_type": runners[0].device.type}
    finally:
        for runner in runners:
            runner.close()


def trace(session, runners: list[Runner]) -> list[dict]:
    """One untimed step with every layer's compute and the exchange marked: [{device, lane,
    label, start_s, end_s}], seconds from the step's start on this process's clock (a GPU's
    events are on its own stream's clock, from a mark at the same start)."""
    session.prepare()
    session.synchronize()
    for runner in runners:
        runner.clear_marks()
    origins = [runner._mark() for runner in runners]
    for runner in runners:
        runner.step()
    exchange_marks = [runner._mark() for runner in runners]
    session.step()
    ends = [runner._mark() for runner in runners]
    for runner in runners:
        runner.synchronize()
    session.synchronize()
    events = []
    for index, (runner, origin) in enumerate(zip(runners, origins)):
        device = f"{runner.device.type}:{session.replicas[index].rank}"
        for label, start, end in runner.marked_seconds(origin):
            events.append({"device": device, "lane": "compute", "label": label,
                           "start_s": start, "end_s": end})
        runner.marks = [("exchange", exchange_marks[index], ends[index])]
        for label, start, end in runner.marked_seconds(origin):
            events.append({"device": device, "lane": "exchange", "label": "all arrays",
                           "start_s": start, "end_s": end})
        runner.clear_marks()
    return events
