"""One result model, rendered as text (preamble, MXNet lines, summary) and as JSON."""

from __future__ import annotations

import datetime
import json
from dataclasses import asdict

from bandwidth.formulas import busbw_gbps
from bandwidth.hardware.memory import memory_line
from bandwidth.hardware.topology import pcie_text
from bandwidth.links.hostmatrix import ceiling_line
from bandwidth.plan.plan import Plan
from bandwidth.report.cells import ONE_DEVICE
from bandwidth.results.document import fingerprint
from bandwidth.results.probepaths import probe_line
from bandwidth.results.result import Result
from bandwidth.results.stragglers import straggler_json, straggler_line
from bandwidth.results.validate import SCHEMA_VERSION
from bandwidth.textformat import gbps_3
from bandwidth.words import counted

# WorkerTraffic's fields that only its per-rank record shows (the document's "ranks").
RANK_ONLY = ("wait_seconds", "peer_seconds")


def preamble(plan: Plan, environment: dict, sweep: int = 1) -> list[str]:
    c, env = plan.config, environment
    versions = f"torch {env['torch']}"
    if env.get("cuda"):
        versions += f", CUDA {env['cuda']}"
    if env.get("nccl"):
        versions += f", NCCL {env['nccl']}"
    if env.get("driver"):
        versions += f", driver {env['driver']}"
    names = sorted({d["name"] for d in env["devices"]})
    count = f"{len(env['devices'])} x"
    if plan.devices.shares_gpu:
        count = f"{len(set(plan.devices.ids))} x"       # replicas sharing a GPU (--gpus 0,0)
        names[-1] += f" ({plan.devices.n} replicas)"
    lines = [f"# bandwidth {env['toolkit']} on {env['host']}: {versions}",
             f"# devices: {count} {', '.join(names)}"]
    if env.get("links"):
        lines.append(f"# links: {links_text(env['links'])}")
    lines += [f"# note: {note}" for note in plan.notes]
    if sweep > 1:
        return lines + [f"# sweep of {sweep} configurations, {c.dtype}, optimizer {c.optimizer}, "
                        f"{c.num_batches} iterations after {c.warmup} warm-up each"]
    return lines + [
        f"# kvstore {c.kv_store} on {plan.devices.describe()}: "
        f"{plan.store_cls.traits.summary_text(plan.devices)}",
        *([f"# schedule {c.schedule}: {plan.schedule.summary}"
           + (f" ({c.bucket_mb:g} MiB, the first {c.first_bucket_mb:g} MiB)"
              if c.schedule == "ddp" else "")] if plan.schedule is not None else []),
        f"# network {plan.network_label}{plan.input_text}, "
        f"{c.dtype}, optimizer {c.optimizer}, {c.num_batches} iterations after {c.warmup} "
        "warm-up",
    ]


def links_text(links: dict) -> str:
    """``GPU 0<->1 18 NVLinks; PCIe: GPU 0 gen5 x16, GPU 1 gen5 x16`` (environment's links)."""
    nv = [f"GPU {pair.replace('-', '<->')} {'?' if count is None else count} NVLinks"
          for pair, count in (links.get("nvlinks") or {}).items()]
    pcie = [f"GPU {gpu} {pcie_text(link)}"
            for gpu, link in (links.get("pcie") or {}).items()]
    return "; ".join(nv + (["PCIe: " + ", ".join(pcie)] if pcie else []))


def array_table(plan: Plan) -> list[str]:
    from bandwidth.arrays.dtypes import DTYPE_BYTES

    width = max(len(name) for name, _ in plan.shapes)
    lines = [f"{'key':>5}  {'name':<{width}}  {'shape':<24} {'bytes':>14}"]
    for key, (name, shape) in enumerate(plan.shapes):
        nbytes = DTYPE_BYTES[plan.config.dtype]
        for d in shape:
            nbytes *= d
        lines.append(f"{key:>5}  {name:<{width}}  {str(tuple(shape)):<24} {nbytes:>14,}")
    lines.append(f"total: {plan.nbytes:,} bytes in {plan.config.dtype}")
    return lines + schedule_table(plan)


