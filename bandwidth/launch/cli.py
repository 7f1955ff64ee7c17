"""Start a distributed job: MXNet's ``tools/launch.py``, re-created with supervision.

Usage (``python launch.py`` from the repository root, or ``bandwidth-launch`` once installed)::

    python launch.py -n 2 -s 2 python3 train.py                     # 4 processes on this host
    python launch.py -n 4 -s 0 python3 -m bandwidth.measure ...      # all-reduce only, no servers
    python launch.py -H hosts -n 4 -s 2 python3 train.py             # ssh (the default with -H)
    python launch.py -H hosts -n 4 --sync-dst-dir /tmp/job python3 train.py
    python launch.py -H hosts -n 4 --launcher mpi python3 train.py   # one Open MPI mpirun
    python launch.py -n 2 --scheduler python3 mxnet_dist_script.py  # + a ps-lite scheduler
    salloc -n 4 python launch.py --launcher slurm -n 2 -s 2 python3 train.py   # one srun step
    python launch.py -n 2 --env OMP_NUM_THREADS=4 --env HF_HOME --timeout 30 python3 prog.py

Every process gets the environment contract of ``bandwidth.launch.contract.environment``
(``DMLC_ROLE``, ``RANK``, ``MASTER_ADDR``...) and only the forwarded variables of
``bandwidth.launch.contract.forwarding``. Children's stderr is shown live with a ``[worker 0@host]``
prefix; stdout passes through.

Exit status: 0 when every process exited with 0; otherwise the first failing process's status
(128+N if signal N killed it; 255 for an ssh connection failure; 130 after Ctrl-C), after one
``FAIL:`` report on stderr naming its role, rank, host, status and last stderr lines; 2 for bad
input (flags, hosts file, a taken --port), with one line on stderr.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from collections.abc import Mapping, Sequence

from bandwidth import cliexit
from bandwidth.cliparse import OneLineParser, check_output_path
from bandwidth.errors import BandwidthError
from bandwidth.launch.planning.config import (DEFAULT_HEARTBEAT_MISSES, DEFAULT_HEARTBEAT_S,
                                              DEFAULT_TIMEOUT_S, LaunchConfig)
from bandwidth.launch.supervision.child import ReaderGone
from bandwidth.launch.driver import run
from bandwidth.launch.contract.forwarding import parse_env_flags
from bandwidth.launch.planning.hostfile import parse_hostfile
from bandwidth.launch.launchers.table import LAUNCHERS
from bandwidth.launch.preflight import PER_PROCESS_S, startup_timeout


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="launch.py", description="Start a distributed job: workers, servers (and a "
        "scheduler) on this host, over ssh, with mpirun or with srun (inside a Slurm "
        "allocation), supervised until the first failure.",
        epilog="Environment contract: see bandwidth/launch/contract/environment.py. Hosts file "
        "format: see hosts.example.")
    parser.add_argument("-n", "--num-workers", type=int, required=True, metavar="N",
                        help="number of worker processes")
    parser.add_argument("-s", "--num-servers", type=int, metavar="S",
                        help="number of server processes (default: as many as workers; 0 for "
                        "pure all-reduce jobs)")
    parser.add_argument("-H", "--hostfile", metavar="FILE",
                        help="hosts file: 'host[:port] [slots=N]' per line")
    parser.add_argument("--launcher", choices=list(LAUNCHERS),
                        help="default: ssh with -H, local without")
    parser.add_argument("--scheduler", action="store_true",
                        help="also start one scheduler process (DMLC_ROLE=scheduler) running "
                        "the same command, as MXNet's ps-lite needs: on this host (mpi: the "
                        "last MPI process)")
    parser.add_argument("--sync-dst-dir", metavar="DIR",
                        help="ssh: rsync the current directory to DIR on every host first, "
                        "and run the command there")
    parser.add_argument("--env", action="append", default=[], metavar="NAME[=VALUE]",
                        help="pass NAME (the launcher's value, or VALUE) to every process; "
                        "repeatable")
    parser.add_argument("--timeout", type=int, metavar="SECONDS",
                        help="bound on connecting, starting and joining the rendezvous "
                        f"(default: {DEFAULT_TIMEOUT_S} s + {PER_PROCESS_S:g} s per process "
                        "beyond the first, as every process imports torch first)")
    parser.add_argument("--placement", default="round-robin", metavar="POLICY",
                        help="which host each process runs on: round-robin (default), "
                        "servers-apart (servers on hosts of their own) or count:N (N processes "
                        "per host in rank order); see bandwidth/launch/planning/placement.py")
    parser.add_argument("--port", type=int, default=0,
                        help="MASTER_PORT, the rendezvous TCPStore's port (default: a free one)")
    parser.add_argument("--master-addr", metavar="ADDR",
                        help="MASTER_ADDR (default: this host's address towards the first host)")
    parser.add_argument("--heartbeat-interval", type=float, default=DEFAULT_HEARTBEAT_S,
                        metavar="SECONDS",
                        help="every process that joins the rendezvous tells the launcher it is "
                        f"alive this often (default {DEFAULT_HEARTBEAT_S:g}; 0: no heartbeat)")
    parser.add_argument("--heartbeat-misses", type=float, default=DEFAULT_HEARTBEAT_MISSES,
                        metavar="N",
                        help="a process silent for N intervals is named as having stopped "
                        f"answering and the job ends (default {DEFAULT_HEARTBEAT_MISSES:g})")
    parser.add_argument("--open-store", action="store_true",
                        help="serve every client of the rendezvous store as torchrun does, "
                        "without the gate's handshake: for a program that opens the store itself "
                        "(init_method env://) on other hosts; whoever reaches MASTER_PORT can "
                        "then read and write the job's keys (docs/launcher.md, Security)")
    parser.add_argument("--report", metavar="FILE",
                        help="write how every process ended and the root cause as JSON")
    parser.add_argument("--ssh-config", metavar="FILE", help="ssh: use this ssh config (ssh -F)")
    parser.add_argument("--ssh-option", action="append", default=[], metavar="KEY=VALUE",
                        help="ssh: an option for ssh -o; repeatable")
    parser.add_argument("command", nargs=argparse.REMAINDER,
                        help="the program and its arguments")
    return parser


def config_from_args(args: argparse.Namespace, environ: Mapping[str, str],
                     workdir: str) -> LaunchConfig:
    command: Sequence[str] = args.command
    if command[:1] == ["--"]:
        command = command[1:]
    return LaunchConfig(
        command=tuple(command), num_workers=args.num_workers, num_servers=args.num_servers,
        launcher=args.launcher,
        hosts=tuple(parse_hostfile(args.hostfile)) if args.hostfile else (),
        scheduler=args.scheduler, env=parse_env_flags(args.env, environ),
        timeout_s=args.timeout if args.timeout is not None else startup_timeout(
            args.num_workers + (args.num_servers if args.num_servers is not None
                                else args.num_workers) + args.scheduler),
        timeout_given=args.timeout is not None, placement=args.placement, port=args.port, master_addr=args.master_addr,
        sync_dst_dir=args.sync_dst_dir, ssh_config=args.ssh_config,
        ssh_options=tuple(args.ssh_option), workdir=workdir,
        heartbeat_s=args.heartbeat_interval, heartbeat_misses=args.heartbeat_misses,
        report_path=args.report, open_store=args.open_store)


class Interrupted(BaseException):
    """SIGTERM or SIGHUP to the launcher while no process runs."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def _interrupt(signum, frame):
    if _importing(frame):
        # An exception raised inside an import that is half done (torch's, in run) can leave
        # the interpreter unable to finish: one line and out, as launch.py's first handler.
        sys.stderr.write(f"launch.py: interrupted by {signal.Signals(signum).name} (no process "
                         "was running)\n")
        sys.stderr.flush()
        os._exit(128 + signum)
    raise Interrupted(signum)


