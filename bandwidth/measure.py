"""Measure the bandwidth of exchanging a network's parameter arrays under one kvstore mode.

Usage (from the repository root, from inside bandwidth/ as with MXNet's tool, or installed)::

    python bandwidth/measure.py --kv-store device --gpus 0,1 --network resnet --num-layers 200
    python measure.py --kv-store nccl --network inception-v3 --image-shape 3,299,299
    python -m bandwidth.measure --kv-store local --cpus 4 --network mlp      # no GPU needed
    bandwidth-measure --network resnet --num-layers 200 --dry-run

Prints MXNet's lines (``num of arrays = ...``, ``iter 1, ... GB/sec per gpu, error ...``), then a
summary with the median, min and max, algbw, and a flat all-reduce of the same bytes measured in the
same run as a reference. Exit status: 0 done, 1 a worker process failed or a gate failed
(--baseline, --min-gbps, --min-percent-of-ceiling), 2 bad input or a request this machine cannot
carry out (a busy GPU under a gate without --force), 141 (128 + SIGPIPE) the reader of stdout went
away (``| head``).
"""

if __package__ in (None, ""):
    # Started as a script: put the repository root, not this folder, on the import path, so that
    # the package imports the same way as when installed (and this folder's modules shadow nothing).
    import pathlib
    import sys

    _here = pathlib.Path(__file__).resolve().parent
    sys.path[:] = [p for p in sys.path if pathlib.Path(p or ".").resolve() != _here]
    sys.path.insert(0, str(_here.parent))

import logging  # noqa: E402
import os  # noqa: E402
import signal  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections import Counter  # noqa: E402
from dataclasses import replace  # noqa: E402

from bandwidth import cliexit  # noqa: E402

if __name__ == "__main__":
    cliexit.quiet_interrupt_while_importing("measure.py")    # Ctrl-C while torch imports

import torch  # noqa: E402

import networks  # noqa: E402
from bandwidth.backends import engines  # noqa: E402
from bandwidth.ceiling.bounds import BoundCache  # noqa: E402
from bandwidth.config.options import Job, build_parser, job_from_args  # noqa: E402
from bandwidth.errors import BandwidthError, ConfigError  # noqa: E402
from bandwidth.hardware.environment import describe as describe_environment  # noqa: E402
from bandwidth.launch.preflight import PREFLIGHT_ENV  # noqa: E402
from bandwidth.measurement.fresh import fresh_pass  # noqa: E402
from bandwidth.measurement.protocol import Summary  # noqa: E402
from bandwidth.compute.layers import describe as describe_compute  # noqa: E402
from bandwidth.plan.layout import DTYPE_BYTES  # noqa: E402
from bandwidth.plan.plan import Plan, make_plan, size_line  # noqa: E402
from bandwidth.report import baseline  # noqa: E402
from bandwidth.report import gatereport  # noqa: E402
from bandwidth.report import table  # noqa: E402
from bandwidth.report.progress import Progress  # noqa: E402
from bandwidth.report.stats import ci_width_pct  # noqa: E402
from bandwidth.report.text import (algbw_text, array_table, discard_stdout,  # noqa: E402
                                   document, preamble, summary_lines, whole_lines,
                                   worker_lines, write_document)
from bandwidth.results.document import (Row, devices_label, fingerprint,  # noqa: E402
                                        rows_from_document)
from bandwidth.results.result import Result  # noqa: E402
from bandwidth.run import can_run_together, run, run_together  # noqa: E402
from bandwidth.stores.registry import KVSTORES  # noqa: E402