def schedule_table(plan: Plan) -> list[str]:
    """A schedule other than flat: its parts (ddp: buckets) in the order a step exchanges them,
    with their first and last keys and bytes."""
    if plan.schedule is None:
        return []
    parts = plan.schedule.describe()
    lines = [f"schedule {plan.config.schedule}: {len(parts)} parts in exchange order",
             f"{'part':>5}  {'label':<28} {'keys':>11} {'arrays':>7} {'bytes':>14}"]
    for part in parts:
        keys = plan.schedule.parts[part["index"]].keys
        lines.append(f"{part['index']:>5}  {part['label'][:28]:<28} {keys[0]:>5}-{keys[-1]:<5} "
                     f"{len(keys):>7} {part['nbytes']:>14,}")
    return lines


def summary_lines(result: Result) -> list[str]:
    plan, s = result.plan, result.summary
    devices = devices_words(plan.devices) + (
        f" on each of {counted(len(result.workers), 'worker')}" if result.workers else "")
    lines = [f"# summary: kvstore {plan.config.kv_store}, {devices}, "
             f"{s.nbytes / 1e6:.2f} MB in {counted(len(plan.shapes), 'array')}, "
             f"{counted(s.iterations, 'iteration')}"]
    if s.bus_factor == 0 and result.workers:    # one device per worker: the network still works
        lines.append(f"#   GB/sec per gpu: {ONE_DEVICE} per worker: MXNet's figure counts only "
                     "the worker's own devices, so it is 0; the network carried:")
        lines += network_lines(result)
    elif s.bus_factor == 0:   # one device: MXNet's formula gives 0 (its iter lines keep it)
        lines.append(f"#   GB/sec per gpu: {ONE_DEVICE}: nothing crosses a link, so busbw is 0 "
                     "by definition")
    else:
        lines.append(f"#   GB/sec per gpu (busbw = algbw x {s.bus_factor:g}): median "
                     f"{s.busbw_median:.3f}, min {s.busbw_min:.3f}, max {s.busbw_max:.3f}")
    lines += [f"#   algbw {algbw_text(result)}, time median {s.seconds_median:.6f} s, "
              f"max error {_error_text(s.error_max)}{_staleness(plan, s.error_max)}",
              launch_line(result),
              f"#   ceiling: {ceiling_text(result)}"]
    ref = result.reference
    if ref is not None:
        lines.append(f"#   reference, one flat all-reduce of the same bytes: busbw "
                     f"{ref.busbw_median:.3f} GB/s (median); {reference_ratio(result)}")
    elif plan.store_cls.traits.distributed and result.host_ceiling is None:
        lines.append("#   host-to-host ceiling: python launch.py -H hosts -n K python -m "
                     "bandwidth.ceiling --network")
    elif s.bus_factor and not plan.store_cls.traits.distributed:
        lines.append(f"#   reference: not measured ({reference_skipped(plan)})")
    if result.host_ceiling is not None:
        lines.append(ceiling_line(result.host_ceiling, servers=bool(result.server_hosts)))
    if result.link_bound is not None:
        lines.append(result.link_bound.line())
    if result.costs is not None:
        lines += result.costs.lines()
    if result.link_counters:
        from bandwidth.hardware.linksummary import cores_line, summary_line
        roles = {h: c["processes"] for h, c in result.link_counters.items()}
        link_pct = getattr(result.link_bound, "pct", None)
        lines += [line for line in (summary_line(result.link_counters, roles),
                                    cores_line(result.link_counters, link_pct, roles,
                                               one_at_a_time=result.server_takes == "worker"))
                  if line]
    return lines


def network_lines(result: Result) -> list[str]:
    """What the network carried per step and per second, over every worker (the slowest worker's
    median step time, as the summary's), each way."""
    out_word, in_word = result.plan.store_cls.costs.traffic_words
    nbytes = sum(w.network_nbytes for w in result.workers)
    each = result.workers[0].network_nbytes if result.workers else 0.0
    seconds = result.summary.seconds_median
    gbps = nbytes / seconds / 1e9 if seconds else float("nan")
    workers = len(result.workers)
    per = f" ({each / 1e6:.2f} MB by each of {workers} workers)" if workers > 1 else ""
    return [f"#   network: {nbytes / 1e6:.2f} MB {out_word} and {nbytes / 1e6:.2f} MB {in_word} "
            f"per step{per}, {gbps:.3f} GB/s each way"]


def algbw_text(result: Result) -> str:
    """``12.345 GB/s``, or n/a with the reason where one device moves nothing (one nccl rank)."""
    nothing = (result.plan.store_cls.traits.alone_moves_nothing
               if result.plan.devices.n == 1 and not result.workers else None)
    return f"n/a ({nothing})" if nothing else f"{result.summary.algbw_median:.3f} GB/s"


