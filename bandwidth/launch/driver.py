"""``run(config, environ)``: one launch from a LaunchConfig, without the command line.

Steps: check the launcher's programs and the open-file limit (``fdlimit``); find the hosts (``-H``, a Slurm allocation, or this
one); host the rendezvous TCPStore (a taken ``--port`` fails
here, before anything starts); place the processes; with ``--sync-dst-dir`` copy the working
directory to every host (all hosts at once, each once); start and supervise the processes. Returns
when all exited with status 0; raises ``LaunchFailed`` (one report, the exit status) or
``ConfigError``/``UnsupportedError`` (bad input) otherwise. Nothing started is left running.
"""

from __future__ import annotations

import logging
import os
import secrets
from collections.abc import Mapping

from bandwidth.launch.planning.config import LaunchConfig
from bandwidth.launch.contract.environment import Job, job_store
from bandwidth.launch.supervision.fdlimit import ensure_fd_limit
from bandwidth.launch.contract.forwarding import child_environ
from bandwidth.launch.supervision.ending import write_report
from bandwidth.launch.contract.heartbeat import HeartbeatWatch
from bandwidth.launch.planning.hostfile import LOCALHOST
from bandwidth.launch.supervision.limits import check_startable, host_limits
from bandwidth.launch.launchers.table import LAUNCHERS, check_config, check_programs
from bandwidth.launch.planning.plan import make_plan
from bandwidth.launch.preflight import PREFLIGHT_MIN_PROCESSES, check_measure_command
from bandwidth.launch.supervision.rankends import SaidWatch
from bandwidth.launch.rendezvous import (JoinWatch, address_towards, bind_address, free_port,
                                         open_store)
from bandwidth.launch.supervision.supervisor import Failure, LaunchFailed, Supervisor
from bandwidth.progress import Stages

log = logging.getLogger(__name__)


def run(config: LaunchConfig, environ: Mapping[str, str]) -> None:
    check_config(config)
    launcher = LAUNCHERS[config.launcher]
    check_programs(launcher, config)
    placed_count = config.num_workers + config.num_servers + \
        (1 if config.scheduler and launcher.place_scheduler else 0)
    ensure_fd_limit(placed_count, f"-n {config.num_workers} -s {config.num_servers}")
    hosts = config.hosts or (launcher.allocation(environ, placed_count)
                             if launcher.allocation is not None else (LOCALHOST,))
    if hosts == (LOCALHOST,):              # every process on this host: can it start them?
        check_startable(config.num_workers + config.num_servers + int(config.scheduler),
                        config.num_workers + config.num_servers, host_limits())
    master_addr = config.master_addr or address_towards(hosts)
    _preflight(config, launcher, environ, master_addr)
    # Lives as long as this call, on the address the job uses (see rendezvous.bind_address).
    # Behind a gate that serves only clients proving they know the secret (launch.storegate).
    secret = secrets.token_hex(16)
    hosted = open_store(config.port, config.timeout_s, bind_address(hosts, config.master_addr),
                        "" if config.open_store else secret)
    try:
        _run(config, launcher, hosts, master_addr, hosted, secret, environ)
    finally:
        hosted.close()


