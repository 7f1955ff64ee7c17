"""The toolkit's roles in the distributed modes under launch.py (its engine's ``roles``): each
process's part, chosen by its role.

    python launch.py -n 2 -s 2 python bandwidth/measure.py --kv-store dist_sync --cpus 2
    python launch.py -n 2 -s 0 python bandwidth/measure.py --kv-store dist_nccl --gpus 0,1

Parameter-server modes: workers and servers join one Gloo group at the launcher's rendezvous (ranks
and addresses from bandwidth.launch.contract.environment); the workers measure with the usual
protocol over a group of the workers only, and the servers serve exactly as many steps (warm-up
included). ``dist_nccl``: every worker starts one process per device (a worker of one CPU device is
its own rank), and all of them, over all workers, form one NCCL (Gloo on CPU devices) all-reduce;
they then time one flat all-reduce of the same bytes, the reference and ceiling. Every worker
measures and prints MXNet's lines; the first gathers every worker's own time and what the network
carried over the workers' group, and prints the summary.
"""

from __future__ import annotations

import socket
import statistics
import time
from dataclasses import replace
from datetime import timedelta

import torch
import torch.distributed as dist

from bandwidth.arrays import optimizers
from bandwidth.arrays.dtypes import DTYPE_BYTES
from bandwidth.arrays.layout import TORCH_DTYPES
from bandwidth.ceiling.bounds import Bound, judged
from bandwidth.config.job import server_settings
from bandwidth.errors import ConfigError, UnsupportedError
from bandwidth.launch.contract.environment import SERVER, WORKER, Role, join_store
from bandwidth.measurement.costs import exchange_steps
from bandwidth.measurement.protocol import Summary
from bandwidth.measurement.tasks import measure_task
from bandwidth.plan.plan import Plan, make_plan
from bandwidth.processes.group import DistGroup, all_gather_json
from bandwidth.processes.spawn import run_ranks
from bandwidth.progress import Stages
from bandwidth.results.gathered import worker_result
from bandwidth.results.ranks import probe_neighbours, probe_summary, rank_records
from bandwidth.results.result import Result
from bandwidth.hardware import linkcounters
from bandwidth.stores.dist import Cluster, messages, post_messages, ps_layout
from bandwidth.schedules.runner import exchange_order
from bandwidth.hardware.memory import job_memory, peak_rss_bytes
from bandwidth.stores.psserver import Served, echo, echo_slots, serve

DIST_NCCL_PREFIX = "bandwidth/dist_nccl/"
DIST_NCCL_WORKERS_PREFIX = "bandwidth/dist_nccl_workers/"


def check_role(kv_store: str, role: Role | None, servers_needed: bool) -> None:
    example = (f"python launch.py -n 2 -s {2 if servers_needed else 0} python "
               f"bandwidth/measure.py --kv-store {kv_store} ...")
    torchrun = (f"torchrun --nproc-per-node 4 -m bandwidth.measure --kv-store {kv_store}"
                f"{' --num-servers 2' if servers_needed else ''} ...")
    if role is None:
        raise UnsupportedError(f"--kv-store {kv_store} runs under the launcher, which starts the "
                               f"workers and servers: {example}, or {torchrun}")
    if servers_needed and role.job.num_servers < 1:
        if role.job.cluster in ("torchrun", "env"):
            raise UnsupportedError(f"--kv-store {kv_store} needs at least one server "
                                   f"(--num-servers 1): {torchrun}")
        raise UnsupportedError(f"--kv-store {kv_store} needs at least one server (-s 1): {example}")