class Stopped(BaseException):
    """SIGTERM or SIGHUP (what `timeout`, CI runners, schedulers and launch.py send): unwind, so
    that the per-device ranks are stopped and nothing is left behind, then exit 128 + N."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def _stop_on_signal(signum, frame):
    signal.signal(signum, signal.SIG_DFL)       # a second one ends the process at once
    raise Stopped(signum)


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s: %(message)s")
    whole_lines()                  # the job's processes share stdout: no line split by another's
    args = build_parser().parse_args(argv)
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _stop_on_signal)
    try:
        return _main(args)
    except Stopped as stop:
        # A signal that arrived while an error was being handled (a collective blocked in C++
        # runs the handler only when it returns, often with its own timeout error): one line.
        print(f"measure.py: stopped by {signal.Signals(stop.signum).name}", file=sys.stderr)
        return 128 + stop.signum


def _main(args) -> int:
    try:
        cliexit.restore_interrupt()
        if args.list_networks:
            status = list_networks()
        else:
            # The launcher's contract, read once here: a process started by launch.py, or by
            # torchrun (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), has a role.
            import socket

            from bandwidth.launch.torchenv import role_from_environ
            job = job_from_args(args)
            role = role_from_environ(os.environ, job.num_servers, socket.gethostname())
            status = execute(job, role)
        sys.stdout.flush()         # a closed pipe shows here, inside these handlers, not at exit
        return status
    except BrokenPipeError:
        # The reader of stdout went away (measure.py --dry-run | head -1): quietly, 141
        # (bandwidth.cliexit says why).
        return cliexit.broken_pipe()
    except BandwidthError as exc:
        _tell_launcher(str(exc), _peer_failure(exc, str(exc)))
        cliexit.error(f"measure.py: error: {exc}")
        return exc.exit_code
    except torch.OutOfMemoryError as exc:
        print(f"measure.py: error: out of device memory: {str(exc).splitlines()[0]}",
              file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"measure.py: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return cliexit.interrupted("measure.py")
    except RuntimeError as exc:
        first = next((line.strip() for line in str(exc).splitlines() if line.strip()), "")
        if not _peer_failure(exc, first):
            raise
        # Another process of the job is gone or stopped answering (a Gloo or store timeout, a
        # closed connection): one line; the launcher names the process at fault.
        line = f"a peer process is gone or stopped answering: {first[:300]}"
        _tell_launcher(line, consequence=True)
        cliexit.error(f"measure.py: error: {line}")
        return 1
    except Stopped as stop:
        _tell_launcher(f"stopped by {signal.Signals(stop.signum).name}", consequence=False)
        print(f"measure.py: stopped by {signal.Signals(stop.signum).name}", file=sys.stderr)
        return 128 + stop.signum


def _peer_failure(exc: Exception, first: str) -> bool:
    """torch.distributed's errors for a peer that is gone or hung (DistError, or Gloo's
    RuntimeError), as opposed to a bug; for a failed per-device rank (WorkerError), whether it
    failed that way rather than being killed or stopped itself."""
    import torch.distributed as dist

    if any(word in first for word in ("was killed by", "stopped answering")):
        return False
    return isinstance(exc, dist.DistError) or any(
        word in first for word in ("gloo", "Timed out", "Connection closed by peer",
                                   "Connection reset by peer", "a peer process is gone",
                                   "DistStoreError", "wait timeout"))


def _tell_launcher(reason: str, consequence: bool) -> None:
    """Under launch.py: say why this process fails (a consequence: another failed first)."""
    from bandwidth.launch.heartbeat import report_end

    report_end(reason.splitlines()[0] if reason else "", consequence)


def list_networks() -> int:
    for name in networks.names():
        print(f"{name:<22} {networks.NETWORKS[name].summary}")
    return 0


def preflight(role) -> bool:
    """Under launch.py's check of the command line (bandwidth.launch.preflight): stop here, every
    flag and the plan checked, nothing measured."""
    return role is not None and os.environ.get(PREFLIGHT_ENV) == "1"


def execute(job: Job, role=None) -> int:
    if any(KVSTORES[c.kv_store].distributed for c in job.configs):
        return execute_distributed(job, role)
    if role is not None:                   # under launch.py: refuse servers before importing mxnet
        from bandwidth.processes.distributed import check_single_host
        check_single_host(list(dict.fromkeys(c.kv_store for c in job.configs)), role)
    plans = [make_plan(config) for config in job.configs]     # every configuration checked first
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
    base = None
    if job.baseline:                       # refuse other hardware before measuring anything
        base = baseline.load_baseline(job.baseline)
        baseline.check_fingerprint(baseline.document_fingerprint(base), fingerprint(environment),
                                   job.force)
    gates = baseline.Gates(job.tolerance_pct, job.min_gbps, job.min_pct_of_ceiling,
                           job.allow_missing, pool=job.repeat_auto)
    gating = base is not None or gates.any
    summary_md = gatereport.summary_path(job.summary_md, os.environ) if gating else None
    if (job.junit_path or job.summary_md) and not gating:
        raise ConfigError("--junit and --summary-md report the gates: give --baseline, "
                          "--min-gbps or --min-percent-of-ceiling")
    for path, flag in ((job.junit_path, "--junit"), (summary_md, "--summary-md")):
        gatereport.check_output_path(path, flag)
    busy_lines = check_busy(widest.devices, job.force, gating)
    if base is not None:                   # like with like: the baseline's CPU threads
        plans, pinned = pin_threads(plans, baseline_threads(base))
        busy_lines += [f"# note: {plan_label(p)}: CPU threads {p.config.cpu_threads}, as in the "
                       "baseline (--cpu-threads N to choose)" for p in pinned]
    for line in preamble(plans[0], environment, sweep=len(plans)) + busy_lines:
        print(line)
    ceiling_doc, ceiling_status = host_ceilings(widest) if job.ceiling else (None, 0)
    bounds = BoundCache(plans)             # each mode's ceiling measured once per device set
    repeating = job.repeat > 1
    bar = Progress(len(plans)) if job.is_sweep or repeating else None
    every_row, verdict, doc, runs = [], None, None, []
    started = time.perf_counter()
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
        doc = document(merged(runs) if job.repeat_auto else results, environment,
                       None if ceiling_doc is None else {"ceiling": ceiling_doc})
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
        if gating:
            verdict = baseline.check(every_row, base,
                                     fingerprints={"this machine": fingerprint(environment)},
                                     force=job.force, baseline_name=job.baseline or "",
                                     gates=gates)
            if verdict.exit_code == 0:
                break                      # as fleet health checks: the first good repeat passes
        if job.repeat_auto:
            break                          # precise enough, or out of time: judged once
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


def execute_distributed(job: Job, role) -> int:
    """One configuration under launch.py: workers measure and print MXNet's lines, servers serve,
    and the first worker prints the summary with every worker's line."""
    roles = engines.engine(job.configs[0]).roles()     # MXNet's: ps-lite (mxnet imported there)

    if job.is_sweep:
        raise ConfigError(f"the distributed modes measure one configuration per launch, not "
                          f"{len(job.configs)}; give one --kv-store, --network, device set and "
                          "--backend. To compare backends or modes, launch once per "
                          "configuration with --json and join the files: python -m "
                          "bandwidth.compare a.json b.json")
    (config,) = job.configs
    on_worker = role is None or role.name == "worker"
    plan = make_plan(config, with_devices=on_worker)
    roles.check_role(config.kv_store, role, servers_needed=not plan.store_cls.process_per_device)
    if preflight(role):
        return 0
    if on_worker and role.task_id == 0:
        for line in preamble(plan, describe_environment(plan.devices)):
            print(line)
    if on_worker:
        print(size_line(plan.shapes, config.dtype), flush=True)
    # 100 workers' lines would flood the terminal: worker 0's by default (every worker's
    # iterations are in the JSON's 'workers').
    prints = on_worker and (role.task_id == 0 or job.all_worker_lines)
    result = roles.run_distributed(
        plan, role, on_report=(lambda report: print(report.line(), flush=True)) if prints else None)
    if result is None or role.task_id != 0:
        return 0                           # the first worker prints the gathered summary
    if job.network_ceiling is not None:
        result.host_ceiling = measured_host_ceiling(job.network_ceiling, result)
    if job.link_rate_bits is not None:
        result.link_bound = measured_link_bound(job.link_rate_bits, result)
    if job.predict:
        from bandwidth.predict.runline import predicted_lines
        result.notes.extend(predicted_lines(result, job.link_rate_bits))
    for note in result.notes:
        print(f"# note: {note}")
    print("\n".join(summary_lines(result) + worker_lines(result)), flush=True)
    if job.json_path:
        write_document(document([result], result.environment), job.json_path)
        print(f"# wrote {job.json_path}")
    return 0


