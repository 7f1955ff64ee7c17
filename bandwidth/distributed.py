"""The distributed modes under launch.py: each process's part, chosen by its role.

    python launch.py -n 2 -s 2 python bandwidth/measure.py --kv-store dist_sync --cpus 2
    python launch.py -n 2 -s 0 python bandwidth/measure.py --kv-store dist_nccl --gpus 0,1

Parameter-server modes: workers and servers join one Gloo group at the launcher's rendezvous
(ranks and addresses from bandwidth.launch.contract); the workers measure with the usual protocol
over a group of the workers only, and the servers serve exactly as many steps (warm-up included).
``dist_nccl``: every worker starts one process per device, and all of them, over all workers, form
one NCCL (Gloo on CPU devices) all-reduce. The first worker gathers every worker's time and prints
what the network carried.
"""

from __future__ import annotations

import statistics
import time
from datetime import timedelta

import torch
import torch.distributed as dist

from bandwidth import optimizers
from bandwidth.errors import UnsupportedError
from bandwidth.group import DistGroup
from bandwidth.bounds import Bound, judged
from bandwidth.kvstores.dist import Cluster, messages, ps_layout
from bandwidth.layout import DTYPE_BYTES, TORCH_DTYPES
from bandwidth.launch.contract import SERVER, WORKER, Role, join_store
from bandwidth.protocol import Report, Sample, Summary
from bandwidth.psserver import serve
from bandwidth.run import Plan, Result, measure_task
from bandwidth.spawn import run_ranks

DIST_NCCL_PREFIX = "bandwidth/dist_nccl/"


def check_role(kv_store: str, role: Role | None, servers_needed: bool) -> None:
    example = (f"python launch.py -n 2 -s {2 if servers_needed else 0} python "
               f"bandwidth/measure.py --kv-store {kv_store} ...")
    if role is None:
        raise UnsupportedError(f"--kv-store {kv_store} runs under the launcher, which starts the "
                               f"workers and servers: {example}")
    if servers_needed and role.job.num_servers < 1:
        raise UnsupportedError(f"--kv-store {kv_store} needs at least one server (-s 1): {example}")


def run_distributed(plan: Plan, role: Role, on_report) -> Result | None:
    """This process's part; the Result on workers, None on servers and the scheduler."""
    store_cls = plan.store_cls
    check_role(plan.config.kv_store, role, servers_needed=not store_cls.process_per_device)
    if role.name not in (WORKER, SERVER):
        return None                      # the toolkit's engine needs no scheduler
    if store_cls.process_per_device:
        return _dist_nccl(plan, role, on_report)
    return _parameter_server(plan, role, on_report)


def _parameter_server(plan: Plan, role: Role, on_report) -> Result | None:
    c = plan.config
    timeout = timedelta(seconds=c.timeout_s)
    dist.init_process_group("gloo", store=join_store(role, c.timeout_s), rank=role.rank,
                            world_size=role.world_size, timeout=timeout)
    try:
        workers = dist.new_group(list(range(role.job.num_workers)))
        cluster = Cluster(role.job.num_workers, role.job.num_servers,
                          role.task_id if role.name == WORKER else 0)
        raw = _raw_exchange(plan, cluster, role) if c.reference else None
        if role.name == SERVER:
            serve(plan.shapes, cluster, role.task_id, devices=1, by_owner=False,
                  sync=plan.store_cls.sync, optimizer=optimizers.make(c.optimizer),
                  dtype=c.dtype, iterations=c.warmup + c.num_batches)
            result = None
        else:
            group = DistGroup(torch.device("cpu"), group=workers)
            per_worker = plan.devices.n
            measured = measure_task(plan, list(range(per_worker)), group, on_report,
                                    cluster=cluster, first_replica=role.task_id * per_worker,
                                    replicas=role.job.num_workers * per_worker)
            result = _result(plan, measured, group, role.job.num_workers * per_worker)
            if raw is not None and result.summary.bus_factor:
                raw_bound = Bound("raw Gloo send+recv between workers and servers, same bytes "
                                  "and messages, same run",
                                  plan.nbytes * result.summary.bus_factor / group.max(raw) / 1e9)
                result.ceiling = judged(raw_bound, result.summary.busbw_median,
                                        on_cpu=not plan.devices.is_cuda)
        dist.barrier()                   # every worker and server is done
        return result
    finally:
        dist.destroy_process_group()