def check_single_host(kv_stores: list[str], role: Role | None) -> None:
    """Refuse a single-host mode (local, device, nccl) in a launch with servers or a scheduler.

    Nothing would serve there: under --backend mxnet a server or scheduler process would wait in
    ps-lite's server loop (entered inside ``import mxnet``) forever, and under the toolkit every
    process, servers included, would measure on its own at the same time. Every process of such a
    launch refuses, so the launcher stops the job at once. Several workers (torchrun
    --nproc-per-node 2, launch.py -n 2 -s 0) are refused too: each would measure on its own, N
    independent copies with N summaries, sharing the host's devices, where a torchrun user
    expects one job over the ranks (that is dist_nccl). One worker alone runs as without a
    launcher. Called before anything imports mxnet.
    """
    if role is None:
        return
    modes = ",".join(kv_stores)
    if role.name == WORKER and role.job.num_servers == 0 and not role.job.has_scheduler:
        if role.job.num_workers > 1:
            raise ConfigError(
                f"--kv-store {modes} measures one host from one process (it starts its own "
                f"per-device processes), but this launch ({role.job.cluster}) has "
                f"{role.job.num_workers} workers, which would run as independent copies sharing "
                "the devices: run "
                "measure.py once without a launcher, or use --kv-store dist_nccl for one "
                "all-reduce over every rank")
        return
    started = [f"{role.job.num_servers} server{'s' if role.job.num_servers != 1 else ''}"]
    if role.job.has_scheduler:
        started.append("a scheduler")
    raise ConfigError(f"--kv-store {modes} runs on one host: local, device and nccl "
                      f"need no servers or scheduler, but launch.py started "
                      f"{' and '.join(started)}; run measure.py "
                      "without launch.py, or with launch.py -s 0 and no --scheduler")


def run_distributed(plan: Plan, role: Role, on_report, stages: Stages | None = None
                    ) -> Result | None:
    """This process's part; the Result on workers, None on servers and the scheduler.
    ``stages``: where worker 0 says what a long wait is doing (bandwidth.progress)."""
    stages = stages or Stages.quiet()
    store_cls = plan.store_cls
    check_role(plan.config.kv_store, role, servers_needed=not store_cls.traits.process_per_device)
    if role.name not in (WORKER, SERVER):
        return None                      # the toolkit's engine needs no scheduler
    if store_cls.traits.process_per_device:
        return _dist_nccl(plan, role, on_report, stages)
    return _parameter_server(plan, role, on_report, stages)


def _parameter_server(plan: Plan, role: Role, on_report, stages: Stages) -> Result | None:
    c = plan.config
    timeout = timedelta(seconds=c.timeout_s)
    stages.enter(f"setting up: the Gloo group of {role.job.num_workers} workers and "
                 f"{role.job.num_servers} servers")
    dist.init_process_group("gloo", store=join_store(role, c.timeout_s), rank=role.rank,
                            world_size=role.world_size, timeout=timeout)
    try:
        hosts = all_gather_json(role.node_host, role.world_size)   # the workers, then servers
        workers = dist.new_group(list(range(role.job.num_workers)))
        # One group per direction, so that pushes and pulls share no Gloo pair (see Cluster).
        everyone = list(range(role.world_size))
        sync = plan.store_cls.traits.sync
        takes, keys = server_settings(c.server_takes, c.server_keys, sync=sync,
                                      workers=role.job.num_workers, servers=role.job.num_servers,
                                      max_in_flight=c.max_in_flight)
        cluster = Cluster(role.job.num_workers, role.job.num_servers,
                          role.task_id if role.name == WORKER else 0,
                          push_group=dist.new_group(everyone), pull_group=dist.new_group(everyone),
                          max_in_flight=c.max_in_flight, server_order=c.server_order,
                          server_admit=c.server_admit, server_keys=keys, server_takes=takes)
        stages.enter("setting up: the raw exchange between workers and servers (the ceiling), "
                     "4 rounds")
        raw = _raw_exchange(plan, cluster, role) if c.reference else None
        counters_before = linkcounters.snapshot()
        served = Served([], [])                   # a server's measured steps
        if role.name == SERVER:
            served = serve(plan.shapes, cluster, role.task_id, devices=1, by_owner=False,
                           sync=sync, optimizer=optimizers.make(c.optimizer),
                           dtype=c.dtype, iterations=exchange_steps(plan),
                           parts=_server_parts(plan)).measured(c.warmup, c.num_batches)
            result = None
        else:
            group = DistGroup(torch.device("cpu"), group=workers)
            per_worker = plan.devices.n
            measured = measure_task(plan, list(range(per_worker)), group, on_report,
                                    cluster=cluster, first_replica=role.task_id * per_worker,
                                    replicas=role.job.num_workers * per_worker, stages=stages)
            stages.enter("gathering every worker's and server's figures")
            result = worker_result(plan, measured, group, role.job.num_workers * per_worker)
            result.worker_hosts = hosts[:role.job.num_workers]
            result.server_takes = cluster.server_takes
            result.server_hosts = hosts[role.job.num_workers:]
            if raw is not None:
                result.ceiling = _raw_bound(plan, result.summary, group.max(raw))
        counters = gather_counters(counters_before, c.warmup + c.num_batches, hosts,
                                   role.world_size, role.job.num_workers)
        if result is not None:
            result.link_counters = counters
        # Every process's peak RSS, to worker 0 (JSON: nothing received is unpickled).
        peaks = all_gather_json(peak_rss_bytes(), role.world_size)
        served_by = all_gather_json(served.to_json(), role.world_size)[role.job.num_workers:]
        if result is not None:
            result.memory = job_memory(peaks[:role.job.num_workers], peaks[role.job.num_workers:])
            result.ranks = rank_records(result.workers, result.worker_hosts,
                                        result.server_hosts,
                                        [s["seconds"] for s in served_by],
                                        [s["waits"] for s in served_by])
        dist.barrier()                   # every worker and server is done
        return result
    finally:
        dist.destroy_process_group()


