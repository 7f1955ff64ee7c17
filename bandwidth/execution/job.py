"""A whole invocation on this host (``execute``): every configuration planned and checked first,
the baseline and busy GPUs checked before anything is measured, the repeats, the gates, the
tables and the files written; a distributed mode goes to ``distributed.execute_distributed``."""

from __future__ import annotations

import os
import sys
import time

from bandwidth.arrays.dtypes import DTYPE_BYTES
from bandwidth.backends import engines
from bandwidth.backends.registry import store_class
from bandwidth.ceiling.bounds import BoundCache
from bandwidth.cliparse import check_output_path
from bandwidth.compute.layers import describe as describe_compute
from bandwidth.config.job import Job
from bandwidth.errors import ConfigError
from bandwidth.execution.distributed import execute_distributed, preflight
from bandwidth.execution.measuring import measure_all, merged, plan_label
from bandwidth.execution.passes import (baseline_processes, baseline_threads, confirm,
                                        pin_threads, plan_key)
from bandwidth.gates import summary_path
from bandwidth.hardware.environment import describe as describe_environment
from bandwidth.plan.plan import Plan, make_plan, size_line
from bandwidth.report import baseline, table
from bandwidth.progress import Progress
from bandwidth.report.stats import ci_width_pct
from bandwidth.report.text import array_table, document, preamble, write_document
from bandwidth.results.document import fingerprint, rows_from_document
from bandwidth.stores.registry import KVSTORES


def execute(job: Job, role=None) -> int:
    if any(KVSTORES[c.kv_store].traits.distributed for c in job.configs):
        return execute_distributed(job, role)
    if role is not None:                   # under launch.py: refuse servers before importing mxnet
        from bandwidth.execution.roles import check_single_host
        check_single_host(list(dict.fromkeys(c.kv_store for c in job.configs)), role)
    plans = [make_plan(config, store_class) for config in job.configs]     # each checked first
    if preflight(role):
        return 0
    if job.dry_run:
        for plan in plans:
            print(size_line(plan.shapes, plan.config.dtype))
            print("\n".join(array_table(plan) + describe_compute(
                plan.compute, DTYPE_BYTES[plan.config.dtype])))
        return 0
    widest = max(plans, key=lambda p: p.devices.n)
    environment = describe_environment(widest.devices)
    for name in dict.fromkeys(plan.config.backend for plan in plans):   # fails before output
        environment.update(engines.ENGINES[name].environment())
    base, gates, gating, summary_md = judging(job, environment)
    busy_lines = check_busy(widest.devices, job.force, gating)
    if base is not None:                   # like with like: the baseline's CPU threads
        plans, pinned = pin_threads(plans, baseline_threads(base))
        busy_lines += [f"# note: {plan_label(p)}: CPU threads {p.config.cpu_threads}, as in the "
                       "baseline (--cpu-threads N to choose)" for p in pinned]
    for line in preamble(plans[0], environment, sweep=len(plans)) + busy_lines:
        print(line)
    ceiling_doc, ceiling_status = host_ceilings(widest) if job.ceiling else (None, 0)
    bounds = BoundCache(plans)             # each mode's ceiling measured once per device set

    def judge(every_row):
        return baseline.check(every_row, base,
                              fingerprints={"this machine": fingerprint(environment)},
                              force=job.force, baseline_name=job.baseline or "", gates=gates)

    started = time.perf_counter()
    plans, runs, every_row, doc, verdict = repeats(
        job, plans, bounds, environment, None if ceiling_doc is None else {"ceiling": ceiling_doc},
        judge if gating else None, started)
    if job.repeat_auto and job.baseline_processes > 1:
        doc["results"] += baseline_processes(job, plans, environment)
    if job.repeat_auto and verdict is not None and verdict.exit_code == 1 and job.confirm:
        verdict, passes = confirm(job, plans, runs[0], bounds, environment, base, every_row,
                                  gates, verdict, started)
        if passes:
            doc["confirmations"] = passes
    rows = rows_from_document(doc, "this run")
    print_tables(job, rows)
    status = 0
    if verdict is not None:
        doc["gates"] = [r.to_dict() for r in baseline.gate_records(verdict, gates,
                                                                    base is not None)]
        doc["verdict"] = verdict.lines[-1]
    outputs(job, doc, rows)
    if verdict is not None:
        print("\n".join(verdict.lines))
        for line in baseline.write_gate_reports(verdict, gates, tool="measure.py",
                                                junit_path=job.junit_path, summary_md=summary_md,
                                                baseline_given=base is not None,
                                                seconds=time.perf_counter() - started):
            print(line)
        status = verdict.exit_code
    if ceiling_status:
        print("measure.py: the ceiling measurement (--ceiling) failed in part: see FAILED above",
              file=sys.stderr)
    return max(status, ceiling_status)


def judging(job: Job, environment: dict) -> tuple:
    """Before measuring: the baseline (other hardware refused), the gates, whether anything is
    judged, and where the summary of the gates goes; every output path checked. Returns
    (baseline document or None, gates, gating, summary_md path or None)."""
    base = None
    if job.baseline:                       # refuse other hardware before measuring anything
        base = baseline.load_baseline(job.baseline)
        baseline.check_fingerprint(baseline.document_fingerprint(base), fingerprint(environment),
                                   job.force)
    gates = baseline.Gates(job.tolerance_pct, job.min_gbps, job.min_pct_of_ceiling,
                           job.allow_missing, pool=job.repeat_auto)
    gating = base is not None or gates.any
    summary_md = summary_path(job.summary_md, os.environ) if gating else None
    if (job.junit_path or job.summary_md) and not gating:
        raise ConfigError("--junit and --summary-md report the gates: give --baseline, "
                          "--min-gbps or --min-percent-of-ceiling")
    for path, flag in ((job.junit_path, "--junit"), (summary_md, "--summary-md")):
        check_output_path(flag, path)
    return base, gates, gating, summary_md


