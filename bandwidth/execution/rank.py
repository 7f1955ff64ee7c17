"""One rank of a run of one process per device; started by bandwidth.processes.spawn, not by hand.

    python -m bandwidth.execution.rank --rank R --world-size N --store-port P --parent-pid PID \
        [--result-fd FD] [--timeout S]  < payload (one JSON line; stdin then stays open)

The payload arrives on stdin, and stdin stays open for the rank's whole life: end-of-file on it
means the parent is gone or is stopping this rank, which then kills its own process group at once
(``bandwidth.launch.supervision.lifeline``; on Linux the kernel also sends SIGKILL when the parent
dies). Rank 0 writes its result as JSON to ``--result-fd``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from datetime import timedelta

from bandwidth.launch.supervision.lifeline import (Watchdog, die_with_parent, read_line,
                                                   watch_lifeline)

if __name__ == "__main__":
    # Before the slow imports: a parent that dies while torch loads must not leave this rank.
    if "--parent-pid" in sys.argv[:-1]:
        die_with_parent(int(sys.argv[sys.argv.index("--parent-pid") + 1]))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from bandwidth.backends.registry import store_class  # noqa: E402
from bandwidth.config.options import Config  # noqa: E402
from bandwidth.errors import BandwidthError  # noqa: E402
from bandwidth.launch.contract.environment import job_store  # noqa: E402
from bandwidth.launch.contract.storegate import connect  # noqa: E402
from bandwidth.measurement.probe import probe_task  # noqa: E402
from bandwidth.measurement.tasks import measure_task, reference_task, say  # noqa: E402
from bandwidth.plan.plan import make_plan  # noqa: E402
from bandwidth.processes.group import DistGroup  # noqa: E402
from bandwidth.report.stream import discard_stdout, whole_lines  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bandwidth.execution.rank")
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--world-size", type=int, required=True)
    parser.add_argument("--store-port", type=int, required=True)
    parser.add_argument("--parent-pid", type=int, required=True)
    parser.add_argument("--result-fd", type=int, default=None)
    parser.add_argument("--timeout", type=float, default=300.0)
    args = parser.parse_args(argv)
    whole_lines()                   # its lines share measure.py's stdout with the other ranks'
    payload = json.loads(read_line(0))
    watch_lifeline(0)
    try:
        result = execute(payload, args.rank, args.world_size, args.store_port, args.timeout)
    except BandwidthError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except (dist.DistError, RuntimeError) as exc:
        # A peer that is gone or stopped answering (a store or collective timeout, a closed
        # connection): one line, the first of torch's message; the parent names the cause.
        first = next((line.strip() for line in str(exc).splitlines() if line.strip()), "")
        print(f"error: rank {args.rank}: {type(exc).__name__}: {first[:300]}", file=sys.stderr)
        return 1
    if args.result_fd is not None:
        with os.fdopen(args.result_fd, "wb") as out:
            out.write(json.dumps(result).encode())
    return 0


def execute(payload: dict, rank: int, world_size: int, port: int, timeout_s: float) -> dict:
    if payload["tasks"] == ["collectives"]:
        # The ceiling's collective sweep (bandwidth.ceiling.collectives): no Config, its own spec.
        from bandwidth.ceiling.collectives import rank_task
        return {"collectives": rank_task(dict(payload["collectives"], secret=payload["secret"]),
                                         rank, world_size, port, timeout_s)}
    plan = make_plan(Config.from_dict(payload["config"]), store_class)
    device = plan.devices.torch_device(rank)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    timeout = timedelta(seconds=timeout_s)
    # This host's ranks, or (dist_nccl under launch.py) a slice of a job-wide world.
    meet = payload.get("rendezvous") or {"host": "127.0.0.1", "port": port, "prefix": "",
                                         "first_rank": 0, "world_size": world_size}
    secret = meet.get("secret") or payload.get("secret", "")
    store = job_store(connect(meet["host"], meet["port"], secret, timeout_s,
                              gated=meet.get("gated", True)), secret)
    if meet["prefix"]:
        store = dist.PrefixStore(meet["prefix"], store)
    first = meet["first_rank"]
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo", store=store,
                            rank=first + rank, world_size=meet["world_size"], timeout=timeout,
                            device_id=device if device.type == "cuda" else None)
    try:
        def print_report(report):
            try:
                print(report.line(), flush=True)
            except BrokenPipeError:
                # measure.py's reader went away; measure on, and let measure.py end
                # quietly when it next prints (stopping this rank would fail the run).
                discard_stdout()
        on_report = print_report if rank == 0 and payload.get("print_reports") else None
        return run_tasks(plan, payload["tasks"], rank, DistGroup(device), on_report, first,
                         meet["world_size"])
    finally:
        dist.destroy_process_group()


def run_tasks(plan, tasks: list[str], rank: int, group: DistGroup, on_report, first: int,
              world_size: int, stages=None) -> dict:
    """A rank's tasks over ``group`` (this process's default group): device ``rank`` of the
    plan, replica ``first + rank`` of ``world_size``; ``stages``: where a long wait is said
    (bandwidth.progress.Stages)."""
    result = {}
    if "measure" in tasks:
        result["measure"] = measure_task(plan, [rank], group, on_report,
                                         first_replica=first, replicas=world_size,
                                         stages=stages)
    if "reference" in tasks:
        result["reference"] = reference_task(plan, [rank], group, replicas=world_size,
                                             say=say if on_report is not None else None)
    if "probe" in tasks:
        # dist_nccl: each rank with its neighbours, untimed in the figures above.
        with Watchdog(plan.config.timeout_s, "the neighbour probe") as dog:
            result["probe"] = probe_task(plan.devices.torch_device(rank), group, first + rank,
                                         plan.devices.n, world_size, kick=dog.kick)
    return result


if __name__ == "__main__":
    sys.exit(main())