def _raw_exchange(plan: Plan, cluster: Cluster, role: Role, repeats: int = 3) -> float | None:
    """The transport alone: every worker sends each server its share in the same messages and
    gets it straight back, all at once, as a step does without any reduction or update. Returns
    the worker's median seconds (None on servers)."""
    _, ranges = ps_layout(plan.shapes, cluster.num_servers, 1, by_owner=False)
    element = DTYPE_BYTES[plan.config.dtype]
    plan_messages = messages(ranges, element)
    out = torch.ones(plan.numel, dtype=TORCH_DTYPES[plan.config.dtype])
    back = torch.empty_like(out)
    inboxes: list[torch.Tensor] = []
    seconds = []
    for i in range(repeats + 1):                  # the first one is a warm-up
        dist.barrier()
        start = time.perf_counter()
        if role.name == WORKER:
            works = [dist.isend(out[s:e], dst=cluster.server_rank(server), tag=tag)
                     for tag, (server, s, e) in enumerate(plan_messages)]
            works += [dist.irecv(back[s:e], src=cluster.server_rank(server), tag=tag)
                      for tag, (server, s, e) in enumerate(plan_messages)]
        else:                                     # as a server: all receives posted at once
            mine = [(tag, s, e) for tag, (server, s, e) in enumerate(plan_messages)
                    if server == role.task_id]
            inbox = inboxes or [torch.empty_like(out) for _ in range(cluster.num_workers)]
            inboxes = inbox
            arriving = {(w, tag): dist.irecv(inbox[w][s:e], src=w, tag=tag)
                        for tag, s, e in mine for w in range(cluster.num_workers)}
            works = []
            for tag, s, e in mine:
                for w in range(cluster.num_workers):
                    arriving[(w, tag)].wait()
                    works.append(dist.isend(inbox[w][s:e], dst=w, tag=tag))
        for work in works:
            work.wait()
        if i:
            seconds.append(time.perf_counter() - start)
    return statistics.median(seconds) if role.name == WORKER else None


def _dist_nccl(plan: Plan, role: Role, on_report) -> Result | None:
    c = plan.config
    store = join_store(role, c.timeout_s)        # registers this rank with the launcher
    del store
    if role.name != WORKER:
        return None
    per_worker = plan.devices.n
    out = run_ranks({"config": c.to_dict(), "tasks": ["measure"],
                     "print_reports": on_report is not None,
                     "rendezvous": {"host": role.master_addr, "port": role.master_port,
                                    "prefix": DIST_NCCL_PREFIX,
                                    "first_rank": role.task_id * per_worker,
                                    "world_size": role.job.num_workers * per_worker}},
                    per_worker, c.timeout_s)
    return _result(plan, out["measure"], None, role.job.num_workers * per_worker)


def _result(plan: Plan, measured: dict, group, replicas: int) -> Result:
    from bandwidth.environment import describe

    samples = [Sample(**s) for s in measured["samples"]]
    counted = plan.store_cls.counted_devices(plan.devices.n, replicas)
    summary = Summary.of(samples, plan.nbytes, plan.store_cls.bus_factor(counted))
    notes = list(measured["notes"])
    seconds = summary.seconds_median
    if group is not None:
        slowest = group.max(seconds)
        notes.append(f"network: each worker pushes and pulls {plan.nbytes / 1e6:.2f} MB per step; "
                     f"median {plan.nbytes / seconds / 1e9:.3f} GB/s each way on this worker, "
                     f"{plan.nbytes / slowest / 1e9:.3f} GB/s on the slowest of "
                     f"{group.size} workers")
    return Result(plan=plan, environment=describe(plan.devices), samples=samples,
                  reports=[Report(**r) for r in measured["reports"]], summary=summary,
                  reference=None, ceiling=None, notes=notes)

