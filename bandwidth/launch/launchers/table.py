"""The table of launchers: one entry per ``--launcher`` name, saying what it needs and does.

Adding a launcher is one module with ``build(plan) -> list[Child]`` and one line here; the
driver and the option checks read only this table.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from bandwidth.errors import ConfigError, UnsupportedError
from bandwidth.launch.launchers import local, mpi, slurm, ssh
from bandwidth.launch.planning.config import LaunchConfig
from bandwidth.launch.planning.hostfile import Host
from bandwidth.launch.planning.plan import Plan
from bandwidth.launch.supervision.supervisor import Child


@dataclass(frozen=True)
class Launcher:
    name: str
    summary: str
    build: Callable[[Plan], list[Child]]
    hostfile: str                                   # "refused" | "required" | "optional"
    programs: tuple[str, ...] = ()                  # needed on this host's PATH
    # Whether ``programs`` are needed for this launch (ssh: not where every host is loopback)
    needs_programs: Callable[[LaunchConfig], bool] = lambda config: True
    place_scheduler: bool = False                   # the scheduler is placed like the others
    sync: Callable[[Plan], list[Child]] | None = None   # supports --sync-dst-dir
    ssh_options: bool = False                       # reads --ssh-config / --ssh-option
    start_timeout_s: Callable[[int], float] = float     # from --timeout: how long to start
    version_check: Callable[[], object] | None = None
    host_ports: bool = True                         # can reach a hosts file's host:port
    # Where the hosts come from without -H: (environ, process count) -> hosts with slots
    allocation: Callable[[Mapping[str, str], int], tuple[Host, ...]] | None = None
    # One child runs every process, whose wrappers say how each ended (rankends)
    rank_records: bool = False


LAUNCHERS = {launcher.name: launcher for launcher in (
    Launcher("local", "every process on this host", local.build, hostfile="refused"),
    Launcher("ssh", "one ssh connection per process, to the hosts of -H", ssh.build,
             hostfile="required", programs=("ssh",), sync=ssh.sync_children, ssh_options=True,
             start_timeout_s=ssh.start_timeout_s, needs_programs=ssh.needs_ssh),
    Launcher("mpi", "one Open MPI mpirun for all processes (-H optional)", mpi.build,
             hostfile="optional", programs=("mpirun",), place_scheduler=True,
             version_check=mpi.open_mpi_version, host_ports=False, rank_records=True),
    Launcher("slurm", "one srun step inside a Slurm allocation (salloc, sbatch)", slurm.build,
             hostfile="refused", programs=("srun", "scontrol"), place_scheduler=True,
             allocation=slurm.allocation, rank_records=True),
)}


def check_programs(launcher: Launcher, config: LaunchConfig) -> None:
    """UnsupportedError naming the missing program and how to get it."""
    sync = config.sync_dst_dir is not None
    programs = launcher.programs if launcher.needs_programs(config) else ()
    for program in programs + (("rsync",) if sync else ()):
        if shutil.which(program) is None:
            package = {"ssh": "openssh-client", "mpirun": "openmpi-bin", "srun": "slurm-client",
                       "scontrol": "slurm-client"}.get(program, program)
            raise UnsupportedError(f"--launcher {launcher.name} needs '{program}' on PATH "
                                   f"(e.g. apt-get install {package})")
    if launcher.version_check is not None:
        launcher.version_check()


def check_config(config: LaunchConfig) -> None:
    """ConfigError, one line, where the options do not fit the launcher (-H, ports, ssh flags)."""
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
