"""What ``mpirole`` and ``slurmrole`` share: a process that another program started (mpirun, srun)
finds its place in the job the launcher planned, takes the contract's environment for it, and
becomes the command (``exec``), so that the command sees what launch.py's own children see.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence

from bandwidth.launch.contract import ContractError, Job
from bandwidth.launch.hostfile import Host
from bandwidth.launch.plan import local_ranks


def role_environ(job: Job, placed: Sequence[Host], index: int,
                 environ: dict[str, str]) -> dict[str, str]:
    """``environ`` with the contract of process ``index`` of ``job`` placed on ``placed``: the
    workers and servers first (their local ranks among themselves), then the scheduler."""
    world_local = local_ranks(list(placed[:job.world_size]))
    local = world_local[index] if index < job.world_size else None
    env = dict(environ)
    env.update(job.role(index, placed[index].name, local).to_environ())
    return env


def become(name: str, runner: str, hosts_help: str, argv: list[str] | None,
           environ_of: Callable[[list[str]], dict[str, str]]) -> int:
    """Parse ``--hosts H1,H2,... -- command...``, take ``environ_of(hosts)`` and exec the command.
    Returns an exit status only where that fails: 2 (not under ``runner``, or a placement that
    does not match the plan), 127 (the command cannot run)."""
    parser = argparse.ArgumentParser(prog=f"python3 -m bandwidth.launch.{name}")
    parser.add_argument("--hosts", required=True, help=hosts_help)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command after --")
    try:
        env = environ_of(args.hosts.split(","))
    except KeyError as err:
        print(f"{name}: {err.args[0]} is not set: run under {runner}", file=sys.stderr)
        return 2
    except ContractError as err:
        print(f"{name}: {err}", file=sys.stderr)
        return 2
    try:
        os.execvpe(command[0], command, env)
    except OSError as err:
        print(f"{name}: cannot run {command[0]!r}: {err.strerror}", file=sys.stderr)
        return 127
