"""One configuration under launch.py or torchrun (``execute_distributed``): workers measure and
print MXNet's lines, servers serve, the first worker prints the summary and judges it against
--network-ceiling and --link-rate; ``preflight``: launch.py's check of the command line."""

from __future__ import annotations

import os

from bandwidth.backends import engines
from bandwidth.backends.registry import store_class
from bandwidth.config.job import Job
from bandwidth.errors import ConfigError
from bandwidth.execution import roles as toolkit_roles
from bandwidth.hardware.environment import describe as describe_environment
from bandwidth.hardware.memory import return_freed_memory
from bandwidth.launch.preflight import PREFLIGHT_ENV
from bandwidth.plan.plan import make_plan, size_line
from bandwidth.progress import Stages
from bandwidth.report.text import document, preamble, summary_lines, worker_lines, write_document
from bandwidth.results.result import Result


def preflight(role) -> bool:
    """Under launch.py's check of the command line (bandwidth.launch.preflight): stop here, every
    flag and the plan checked, nothing measured."""
    return role is not None and os.environ.get(PREFLIGHT_ENV) == "1"


def execute_distributed(job: Job, role) -> int:
    """One configuration under launch.py: workers measure and print MXNet's lines, servers serve,
    and the first worker prints the summary with every worker's line."""
    engine = engines.engine(job.configs[0])
    # MXNet's: ps-lite (mxnet imported there); the toolkit's: bandwidth.execution.roles
    roles = engine.roles() if engine.roles is not None else toolkit_roles

    if job.is_sweep:
        raise ConfigError(f"the distributed modes measure one configuration per launch, not "
                          f"{len(job.configs)}; give one --kv-store, --network, device set and "
                          "--backend. To compare backends or modes, launch once per "
                          "configuration with --json and join the files: python -m "
                          "bandwidth.compare a.json b.json")
    (config,) = job.configs
    on_worker = role is None or role.name == "worker"
    plan = make_plan(config, store_class, with_devices=on_worker)
    roles.check_role(config.kv_store, role,
                     servers_needed=not plan.store_cls.traits.process_per_device)
    if preflight(role):
        return 0
    return_freed_memory()        # a process's memory stays what it holds (issue 27)
    if on_worker and role.task_id == 0:
        for line in preamble(plan, describe_environment(plan.devices)):
            print(line)
    if on_worker:
        print(size_line(plan.shapes, config.dtype), flush=True)
    # 100 workers' lines would flood the terminal: worker 0's by default (every worker's
    # iterations are in the JSON's 'workers').
    prints = on_worker and (role.task_id == 0 or job.all_worker_lines)
    # The worker that prints says what a wait of more than 10 s is doing (the set-up, a slow
    # iteration); only worker 0, so that 100 workers do not say it 100 times.
    stages = Stages().watching() if on_worker and role.task_id == 0 else Stages.quiet()

    def report_line(report) -> None:
        stages.said()
        print(report.line(), flush=True)

    with stages:
        result = roles.run_distributed(plan, role, on_report=report_line if prints else None,
                                       stages=stages)
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
    from bandwidth.links.hostmatrix import HostCeiling, host_ceiling

    if not result.worker_hosts:             # --backend mxnet: ps-lite does not say where
        return HostCeiling(matrix.file, None, None, None,
                           "this backend does not report the job's hosts")
    return host_ceiling(matrix, result.worker_hosts, result.server_hosts,
                        [w.network_gbps for w in result.workers])


def measured_link_bound(rate_bits: int, result: Result):
    """--link-rate: the full-duplex bound of a step on this job's hosts
    (bandwidth.links.linkbound)."""
    from bandwidth.links.linkbound import link_bound, ps_host_bytes, ring_host_bytes

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