def devices_words(devices) -> str:
    """``2 devices``, or ``2 replicas on 1 GPU`` where replicas share a GPU (--gpus 0,0)."""
    if devices.shares_gpu:
        gpus = len(set(devices.ids))
        return f"{devices.n} replicas on {gpus} GPU{'s' if gpus > 1 else ''}"
    return f"{devices.n} device{'s' if devices.n != 1 else ''}"


def reference_ratio(result: Result) -> str:
    """The run against its flat all-reduce reference, as a ratio: a share (%) only of a bound."""
    ref, s = result.reference, result.summary
    if not ref.busbw_median:
        return "this run n/a x it"
    ratio = s.busbw_median / ref.busbw_median
    bound = result.ceiling is not None and result.ceiling.gbps == ref.busbw_median and \
        not result.ceiling.not_a_bound          # the ceiling is this very reference
    return f"this run {ratio:.2f} x it" + (" (the ceiling above)" if bound else
                                            " (a comparison, not a bound)")


def reference_skipped(plan: Plan) -> str:
    """Why no flat all-reduce reference was measured for ``plan`` (run.py decides)."""
    if not plan.config.reference:
        return "--no-reference"
    if plan.devices.shares_gpu:
        return "replicas share a GPU, and NCCL cannot hold one GPU twice"
    return "it needs at least 2 devices"


def launch_line(result: Result) -> str:
    """How the steps were issued, and the host's time per step beside the step's own."""
    plan, s = result.plan, result.summary
    launch = result.launch or plan.launch
    if launch == "graph" and plan.schedule is not None:
        how = (f"graph (each of the step's {len(plan.schedule.parts)} parts one replay of its own "
               "CUDA graph captured at set-up)")
    elif launch == "graph":
        how = "graph (each step one replay of a CUDA graph captured at set-up)"
    elif plan.devices.is_cuda and plan.config.launch == "graph":
        how = f"eager ({plan.config.kv_store} has no graph path: the host issues every step)"
    else:
        how = "eager (the host issues every copy, kernel and collective of each step)"
    if s.host_seconds_median is None:
        return f"#   launch {how}"
    share = 100 * s.host_seconds_median / s.seconds_median if s.seconds_median else 0.0
    return (f"#   launch {how}; host time per step: median {1e6 * s.host_seconds_median:.1f} us, "
            f"{share:.1f} % of the step")


def worker_lines(result: Result) -> list[str]:
    """The distributed modes' per-worker table (empty for the others): GB/sec per gpu and the
    network traffic per second from each worker's own median step time; per server where the
    mode has servers and says what each one gets (n/a otherwise)."""
    if not result.workers:
        return []
    out_word, in_word = result.plan.store_cls.costs.traffic_words
    lines = ["#   per worker, from its own median step time (the lines above take the slowest "
             "worker of each step):",
             f"#   {'worker':>6}  {'GB/sec per gpu':>14}  {out_word + ' GB/s':>12}  "
             f"{in_word + ' GB/s':>13}  per server, GB/s each way"]
    for row in result.workers:
        servers = ", ".join(f"{s}: {gbps:.3f}" for s, gbps in enumerate(row.server_gbps()))
        lines.append(f"#   {row.worker:>6}  {row.busbw_median:>14.3f}  {row.network_gbps:>12.3f}  "
                     f"{row.network_gbps:>13.3f}  {servers or 'n/a'}")
    if len(result.workers) > 1:
        # How far apart the workers' own steps are: a synchronous step is the slowest worker's
        # (50 x 5 on a lab at 1 Gbit/s: own medians 4.29 to 4.94 s, 15 % apart).
        fast = min(result.workers, key=lambda w: w.seconds_median)
        slow = max(result.workers, key=lambda w: w.seconds_median)
        lines.append(f"#   spread: the workers' own median steps {fast.seconds_median:.6f} s "
                     f"(worker {fast.worker}) to {slow.seconds_median:.6f} s (worker "
                     f"{slow.worker}), the slowest "
                     f"{100 * (slow.seconds_median / fast.seconds_median - 1):.1f} % above the "
                     "fastest")
    if result.probe is not None:
        lines.append(f"#   {probe_line(result.probe)}")
    if result.ranks:
        lines.append(f"#   {straggler_line(result.ranks)}")
    if result.memory is not None:
        lines.append(memory_line(result.memory))
    return lines