def _server_parts(plan: Plan) -> list | None:
    """A schedule's parts as the servers serve them: each part's arrays, in the order the
    workers push them (None: flat, every array in one part)."""
    if plan.schedule is None:
        return None
    return [plan.schedule.part_shapes(plan.schedule.parts[i])
            for i in exchange_order(plan.schedule)]


def gather_counters(before: dict, steps: int, hosts: list, world_size: int,
                    num_workers: int) -> dict | None:
    """Every process's counters since ``before``, per step, gathered (a collective over the
    default group of ``world_size`` processes, ``hosts`` theirs in rank order): one entry per
    host, or None where every process ran on one host (no link crossed)."""
    counters = all_gather_json(linkcounters.difference(before, linkcounters.snapshot(), steps),
                               world_size)
    return per_host_counters(hosts, num_workers, counters) if len(set(hosts)) > 1 else None


def per_host_counters(hosts: list, num_workers: int, counters: list) -> dict:
    """One difference per host (its processes read the same counters), with its processes."""
    out: dict = {}
    for rank, (host, found) in enumerate(zip(hosts, counters)):
        role = f"worker {rank}" if rank < num_workers else f"server {rank - num_workers}"
        entry = out.setdefault(host, {**found, "processes": []})
        entry["processes"].append(role)
    return out


def _raw_bound(plan: Plan, summary: Summary, raw_seconds: float) -> Bound:
    """The raw exchange of the same run as the ceiling: in busbw where the worker has several
    devices (MXNet's formula), else in algbw (a worker pushes S and pulls S per step, so algbw
    is its bytes each way per second), which one device's busbw of 0 cannot show."""
    name = "raw Gloo send+recv between workers and servers, same bytes and messages, same run"
    if summary.bus_factor:
        found = Bound(name, plan.nbytes * summary.bus_factor / raw_seconds / 1e9)
    else:
        found = Bound(name + ", algbw", plan.nbytes / raw_seconds / 1e9, of="algbw")
    return judged(found, found.figure(summary), on_cpu=not plan.devices.is_cuda)