def _importing(frame) -> bool:
    """Whether the interrupted code is inside an import (importlib's frames on its stack)."""
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="launch: %(levelname)s: %(message)s")
    # SIGTERM or SIGHUP before the supervisor takes over (torch importing, the store opening):
    # nothing runs yet, so end with one line and 128 + N, as the supervisor would.
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _interrupt)
    try:
        # Inside the try: a SIGTERM while argparse builds its parser (0.2 s after the start under
        # load) ended in a traceback and status 1.
        args = build_parser().parse_args(argv)
        cliexit.require("launch.py")                # the store is torch's
        check_output_path("--report", args.report)  # before the job, not after it
        run(config_from_args(args, os.environ, os.getcwd()), dict(os.environ))
    except ReaderGone:          # | head -1: the job was stopped; quiet, as measure.py's 141
        return cliexit.broken_pipe()
    except Interrupted as stop:
        print(f"launch.py: interrupted by {signal.Signals(stop.signum).name} (no process was "
              "running)", file=sys.stderr)
        return 128 + stop.signum
    except BandwidthError as err:
        print(err if str(err).startswith("FAIL:") else f"launch.py: error: {err}",
              file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        # Ctrl-C before any process started (while torch imports, say); once processes run,
        # the supervisor catches the signal itself, stops them and reports.
        print("launch.py: interrupted (no process was running)", file=sys.stderr)
        return 128 + signal.SIGINT
    return 0


if __name__ == "__main__":
    sys.exit(main())