def ceiling_text(result: Result) -> str:
    """'92.1 % of 384.8 GB/s (p2p unidirectional copy ...)', or n/a with the reason."""
    plan, ceiling = result.plan, result.ceiling
    bound_by = plan.store_cls.traits.bound_text(plan.devices)
    if ceiling is None:
        why = ("1 device" if plan.devices.n < 2 else
               "this mode measures none in the run" if plan.store_cls.traits.distributed and
               plan.config.reference else
               "not measured (--no-reference)" if not plan.config.reference else "unknown")
        return f"n/a ({why}); bound by {bound_by}"
    if ceiling.not_a_bound:
        return f"n/a ({ceiling.not_a_bound}); {ceiling.name}: {gbps_3(ceiling.gbps)} GB/s"
    return f"{result.pct_of_ceiling:.1f} % of {ceiling.gbps:.3f} GB/s ({ceiling.name})"


def _error_text(error: float) -> str:
    return "not checked" if error < 0 else f"{error:.6f}"


def _staleness(plan, error: float) -> str:
    """Why an asynchronous mode's error is not 0: it is measured against the synchronous result."""
    if error <= 0 or plan.store_cls.traits.sync:
        return ""
    return (" (asynchronous servers: a pull holds the pushes applied so far, the other workers' "
            "at most a step apart; that staleness is the error, at most about (workers - 1) x "
            "devices / steps, not a fault)")


def result_json(result: Result) -> dict:
    """One entry of a result document's "results" (bandwidth.results.document describes the
    schema)."""
    plan = result.plan
    return {
        "config": plan.config.to_dict(),
        "network": {"name": plan.network_label, "arrays": len(plan.shapes), "bytes": plan.nbytes,
                    "shapes": [[name, list(shape)] for name, shape in plan.shapes]},
        "kv_store": {"name": plan.config.kv_store,
                     "bound": plan.store_cls.traits.bound_text(plan.devices),
                     "notes": result.notes},
        "devices": plan.devices.labels(),
        "launch": result.launch or plan.launch,
        "graph_steps": result.graph_steps,
        # A schedule other than flat: its parts (ddp: the buckets) in the order a step exchanges
        # them, each with its arrays and bytes.
        **({"schedule": {"name": plan.config.schedule, "parts": plan.schedule.describe()}}
           if plan.schedule is not None else {}),
        **({"cpu_threads": result.cpu_threads} if result.cpu_threads is not None else {}),
        # Every iteration's figure, kept for the statistical gate (bandwidth.report.stats).
        "iterations": [dict(asdict(s), busbw_gbps=busbw_gbps(result.summary.nbytes, s.seconds,
                                                             result.summary.bus_factor))
                       for s in result.samples],
        "reports": [asdict(r) for r in result.reports],
        "summary": asdict(result.summary),
        "reference": None if result.reference is None else asdict(result.reference),
        "ceiling": None if result.ceiling is None else asdict(result.ceiling),
        "workers": [{k: v for k, v in asdict(w).items() if k not in RANK_ONLY}
                    for w in result.workers],
        # Distributed: every rank's record, and the straggler by the stated rule.
        **({"ranks": [r.to_dict() for r in result.ranks],
            "straggler": straggler_json(result.ranks)} if result.ranks else {}),
        **({"probe": result.probe} if result.probe is not None else {}),
        **({"host_ceiling": result.host_ceiling.to_dict()}
           if result.host_ceiling is not None else {}),
        **({"link_bound": result.link_bound.to_dict()}
           if result.link_bound is not None else {}),
        **({"step_costs": result.costs.to_dict()} if result.costs is not None else {}),
        **({"link_counters": result.link_counters} if result.link_counters else {}),
        **({"memory": result.memory} if result.memory is not None else {}),
    }


def document(results: list[Result], environment: dict, extra: dict | None = None) -> dict:
    """The result document that --json and --save-baseline write."""
    doc = {
        "schema_version": SCHEMA_VERSION,
        "tool": f"bandwidth {environment.get('toolkit')}",
        "created": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "environment": environment,
        "fingerprint": fingerprint(environment),
        "results": [result_json(r) for r in results],
    }
    doc.update(extra or {})
    return doc


def write_document(doc: dict, path: str) -> None:
    """The result document as a whole, or the old file left as it was (bandwidth.files)."""
    from bandwidth.files import write_atomic

    write_atomic(path, json.dumps(doc, indent=1) + "\n", "the result")