def _raw_exchange(plan: Plan, cluster: Cluster, role: Role, repeats: int = 3) -> float | None:
    """The transport alone: every worker sends each server its share in the same messages and
    gets it straight back, all at once, as a step does without any reduction or update. Returns
    the worker's median seconds (None on servers)."""
    _, ranges = ps_layout(plan.shapes, cluster.num_servers, 1, by_owner=False,
                          keys=cluster.server_keys)
    element = DTYPE_BYTES[plan.config.dtype]
    plan_messages = messages(ranges, element)
    if role.name == WORKER:
        # One buffer both ways, as a step's (Traits.pulls_into_gradients): an answer comes
        # only once its push has left, so the worker holds S, not 2 S, here too.
        out = torch.ones(plan.numel, dtype=TORCH_DTYPES[plan.config.dtype])
    else:                                         # a server's bound: 3 x its share (psserver)
        mine = [(tag, s, e) for tag, (server, s, e) in enumerate(plan_messages)
                if server == role.task_id]
        a, b = ranges[role.task_id]
        slots = echo_slots(b - a, max((e - s for _, s, e in mine), default=0),
                           TORCH_DTYPES[plan.config.dtype])
    seconds = []
    for i in range(repeats + 1):                  # the first one is a warm-up
        dist.barrier()
        start = time.perf_counter()
        if role.name == WORKER:                   # posted as a step posts them
            for work in post_messages(cluster, plan_messages, out, out):
                work.wait()
        else:
            echo(slots, mine, cluster, role.task_id)
        if i:
            seconds.append(time.perf_counter() - start)
    return statistics.median(seconds) if role.name == WORKER else None


def _dist_nccl(plan: Plan, role: Role, on_report, stages: Stages) -> Result | None:
    c = plan.config
    store = join_store(role, c.timeout_s)        # registers this rank with the launcher
    if role.name != WORKER:
        return None
    stages.enter(f"setting up: the Gloo group of {role.job.num_workers} workers")
    # The workers themselves (one process each, not one per device) form a small Gloo group of
    # their own, through which the first worker gathers the summary.
    dist.init_process_group("gloo", store=dist.PrefixStore(DIST_NCCL_WORKERS_PREFIX, store),
                            rank=role.task_id, world_size=role.job.num_workers,
                            timeout=timedelta(seconds=c.timeout_s))
    try:
        hosts = all_gather_json(role.node_host, role.job.num_workers)
        plan = _own_share(plan, role)
        c = plan.config
        per_worker = plan.devices.n
        replicas = role.job.num_workers * per_worker
        # The reference: one flat all-reduce of the same bytes over the same world, same run.
        tasks = ["measure"] + (["reference"] if c.reference and replicas > 1 else [])
        # Each worker with its neighbours, after the steps: where a slow link hides from the
        # step times, which an all-reduce evens out (bandwidth.measurement.probe).
        tasks += ["probe"] if c.probe and role.job.num_workers > 1 else []
        counters_before = linkcounters.snapshot()
        if per_worker == 1 and not plan.devices.is_cuda:
            # One CPU device per worker: the workers' Gloo group is the ranks' world (the same
            # ranks, the same backend), so the worker is its own rank and starts no process per
            # device: 100 ranks are 100 processes, not 200 (about 150 MB each before any work).
            from bandwidth.execution.rank import run_tasks
            out = run_tasks(plan, tasks, 0, DistGroup(torch.device("cpu")), on_report,
                            role.task_id, replicas, stages=stages)
        else:
            stages.enter(f"measuring in {per_worker} processes, one per device")
            out = run_ranks({"config": c.to_dict(), "tasks": tasks,
                             "print_reports": on_report is not None,
                             "rendezvous": {"host": role.master_addr, "port": role.master_port,
                                            "secret": role.job.secret, "gated": role.job.gated,
                                            "prefix": DIST_NCCL_PREFIX,
                                            "first_rank": role.task_id * per_worker,
                                            "world_size": replicas}},
                            per_worker, c.timeout_s)
        # The host's counters over every all-reduce of the run (the reference moves the same
        # bytes as a step, so the figures stay per step).
        all_reduces = exchange_steps(plan) + (c.warmup + c.num_batches if "reference" in tasks
                                              else 0)
        stages.enter("gathering every worker's figures")
        counters = gather_counters(counters_before, all_reduces, hosts, role.job.num_workers,
                                   role.job.num_workers)
        result = worker_result(plan, out["measure"], DistGroup(torch.device("cpu")), replicas,
                               reference=out.get("reference"))
        result.worker_hosts = hosts               # dist_nccl's servers take no part
        probe = out.get("probe")
        result.probe = probe_summary(probe)
        result.ranks = rank_records(result.workers, hosts,
                                    neighbours=probe_neighbours(probe, hosts) if probe else None)
        result.link_counters = counters
        # A worker and its device ranks, if any (each rank's peak taken as the largest one's).
        peaks = all_gather_json(peak_rss_bytes() + per_worker * peak_rss_bytes(True),
                                role.job.num_workers)
        result.memory = job_memory(peaks, [])
        return result
    finally:
        dist.destroy_process_group()


