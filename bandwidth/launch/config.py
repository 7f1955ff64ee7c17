"""The launcher's command line, parsed once into a checked, frozen ``LaunchConfig``.

Flags keep MXNet's ``tools/launch.py`` names (``-n -s -H --launcher --sync-dst-dir --env``).
Everything after the first word that is not an option is the command, untouched: the launcher
never re-parses the user's flags (MXNet's tracker swallowed ``--env``, ``--log-level``...).
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from bandwidth.cliparse import OneLineParser
from bandwidth.errors import ConfigError
from bandwidth.launch.environ import parse_env_flags
from bandwidth.launch.hostfile import Host, parse_hostfile
from bandwidth.launch.launchers import LAUNCHERS

DEFAULT_TIMEOUT_S = 60
MAX_TIMEOUT_S = 7 * 24 * 3600
_ADDRESS = re.compile(r"^(?:[A-Za-z0-9_][A-Za-z0-9._-]{0,252}|[0-9A-Fa-f:.]{2,45})$")
_SSH_OPTION = re.compile(r"^[A-Za-z][A-Za-z0-9]*(=|\s+)\S")
_NO_HOST_KEY_CHECK = re.compile(
    r"^\s*StrictHostKeyChecking\s*(=|\s)\s*[\"']?(no|off|false)[\"']?\s*$", re.IGNORECASE)


@dataclass(frozen=True)
class LaunchConfig:
    """One launch. ``num_servers=None`` means as many as workers (MXNet's default);
    ``launcher=None`` means ``ssh`` with hosts and ``local`` without."""

    command: tuple[str, ...]
    num_workers: int
    num_servers: int | None = None
    launcher: str | None = None
    hosts: tuple[Host, ...] = ()
    scheduler: bool = False
    env: tuple[tuple[str, str], ...] = ()          # --env, resolved to (name, value)
    timeout_s: int = DEFAULT_TIMEOUT_S
    port: int = 0                                  # 0: a free port
    master_addr: str | None = None                 # None: this host's address towards host 1
    sync_dst_dir: str | None = None
    ssh_config: str | None = None
    ssh_options: tuple[str, ...] = ()
    workdir: str = field(default_factory=os.getcwd)   # where processes run (ssh: remotely too)

    def __post_init__(self):
        if self.num_servers is None:
            object.__setattr__(self, "num_servers", self.num_workers)
        if self.launcher is None:
            object.__setattr__(self, "launcher", "ssh" if self.hosts else "local")
        _check(self)


def _check(config: LaunchConfig) -> None:
    if not config.command:
        raise ConfigError("no command given: python launch.py -n N [options] command [args...]")
    if config.num_workers < 1:
        raise ConfigError(f"-n {config.num_workers}: at least one worker is needed")
    if config.num_servers < 0:
        raise ConfigError(f"-s {config.num_servers}: the number of servers cannot be negative")
    launcher = LAUNCHERS.get(config.launcher)
    if launcher is None:
        raise ConfigError(f"--launcher {config.launcher!r}: expected one of "
                          f"{', '.join(LAUNCHERS)}")
    if launcher.hostfile == "refused" and config.hosts:
        raise ConfigError(f"--launcher {launcher.name} runs {launcher.summary}: drop -H, or use "
                          "--launcher ssh or mpi")
    if launcher.hostfile == "required" and not config.hosts:
        raise ConfigError(f"--launcher {launcher.name} needs a hosts file: -H FILE (see "
                          "hosts.example)")
    if not launcher.host_ports:
        for host in config.hosts:
            if host.port is not None:
                raise ConfigError(
                    f"--launcher {launcher.name} cannot reach {host}:{host.port} of the hosts "
                    f"file: mpirun takes no per-host ssh port; list the host without it and put "
                    f"'Port {host.port}' under 'Host {host}' in ~/.ssh/config, or use "
                    "--launcher ssh")
    if config.sync_dst_dir is not None and launcher.sync is None:
        raise ConfigError(f"--sync-dst-dir copies files over ssh: it needs --launcher ssh, not "
                          f"{launcher.name}")
    if (config.ssh_config or config.ssh_options) and not launcher.ssh_options:
        raise ConfigError(f"--ssh-config/--ssh-option apply to --launcher ssh, not "
                          f"{launcher.name}")
    for option in config.ssh_options:
        if not _SSH_OPTION.match(option):
            raise ConfigError(f"--ssh-option {option!r}: expected KEY=VALUE, as for ssh -o")
        if _NO_HOST_KEY_CHECK.match(option):
            raise ConfigError(f"--ssh-option {option}: the launcher keeps host-key checking on; "
                              "add the hosts to known_hosts (ssh-keyscan) or use "
                              "StrictHostKeyChecking=accept-new")
    if not 1 <= config.timeout_s <= MAX_TIMEOUT_S:
        raise ConfigError(f"--timeout {str(config.timeout_s)[:20]}: give 1 to {MAX_TIMEOUT_S} "
                          "seconds (a week)")
    if config.master_addr is not None and not _ADDRESS.match(config.master_addr):
        raise ConfigError(f"--master-addr {config.master_addr[:60]!r}: expected a host name or "
                          "an IPv4 or IPv6 address (at most 253 characters)")
    if not 0 <= config.port < 65536:
        raise ConfigError(f"--port {str(config.port)[:20]}: expected 0 (any free port) to 65535")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="launch.py", description="Start a distributed job: workers, servers (and a "
        "scheduler) on this host, over ssh, with mpirun or with srun (inside a Slurm "
        "allocation), supervised until the first failure.",
        epilog="Environment contract: see bandwidth/launch/contract.py. Hosts file format: see "
        "hosts.example.")
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
    parser.add_argument("--timeout", type=int, default=DEFAULT_TIMEOUT_S, metavar="SECONDS",
                        help="bound on connecting, starting and joining the rendezvous "
                        f"(default {DEFAULT_TIMEOUT_S})")
    parser.add_argument("--port", type=int, default=0,
                        help="MASTER_PORT, the rendezvous TCPStore's port (default: a free one)")
    parser.add_argument("--master-addr", metavar="ADDR",
                        help="MASTER_ADDR (default: this host's address towards the first host)")
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
        timeout_s=args.timeout, port=args.port, master_addr=args.master_addr,
        sync_dst_dir=args.sync_dst_dir, ssh_config=args.ssh_config,
        ssh_options=tuple(args.ssh_option), workdir=workdir)
