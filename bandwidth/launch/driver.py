"""``run(config, environ)``: one launch from a LaunchConfig, without the command line.

Steps: check the launcher's programs; find the hosts (``-H``, a Slurm allocation, or this
one); host the rendezvous TCPStore (a taken ``--port`` fails
here, before anything starts); place the processes; with ``--sync-dst-dir`` copy the working
directory to every host (all hosts at once, each once); start and supervise the processes. Returns
when all exited with status 0; raises ``LaunchFailed`` (one report, the exit status) or
``ConfigError``/``UnsupportedError`` (bad input) otherwise. Nothing started is left running.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Mapping

from bandwidth.launch.config import LaunchConfig
from bandwidth.launch.contract import Job, job_store
from bandwidth.launch.ending import write_report
from bandwidth.launch.heartbeat import HeartbeatWatch
from bandwidth.launch.hostfile import LOCALHOST
from bandwidth.launch.launchers import LAUNCHERS, check_config, check_programs
from bandwidth.launch.plan import make_plan
from bandwidth.launch.rendezvous import (JoinWatch, address_towards, bind_address, free_port,
                                         open_store)
from bandwidth.launch.supervisor import Supervisor

log = logging.getLogger(__name__)


def run(config: LaunchConfig, environ: Mapping[str, str]) -> None:
    check_config(config)
    launcher = LAUNCHERS[config.launcher]
    check_programs(launcher, sync=config.sync_dst_dir is not None)
    placed_count = config.num_workers + config.num_servers + \
        (1 if config.scheduler and launcher.place_scheduler else 0)
    hosts = config.hosts or (launcher.allocation(environ, placed_count)
                             if launcher.allocation is not None else (LOCALHOST,))
    master_addr = config.master_addr or address_towards(hosts)
    # Lives as long as this call, on the address the job uses (see rendezvous.bind_address).
    store = open_store(config.port, config.timeout_s, bind_address(hosts, config.master_addr))
    ps_root_port = free_port() if config.scheduler else store.port
    job = Job(config.num_workers, config.num_servers, master_addr, store.port, ps_root_port,
              launcher.name, secrets.token_hex(16), heartbeat_s=config.heartbeat_s)
    plan = make_plan(config, job, hosts, place_scheduler=launcher.place_scheduler,
                     environ=environ)
    log.info("%s launcher: %d workers, %d servers%s on %d hosts; rendezvous at %s:%d",
             launcher.name, job.num_workers, job.num_servers,
             " and a scheduler" if config.scheduler else "", len(set(plan.hosts)),
             master_addr, store.port)
    if config.sync_dst_dir is not None:
        # No start timeout: copying takes as long as the tree is big; ssh's own
        # ConnectTimeout still bounds reaching each host.
        Supervisor(launcher.sync(plan), start_timeout_s=float("inf")).run()
    watch = JoinWatch(job_store(store, job.secret), [role.label for role, _ in plan.world],
                      config.timeout_s, f"{master_addr}:{store.port}")
    beats = HeartbeatWatch(job_store(store, job.secret), range(job.world_size),
                           config.heartbeat_s, config.heartbeat_misses) \
        if config.heartbeat_s > 0 else None
    supervisor = Supervisor(launcher.build(plan), check=watch, heartbeat=beats,
                            start_timeout_s=launcher.start_timeout_s(config.timeout_s))
    try:
        supervisor.run()
    finally:
        if config.report_path:
            _write_report(config.report_path, supervisor)


def _write_report(path: str, supervisor: Supervisor) -> None:
    doc = supervisor.report_doc()
    doc["exit_code"] = supervisor.failure.exit_code if supervisor.failure is not None else 0
    try:
        write_report(path, doc)
    except OSError as err:
        log.error("--report %s: cannot write it: %s", path, err.strerror or err)