def machine_id() -> str:
    """This machine, whatever name the hosts file gives it: host name and boot id."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
    except OSError:
        boot = ""
    return f"{socket.gethostname()}/{boot}"


def gpu_uuids(ids: tuple[int, ...]) -> tuple[str, ...]:
    """What identifies each GPU across processes (CUDA_VISIBLE_DEVICES may renumber them)."""
    out = []
    for i in ids:
        uuid = getattr(torch.cuda.get_device_properties(i), "uuid", None)
        out.append(str(uuid) if uuid is not None else f"index {i}")
    return tuple(out)


def gpu_shares(workers: list[tuple[str, str, tuple[str, ...]]]) -> list[tuple[int, ...]]:
    """Which of its own GPUs each worker of ``dist_nccl`` uses: ``workers[w]`` is ``(host as
    launched, machine id, GPU uuids in --gpus order)``; the result holds positions into each
    worker's list. Workers on one machine whose GPUs overlap split them as torchrun's LOCAL_RANK
    would: in worker order, equal consecutive shares. ConfigError (one line, naming the workers
    and the overlap) when the lists differ, do not split evenly, or the shares differ in size
    over the job (every worker must drive as many devices)."""
    shares = []
    for w, (host, machine, uuids) in enumerate(workers):
        sharing = [v for v, (_, m, u) in enumerate(workers) if m == machine and set(u) & set(uuids)]
        if len(sharing) == 1:
            shares.append(tuple(range(len(uuids))))
            continue
        names = ", ".join(f"worker {v}" for v in sharing)
        if any(workers[v][2] != uuids for v in sharing):
            common = sorted(set.intersection(*(set(workers[v][2]) for v in sharing)))
            raise ConfigError(f"--kv-store dist_nccl: {names} on {host} use overlapping but "
                              f"different GPU sets (shared: {', '.join(common)}); give each "
                              "worker its own GPUs (CUDA_VISIBLE_DEVICES) or the same --gpus "
                              "list to split")
        k, g = len(sharing), len(uuids)
        if g % k:
            raise ConfigError(f"--kv-store dist_nccl: {names} on {host} share the same {g} "
                              f"GPU{'s' if g > 1 else ''}, which do not split evenly into {k} "
                              f"workers; give a --gpus list of a multiple of {k} GPUs, or "
                              f"place {g} workers at most on that host")
        i = sharing.index(w)
        shares.append(tuple(range(i * g // k, (i + 1) * g // k)))
    sizes = sorted({len(share) for share in shares})
    if len(sizes) > 1:
        raise ConfigError(f"--kv-store dist_nccl: the workers would drive {sizes[0]} to "
                          f"{sizes[-1]} GPUs each; every worker must drive as many (check "
                          "--gpus and how many workers each host runs)")
    return shares


def _own_share(plan: Plan, role: Role) -> Plan:
    """``plan`` on this worker's own share of the GPUs (see ``gpu_shares``)."""
    ids = plan.devices.ids if plan.devices.is_cuda else ()
    mine = (role.node_host, machine_id(), list(gpu_uuids(ids)))
    everyone = [(str(host), str(machine), tuple(map(str, uuids))) for host, machine, uuids
                in all_gather_json(mine, role.job.num_workers)]
    if not ids:
        return plan                              # CPU devices: replicas in host memory
    share = gpu_shares(everyone)[role.task_id]
    if len(share) == len(ids):
        return plan
    return make_plan(replace(plan.config, gpus=tuple(ids[i] for i in share)),
                     lambda config: plan.store_cls)        # the same mode, fewer GPUs