def measured_host_ceiling(matrix, result: Result):
    """--network-ceiling: the run's workers against the matrix's cells between its hosts."""
    from bandwidth.ceiling.hostmatrix import HostCeiling, host_ceiling

    if not result.worker_hosts:             # --backend mxnet: ps-lite does not say where
        return HostCeiling(matrix.file, None, None, None,
                           "this backend does not report the job's hosts")
    return host_ceiling(matrix, result.worker_hosts, result.server_hosts,
                        [w.network_gbps for w in result.workers])


def measured_link_bound(rate_bits: int, result: Result):
    """--link-rate: the full-duplex bound of a step on this job's hosts
    (bandwidth.ceiling.linkbound)."""
    from bandwidth.ceiling.linkbound import link_bound, ps_host_bytes, ring_host_bytes

    if not result.worker_hosts:             # --backend mxnet: ps-lite does not say where
        return None
    if result.server_hosts:
        shares = result.workers[0].server_nbytes if result.workers else ()
        traffic = ps_host_bytes(result.worker_hosts, result.server_hosts, shares)
    else:
        per_worker = result.plan.devices.n
        traffic = ring_host_bytes([h for h in result.worker_hosts for _ in range(per_worker)],
                                  result.plan.nbytes)
    return link_bound(traffic, rate_bits, result.summary.seconds_median)


def host_ceilings(plan: Plan) -> tuple[dict, int]:
    """--ceiling: python -m bandwidth.ceiling on this job's widest device set, printed; returns
    its document (the --json "ceiling" key) and the status it exits with (1: a part failed)."""
    from bandwidth.ceiling.render import lines
    from bandwidth.ceiling.suite import CeilingOptions, measure_ceilings

    ceilings = measure_ceilings(plan.devices, CeilingOptions(),
                                progress=lambda m: print(f"# {m}", file=sys.stderr, flush=True))
    print("\n".join(lines(ceilings)), flush=True)
    return ceilings.to_dict(), 1 if ceilings.failures else 0


if __name__ == "__main__":
    status = main()
    cliexit.exiting()
    sys.exit(status)