def repeats(job: Job, plans: list[Plan], bounds: BoundCache, environment: dict,
            extra: dict | None, judge, started: float) -> tuple:
    """Every plan measured --repeat times, or under --repeat auto until the widest 95 % interval
    of a median is within --ci-width or --time-budget ends; with gates (``judge``: the rows so
    far to a verdict, None: no gate), until the first repeat that passes. Returns the plans
    (their CPU threads pinned by the first repeat), every repeat's results, every row, the
    document (``extra``: its further keys) and the verdict (None: no gate)."""
    bar = Progress(len(plans)) if job.is_sweep or job.repeat > 1 else None
    every_row, verdict, doc, runs = [], None, None, []
    for repeat in range(job.repeat):
        round_start = time.perf_counter()
        try:
            results = measure_all(job, plans, bounds, bar, repeat)
        finally:
            if bar is not None:
                bar.close()
        runs.append(results)
        if repeat == 0:                    # later repeats keep this process's choice of threads
            plans, _ = pin_threads(plans, {plan_key(r.plan): r.cpu_threads for r in results})
        doc = document(merged(runs) if job.repeat_auto else results, environment, extra)
        every_row += rows_from_document(document(results, environment), f"repeat {repeat + 1}")
        if job.repeat_auto:
            width = max(ci_width_pct(row.samples) for row in rows_from_document(doc, "pooled"))
            now = time.perf_counter()
            out_of_time = now + (now - round_start) > started + job.time_budget_s
            if width > job.ci_width_pct and not out_of_time:
                continue
            print(f"# --repeat auto: {repeat + 1} repeat{'s' if repeat else ''} in "
                  f"{now - started:.1f} s; widest 95 % interval of a median: {width:.1f} % "
                  + (f"(within {job.ci_width_pct:g} %)" if width <= job.ci_width_pct else
                     f"(--time-budget {job.time_budget_s:g} s ended first)"))
        if judge is not None:
            verdict = judge(every_row)
            if verdict.exit_code == 0:
                break                      # as fleet health checks: the first good repeat passes
        if job.repeat_auto:
            break                          # precise enough, or out of time: judged once
    return plans, runs, every_row, doc, verdict


def check_busy(devices, force: bool, gating: bool) -> list[str]:
    """Before measuring: a GPU used by another process, or with its clocks held down, is named;
    a gate (--baseline, --min-gbps, ...) refuses it unless --force. Returns ``#`` lines."""
    if not devices.is_cuda:
        return []
    from bandwidth.hardware.busy import busy_reasons, read_states
    from bandwidth.hardware.rawcopy import pci_bus_id

    states, why_not = read_states(list(devices.ids), [pci_bus_id(g) for g in devices.ids])
    if states is None:
        return [f"# note: busy GPUs not checked: {why_not}"]
    reasons = busy_reasons(states, {os.getpid()})
    if not reasons:
        return []
    text = "; ".join(reasons)
    if gating and not force:
        raise ConfigError(f"busy GPU before measuring: {text}; a gate measured there would judge "
                          "the other work, not the links: free the GPU, or use --force")
    return [f"# warning: busy GPU: {text}" + ("; measured anyway (--force)" if gating else "")]


def print_tables(job: Job, rows) -> None:
    if job.is_sweep:
        print("\n".join(table.sweep_table(rows)))
        if any(row.step_s is not None for row in rows):
            print("\n".join([""] + table.step_table(rows)))
    if len({row.backend for row in rows}) > 1:
        print("\n".join([""] + table.backend_table(rows)))
    if job.baseline_row:
        print("\n".join([""] + table.ratio_table(rows, table.pick_baseline_row(rows,
                                                                               job.baseline_row))))
    if job.speedup:
        print("\n".join([""] + table.speedup_table(rows)))


def outputs(job: Job, doc: dict, rows) -> None:
    for path in filter(None, (job.json_path, job.save_baseline)):
        write_document(doc, path)
        print(f"# wrote {path}")
    if job.csv_path:
        table.write_csv(rows, job.csv_path)
        print(f"# wrote {job.csv_path}")
    if job.plot_path:
        from bandwidth.report import plot, timeline

        kind = (timeline.plot_timeline(doc, job.plot_path) if timeline.wanted(doc)
                else plot.plot_rows(rows, job.plot_path))
        print(f"# wrote {job.plot_path} ({kind})")


def host_ceilings(plan: Plan) -> tuple[dict, int]:
    """--ceiling: python -m bandwidth.ceiling on this job's widest device set, printed; returns
    its document (the --json "ceiling" key) and the status it exits with (1: a part failed)."""
    from bandwidth.ceiling.render import lines
    from bandwidth.ceiling.suite import CeilingOptions, measure_ceilings

    ceilings = measure_ceilings(plan.devices, CeilingOptions(),
                                progress=lambda m: print(f"# {m}", file=sys.stderr, flush=True))
    print("\n".join(lines(ceilings)), flush=True)
    return ceilings.to_dict(), 1 if ceilings.failures else 0

