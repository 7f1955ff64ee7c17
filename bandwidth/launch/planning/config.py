"""One launch as a checked, frozen ``LaunchConfig`` (bandwidth.launch.cli parses the command line
into it; the checks that depend on the launcher are the launcher table's,
launchers.table.check_config).

Flags keep MXNet's ``tools/launch.py`` names (``-n -s -H --launcher --sync-dst-dir --env``).
Everything after the first word that is not an option is the command, untouched: the launcher
never re-parses the user's flags (MXNet's tracker swallowed ``--env``, ``--log-level``...).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from bandwidth.errors import ConfigError
from bandwidth.launch.planning.hostfile import Host
from bandwidth.launch.planning.placement import parse_policy

DEFAULT_TIMEOUT_S = 60
DEFAULT_HEARTBEAT_S = 2.0
DEFAULT_HEARTBEAT_MISSES = 2.5
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
    placement: str = "round-robin"                 # bandwidth.launch.planning.placement's policy
    timeout_given: bool = True                     # False: timeout_s grew with the job
    heartbeat_s: float = DEFAULT_HEARTBEAT_S       # 0: no heartbeat
    heartbeat_misses: float = DEFAULT_HEARTBEAT_MISSES
    report_path: str | None = None                 # --report FILE (JSON)
    open_store: bool = False                       # --open-store: no gate before the store

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
    parse_policy(config.placement)
    if config.master_addr is not None and not _ADDRESS.match(config.master_addr):
        raise ConfigError(f"--master-addr {config.master_addr[:60]!r}: expected a host name or "
                          "an IPv4 or IPv6 address (at most 253 characters)")
    if not (config.heartbeat_s == 0 or 0.1 <= config.heartbeat_s <= 3600):
        raise ConfigError(f"--heartbeat-interval {str(config.heartbeat_s)[:20]}: give 0 (no "
                          "heartbeat) or 0.1 to 3600 seconds")
    if not 1.5 <= config.heartbeat_misses <= 1000:
        raise ConfigError(f"--heartbeat-misses {str(config.heartbeat_misses)[:20]}: give 1.5 to "
                          "1000 intervals")
    if not 0 <= config.port < 65536:
        raise ConfigError(f"--port {str(config.port)[:20]}: expected 0 (any free port) to 65535")