def _run(config: LaunchConfig, launcher, hosts, master_addr: str, hosted, secret: str,
         environ: Mapping[str, str]) -> None:
    store = hosted.store
    ps_root_port = free_port() if config.scheduler else hosted.port
    job = Job(config.num_workers, config.num_servers, master_addr, hosted.port, ps_root_port,
              launcher.name, secret, heartbeat_s=config.heartbeat_s,
              open_store=config.open_store)
    plan = make_plan(config, job, hosts, place_scheduler=launcher.place_scheduler,
                     environ=environ)
    log.info("%s launcher: %d workers, %d servers%s on %d hosts; rendezvous at %s:%d",
             launcher.name, job.num_workers, job.num_servers,
             " and a scheduler" if config.scheduler else "", len(set(plan.hosts)),
             master_addr, hosted.port)
    if config.sync_dst_dir is not None:
        # No start timeout: copying takes as long as the tree is big; ssh's own
        # ConnectTimeout still bounds reaching each host.
        Supervisor(launcher.sync(plan), start_timeout_s=float("inf")).run()
    # A host that ssh cannot reach is named by its ssh child (255, "connection timed out") at the
    # start timeout; the rendezvous watch waits that long and a second more, so that it does not
    # name the same missing rank first as one that never joined (a coin flip at 17 s on the lab).
    joining = Stages()             # the rendezvous's count, once a wait for it passes 10 s
    start_s = launcher.start_timeout_s(config.timeout_s)
    join_s = config.timeout_s if start_s <= config.timeout_s else start_s + 1.0
    watch = JoinWatch(job_store(store, job.secret), [role.label for role, _ in plan.world],
                      join_s, f"{master_addr}:{hosted.port}",
                      advice="raise launch.py --timeout" if config.timeout_given else
                      "the default grew with the job; give launch.py --timeout for more",
                      patient=not config.timeout_given, stages=joining)
    beats = HeartbeatWatch(job_store(store, job.secret), range(job.world_size),
                           config.heartbeat_s, crowded_misses(config.heartbeat_misses,
                                                              job.world_size, os.cpu_count())) \
        if config.heartbeat_s > 0 else None
    said = SaidWatch(job_store(store, job.secret), job.world_size) \
        if launcher.rank_records else None

    def check(elapsed_s: float) -> Failure | None:
        """The rendezvous watch; first, the launcher's own open-file limit, which a program
        holding connections to the store's port exhausts (was blamed on a worker)."""
        trouble = hosted.out_of_files()
        if trouble:
            return Failure("launcher", trouble, 1)
        return watch(elapsed_s)

    supervisor = Supervisor(launcher.build(plan), check=check, heartbeat=beats, said_watch=said,
                            start_timeout_s=launcher.start_timeout_s(config.timeout_s))
    try:
        supervisor.run()
    except LaunchFailed as failed:
        trouble = hosted.out_of_files()
        if not trouble or failed.failure.subject == "launcher":
            raise
        # a process that could not reach the store failed first, but the cause is the launcher's
        # open-file limit: say that, with what the process said as its consequence
        cause = Failure("launcher", trouble, 1)
        raise LaunchFailed(cause, cause.report() + "\n  then, as a consequence: "
                           f"{failed.failure.subject} {failed.failure.what}") from None
    finally:
        joining.close()            # a terminal's bar line blanked before any report
        if config.report_path:
            _write_report(config.report_path, supervisor)


def crowded_misses(misses: float, processes: int, cores: int | None) -> float:
    """The heartbeat's threshold in intervals for ``processes`` sharing ``cores``: beyond 4
    processes a core, a process's beating thread waits its turn among them (20 starting on 2
    cores went 5 s without a beat), so the threshold grows in proportion."""
    return misses * max(1.0, processes / (4 * (cores or 1)))


def _write_report(path: str, supervisor: Supervisor) -> None:
    doc = supervisor.report_doc()
    doc["exit_code"] = supervisor.failure.exit_code if supervisor.failure is not None else 0
    try:
        write_report(path, doc)
    except OSError as err:
        log.error("--report %s: cannot write it: %s", path, err.strerror or err)


def _preflight(config: LaunchConfig, launcher, environ: Mapping[str, str],
               master_addr: str) -> None:
    """A measure.py command checked once, as worker 0 would run it (bandwidth.launch.preflight);
    nothing connects to this job's rendezvous, which is not open yet."""
    if config.num_workers + config.num_servers + int(config.scheduler) < PREFLIGHT_MIN_PROCESSES:
        return
    # Ports are not opened here; the scheduler's must differ from the store's, as a real launch
    # gives it one of its own (Job.has_scheduler), or MXNet's dist modes refuse without one.
    job = Job(config.num_workers, config.num_servers, master_addr, 1,
              2 if config.scheduler else 1, launcher.name, "preflight")
    env = child_environ(environ, config.env, same_host=True)
    env.update(job.role(0, master_addr, (0, 1)).to_environ())
    cwd = config.workdir if os.path.isdir(config.workdir) else os.getcwd()
    check_measure_command(config.command, env, cwd)
