"""The passes of a run beyond the first: --repeat auto's passes (``auto_pass``), each in a fresh
process for --baseline-processes and the confirmation passes (--confirm); the CPU threads each row
is pinned to (the baseline's, or the first repeat's)."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import replace

from bandwidth.ceiling.bounds import BoundCache
from bandwidth.config.job import Job
from bandwidth.execution.measuring import measure_one, merged, plan_label
from bandwidth.measurement.fresh import fresh_pass
from bandwidth.plan.plan import Plan
from bandwidth.report import baseline
from bandwidth.progress import Progress
from bandwidth.report.stats import ci_width_pct
from bandwidth.report.text import document
from bandwidth.results.document import Row, devices_label, fingerprint, rows_from_document
from bandwidth.results.result import Result


def plan_key(plan: Plan) -> tuple:
    """The Row.key of the row that ``plan`` measures."""
    c = plan.config
    return (c.kv_store, plan.network_label, devices_label(plan.devices.labels()), c.dtype,
            c.optimizer, c.backend)


def baseline_threads(base: dict) -> dict[tuple, int]:
    """The CPU threads each row of the baseline ran with (the most frequent over its repeats;
    rows of GPUs, or of documents written before the field, have none)."""
    counts: dict[tuple, Counter] = {}
    for row in rows_from_document(base, "baseline"):
        if row.cpu_threads is not None:
            counts.setdefault(row.key, Counter())[row.cpu_threads] += 1
    return {key: c.most_common(1)[0][0] for key, c in counts.items()}


def pin_threads(plans: list[Plan], threads: dict[tuple, int | None]
                ) -> tuple[list[Plan], list[Plan]]:
    """``plans`` with the CPU threads of ``threads`` (by row key) fixed where the command line
    left them to the trial (bandwidth.hardware.cputhreads): the thread count is part of what is
    compared, and the trial can choose differently from one process (or repeat) to the next on
    the same machine. Returns all plans and those changed."""
    out, changed = [], []
    for plan in plans:
        n = threads.get(plan_key(plan))
        if n is not None and plan.config.cpu_threads is None and not plan.devices.is_cuda:
            plan = replace(plan, config=replace(plan.config, cpu_threads=n))
            changed.append(plan)
        out.append(plan)
    return out, changed


def baseline_processes(job: Job, plans: list[Plan], environment: dict) -> list[dict]:
    """--save-baseline with --repeat auto: --baseline-processes K - 1 more passes, each in a
    fresh process (bandwidth.measurement.fresh: a process's level is shared by all of its
    iterations), each pass's rows kept as a repeat of the baseline's rows."""
    out = []
    for k in range(2, job.baseline_processes + 1):
        print(f"# baseline process {k} of {job.baseline_processes}: a fresh process measures "
              "every row again (--baseline-processes)", flush=True)
        out += document(merged(fresh_pass(auto_pass, job, plans, environment,
                                             f"baseline process {k}")),
                        environment)["results"]
    return out


def confirm(job: Job, plans: list[Plan], first: list[Result], bounds: BoundCache,
            environment: dict, base: dict | None, every_row: list, gates: baseline.Gates,
            verdict: baseline.Check, last_start: float
            ) -> tuple[baseline.Check, list[list[dict]]]:
    """--repeat auto's confirmation passes (--confirm N): the rows whose measured gate failed
    (baseline.CONFIRMED_GATES) are measured again, in a fresh process each time
    (bandwidth.measurement.fresh), with this process's CPU threads, by the same --ci-width /
    --time-budget rule (a budget of its own), and judged on that pass's iterations alone; a row
    fails only if every
    pass fails. Each pass starts --confirm-interval seconds after the one before it began
    (``last_start``: when the first pass began), so that one burst of other load on the host
    does not span every pass. Stops at the first pass after which nothing fails. Returns the
    last verdict and each pass's results (as the document's "results")."""
    keys = [rows_from_document(document([r], environment), "")[0].key for r in first]
    passes: list[list[Row]] = []
    docs: list[list[dict]] = []
    for number in range(1, job.confirm + 1):
        again = baseline.confirm_keys(verdict)
        chosen = [plan for plan, key in zip(plans, keys) if key in again]
        if not chosen:
            break
        wait = max(0.0, last_start + job.confirm_interval_s - time.perf_counter())
        print(f"# confirmation pass {number} of at most {job.confirm}: measuring again "
              f"{', '.join(plan_label(p) for p in chosen)} (failed above) in {wait:.1f} s "
              f"(--confirm-interval {job.confirm_interval_s:g} s after the last pass began); "
              f"the row fails only if this pass fails too", flush=True)
        time.sleep(wait)
        last_start = time.perf_counter()
        runs = fresh_pass(auto_pass, job, chosen, environment, f"confirmation {number}")
        results = merged(runs)
        passes.append([row for k, repeat in enumerate(runs) for row in rows_from_document(
            document(repeat, environment), f"confirmation {number} repeat {k + 1}")])
        docs.append(document(results, environment)["results"])
        verdict = baseline.check(every_row, base,
                                 fingerprints={"this machine": fingerprint(environment)},
                                 force=job.force, baseline_name=job.baseline or "", gates=gates,
                                 confirmations=passes)
        if verdict.exit_code != 1:
            break
    return verdict, docs


def auto_pass(job: Job, plans: list[Plan], bounds: BoundCache, environment: dict,
              tag: str) -> list[list[Result]]:
    """Repeats of ``plans`` until every median's 95 % interval is within --ci-width or the next
    repeat would end after --time-budget (counted from this pass's start); the results of each."""
    runs: list[list[Result]] = []
    started = time.perf_counter()
    while True:
        round_start = time.perf_counter()
        bar = Progress(len(plans))
        try:
            runs.append([measure_one(job, plan, bounds, bar, index, len(plans), len(runs),
                                     tag=tag) for index, plan in enumerate(plans)])
        finally:
            bar.close()
        width = max(ci_width_pct(row.samples) for row in
                    rows_from_document(document(merged(runs), environment), "pooled"))
        now = time.perf_counter()
        out_of_time = now + (now - round_start) > started + job.time_budget_s
        if (width <= job.ci_width_pct or out_of_time) or len(runs) >= job.repeat:
            print(f"# {tag}: {len(runs)} repeat{'s' if len(runs) > 1 else ''} in "
                  f"{now - started:.1f} s; widest 95 % interval of a median: {width:.1f} % "
                  + (f"(within {job.ci_width_pct:g} %)" if width <= job.ci_width_pct else
                     f"(--time-budget {job.time_budget_s:g} s ended first)"), flush=True)
            return runs

