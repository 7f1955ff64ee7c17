"""A worker's ``Result`` in a distributed run (``worker_result``): its own samples and summary,
the reference and ceiling, and every worker's traffic gathered over the workers' group. Both
engines' workers build theirs here: the toolkit's (bandwidth.execution.roles) and MXNet's
(bandwidth.backends.mxnet_session)."""

from __future__ import annotations

import statistics
from dataclasses import asdict

from bandwidth.ceiling.bounds import bound, judged
from bandwidth.formulas import busbw_gbps
from bandwidth.hardware.environment import describe
from bandwidth.measurement.protocol import Report, Sample, Summary
from bandwidth.measurement.tasks import reference_summary
from bandwidth.plan.plan import Plan
from bandwidth.results.costs import step_costs
from bandwidth.results.result import Result, WorkerTraffic


def worker_result(plan: Plan, measured: dict, group, replicas: int,
                  reference: dict | None = None) -> Result:
    """This worker's Result; with ``group`` (the workers), every worker's traffic gathered in
    ``Result.workers`` and a note on how it is counted."""
    samples = [Sample(**s) for s in measured["samples"]]
    local, costs = plan.devices.n, plan.store_cls.costs
    counted = costs.counted_devices(local, replicas)
    summary = Summary.of(samples, plan.nbytes, plan.bus_factor(counted))
    ref = reference_summary(plan, reference, counted)
    notes = list(measured["notes"])
    workers = []
    if group is not None:
        traffic = costs.network_nbytes(plan.nbytes, local, replicas)
        own = statistics.median(s.own_seconds for s in samples)
        mine = WorkerTraffic(group.rank, own, busbw_gbps(plan.nbytes, own, summary.bus_factor),
                             traffic, tuple(measured.get("server_nbytes", ())),
                             tuple(s.own_seconds for s in samples),
                             tuple(s.error for s in samples),
                             tuple(s.wait_seconds or 0.0 for s in samples),
                             tuple(tuple(tuple(pair) for pair in step)
                                   for step in measured.get("peer_seconds", ())))
        workers = [WorkerTraffic(int(w["worker"]), float(w["seconds_median"]),
                                 float(w["busbw_median"]), float(w["network_nbytes"]),
                                 tuple(int(n) for n in w["server_nbytes"]),
                                 tuple(float(x) for x in w["own_seconds"]),
                                 tuple(float(x) for x in w["errors"]),
                                 tuple(float(x) for x in w["wait_seconds"]),
                                 tuple(tuple((float(a), float(b)) for a, b in step)
                                       for step in w["peer_seconds"]))
                   for w in group.gather(asdict(mine))]
        notes.append(f"network, per worker and step: {traffic / 1e6:.2f} MB "
                     f"{' and '.join(costs.traffic_words)} (S = "
                     f"{plan.nbytes / 1e6:.2f} MB): {costs.traffic_rule(local, replicas)}")
    return Result(plan=plan, environment=describe(plan.devices), samples=samples,
                  reports=[Report(**r) for r in measured["reports"]], summary=summary,
                  reference=ref, ceiling=judged(bound(plan, ref), summary.busbw_median,
                                                on_cpu=not plan.devices.is_cuda)
                  if plan.config.reference else None,
                  notes=notes, workers=workers,
                  costs=step_costs(measured, summary.seconds_median, plan.config.batch_size,
                                   replicas))
