"""One result model, rendered as text (preamble, MXNet lines, summary) and as JSON."""

from __future__ import annotations

import json
from dataclasses import asdict

from bandwidth.run import Plan, Result

SCHEMA_VERSION = 1


def preamble(plan: Plan, environment: dict) -> list[str]:
    c, env = plan.config, environment
    versions = f"torch {env['torch']}"
    if env.get("cuda"):
        versions += f", CUDA {env['cuda']}"
    if env.get("nccl"):
        versions += f", NCCL {env['nccl']}"
    if env.get("driver"):
        versions += f", driver {env['driver']}"
    names = sorted({d["name"] for d in env["devices"]})
    shape = ",".join(map(str, c.image_shape))
    return [
        f"# bandwidth {env['toolkit']} on {env['host']}: {versions}",
        f"# devices: {plan.devices.describe()}: {', '.join(names)}",
        f"# kvstore {c.kv_store}: {plan.store_cls.summary}",
        f"# network {plan.network_label} (image shape {shape}, {c.num_classes} classes), "
        f"{c.dtype}, optimizer {c.optimizer}, {c.num_batches} iterations after {c.warmup} "
        "warm-up",
    ]


def array_table(plan: Plan) -> list[str]:
    from bandwidth.layout import DTYPE_BYTES

    width = max(len(name) for name, _ in plan.shapes)
    lines = [f"{'key':>5}  {'name':<{width}}  {'shape':<24} {'bytes':>14}"]
    for key, (name, shape) in enumerate(plan.shapes):
        nbytes = DTYPE_BYTES[plan.config.dtype]
        for d in shape:
            nbytes *= d
        lines.append(f"{key:>5}  {name:<{width}}  {str(tuple(shape)):<24} {nbytes:>14,}")
    lines.append(f"total: {plan.nbytes:,} bytes in {plan.config.dtype}")
    return lines


def summary_lines(result: Result) -> list[str]:
    plan, s = result.plan, result.summary
    lines = [f"# summary: kvstore {plan.config.kv_store}, {plan.devices.n} devices, "
             f"{s.nbytes / 1e6:.2f} MB in {len(plan.shapes)} arrays, {s.iterations} iterations",
             f"#   GB/sec per gpu (busbw = algbw x {s.bus_factor:g}): median {s.busbw_median:.3f}, "
             f"min {s.busbw_min:.3f}, max {s.busbw_max:.3f}",
             f"#   algbw {s.algbw_median:.3f} GB/s, time median {s.seconds_median:.6f} s, "
             f"max error {_error_text(s.error_max)}",
             f"#   bound by: {plan.store_cls.bound}"]
    ref = result.reference
    if ref is not None:
        ratio = s.busbw_median / ref.busbw_median if ref.busbw_median else float("nan")
        lines.append(f"#   reference, one flat all-reduce of the same bytes: busbw "
                     f"{ref.busbw_median:.3f} GB/s (median); this run reaches {100 * ratio:.1f} %")
    elif plan.devices.n == 1:
        lines.append("#   one device: nothing crosses a link, so busbw is 0 by definition")
    else:
        lines.append("#   reference: not measured (--no-reference)")
    return lines


def _error_text(error: float) -> str:
    return "not checked" if error < 0 else f"{error:.6f}"


def to_json(result: Result) -> dict:
    plan = result.plan
    return {
        "schema_version": SCHEMA_VERSION,
        "config": plan.config.to_dict(),
        "environment": result.environment,
        "network": {"name": plan.network_label, "arrays": len(plan.shapes), "bytes": plan.nbytes,
                    "shapes": [[name, list(shape)] for name, shape in plan.shapes]},
        "kv_store": {"name": plan.config.kv_store, "bound": plan.store_cls.bound,
                     "notes": result.notes},
        "devices": plan.devices.labels(),
        "iterations": [asdict(s) for s in result.samples],
        "reports": [asdict(r) for r in result.reports],
        "summary": asdict(result.summary),
        "reference": None if result.reference is None else asdict(result.reference),
    }


def write_json(result: Result, path: str) -> None:
    with open(path, "w") as out:
        json.dump(to_json(result), out, indent=1)
        out.write("\n")
