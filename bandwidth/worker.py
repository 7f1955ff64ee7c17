"""One rank of a run of one process per device; started by bandwidth.spawn, not by hand.

    python -m bandwidth.worker --rank R --world-size N --store-port P --payload F --result F
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

from bandwidth.config import Config
from bandwidth.errors import BandwidthError
from bandwidth.group import DistGroup
from bandwidth.report import discard_stdout
from bandwidth.run import make_plan, measure_task, reference_task


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bandwidth.worker")
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--world-size", type=int, required=True)
    parser.add_argument("--store-port", type=int, required=True)
    parser.add_argument("--payload", required=True)
    parser.add_argument("--result", required=True)
    parser.add_argument("--timeout", type=float, default=300.0)
    args = parser.parse_args(argv)
    payload = json.loads(Path(args.payload).read_text())
    try:
        result = execute(payload, args.rank, args.world_size, args.store_port, args.timeout)
    except BandwidthError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    if args.rank == 0:
        Path(args.result).write_text(json.dumps(result))
    return 0


def execute(payload: dict, rank: int, world_size: int, port: int, timeout_s: float) -> dict:
    if payload["tasks"] == ["collectives"]:
        # The ceiling's collective sweep (bandwidth.ceiling.collectives): no Config, its own spec.
        from bandwidth.ceiling.collectives import rank_task
        return {"collectives": rank_task(payload["collectives"], rank, world_size, port,
                                         timeout_s)}
    plan = make_plan(Config.from_dict(payload["config"]))
    device = plan.devices.torch_device(rank)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    timeout = timedelta(seconds=timeout_s)
    # This host's ranks, or (dist_nccl under launch.py) a slice of a job-wide world.
    meet = payload.get("rendezvous") or {"host": "127.0.0.1", "port": port, "prefix": "",
                                         "first_rank": 0, "world_size": world_size}
    store = dist.TCPStore(meet["host"], meet["port"], is_master=False, timeout=timeout)
    if meet["prefix"]:
        store = dist.PrefixStore(meet["prefix"], store)
    first = meet["first_rank"]
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo", store=store,
                            rank=first + rank, world_size=meet["world_size"], timeout=timeout,
                            device_id=device if device.type == "cuda" else None)
    try:
        group = DistGroup(device)
        result = {}
        if "measure" in payload["tasks"]:
            def print_report(report):
                try:
                    print(report.line(), flush=True)
                except BrokenPipeError:
                    # measure.py's reader went away; measure on, and let measure.py end
                    # quietly when it next prints (stopping this rank would fail the run).
                    discard_stdout()
            on_report = print_report if rank == 0 and payload.get("print_reports") else None
            result["measure"] = measure_task(plan, [rank], group, on_report,
                                             first_replica=first, replicas=meet["world_size"])
        if "reference" in payload["tasks"]:
            result["reference"] = reference_task(plan, [rank], group,
                                                 replicas=meet["world_size"])
        return result
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
