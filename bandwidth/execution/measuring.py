"""One configuration at a time: MXNet's lines for a single one, the progress bar in a sweep, the
rows of several backends measured together; how a plan and a result are named in a few words, and
--repeat auto's repeats merged into one result."""

from __future__ import annotations

from dataclasses import replace

from bandwidth.ceiling.bounds import BoundCache
from bandwidth.config.job import Job
from bandwidth.measurement.protocol import Summary
from bandwidth.plan.plan import Plan, size_line
from bandwidth.progress import Progress
from bandwidth.report.text import algbw_text, summary_lines
from bandwidth.results.document import devices_label
from bandwidth.results.result import Result
from bandwidth.run import can_run_together, run, run_together


def measure_all(job: Job, plans: list[Plan], bounds: BoundCache, bar: Progress | None,
                repeat: int) -> list[Result]:
    """Every configuration once, in order. The rows of one measurement under several backends
    (``--backend toolkit,mxnet``: adjacent, the backend varying fastest) are measured together,
    their iterations interleaved (run.run_together), so that every backend sees the same host."""
    results: list[Result] = []
    index = 0
    while index < len(plans):
        group = [plans[index]]
        while index + len(group) < len(plans) and \
                can_run_together(group + [plans[index + len(group)]]):
            group.append(plans[index + len(group)])
        if len(group) == 1:
            results.append(measure_one(job, group[0], bounds, bar, index, len(plans), repeat))
        else:
            results += measure_together(job, group, bounds, bar, index, len(plans), repeat)
        index += len(group)
    return results


def measure_together(job: Job, group: list[Plan], bounds: BoundCache, bar: Progress | None,
                     index: int, total: int, repeat: int) -> list[Result]:
    """One measurement under several backends, interleaved (a sweep: the progress bar)."""
    labels = [(f"(repeat {repeat + 1}/{'auto' if job.repeat_auto else job.repeat}) "
               if job.repeat > 1 else "") + plan_label(plan) for plan in group]
    if bar is not None:
        bar.start(index, f"{' and '.join(labels)}, interleaved")
    results = run_together(group, bounds)
    if bar is not None:
        for k, (label, result) in enumerate(zip(labels, results)):
            bar.finish(index + k + 1, f"{label}: {result_text(result)}")
    return results


def measure_one(job: Job, plan: Plan, bounds: BoundCache, bar: Progress | None, index: int,
                total: int, repeat: int, tag: str = "") -> Result:
    """One configuration: MXNet's lines for a single one, the progress bar in a sweep (or with
    --repeat; ``tag`` names a confirmation pass)."""
    if bar is not None:
        of = "auto" if job.repeat_auto else job.repeat
        label = (f"({tag + ', ' if tag else ''}repeat {repeat + 1}/{of}) " if job.repeat > 1
                 else "") + plan_label(plan)
        bar.start(index, label)
        result = run(plan.config, plan=plan, bounds=bounds)
        bar.finish(index + 1, f"{label}: {result_text(result)}")
        return result
    print(size_line(plan.shapes, plan.config.dtype), flush=True)
    result = run(plan.config, plan=plan, bounds=bounds,
                 on_report=lambda report: print(report.line(), flush=True))
    for note in result.notes:
        print(f"# note: {note}")
    print("\n".join(summary_lines(result)), flush=True)
    return result


def plan_label(plan: Plan) -> str:
    """``local flat 1M cpu x2``, ``mxnet device resnet-200 cuda:0,1``."""
    backend = "" if plan.config.backend == "toolkit" else f"{plan.config.backend} "
    return (f"{backend}{plan.config.kv_store} {plan.network_label} "
            f"{devices_label(plan.devices.labels())}")


def result_text(result: Result) -> str:
    """A finished configuration in a few words, for the progress bar."""
    s = result.summary
    if result.plan.devices.n < 2:
        return f"algbw {algbw_text(result)} (1 device)"
    pct = result.pct_of_ceiling
    return f"{s.busbw_median:.3f} GB/sec per gpu, " + (
        "ceiling n/a" if pct is None else f"{pct:.1f} % of ceiling")


def merged(runs: list[list[Result]]) -> list[Result]:
    """--repeat auto: each configuration's repeats as one result, every iteration together
    (renumbered) and the summary over all of them."""
    out = []
    for repeats in zip(*runs):
        last = repeats[-1]
        samples = [replace(s, iteration=k + 1)
                   for k, s in enumerate(s for r in repeats for s in r.samples)]
        summary = Summary.of(samples, last.summary.nbytes, last.summary.bus_factor)
        out.append(replace(last, samples=samples, summary=summary, notes=repeats[0].notes,
                           reports=[rep for r in repeats for rep in r.reports]))
    return out

