"""What this host can start, checked before anything starts (``check_startable``): a job this
host cannot carry is refused in one line naming the limit to raise, instead of failing after a
minute of start-up with a fork error, ``Too many open files`` or the kernel's OOM killer.

Per process started here (the local launcher starts every process on this host):

* memory: PROCESS_BYTES before it does anything (torch imported, its libraries mapped; measured
  about 150 MB a process on this project's CPU machine, issue 27), against MemAvailable;
* processes: THREADS_PER_PROCESS tasks each (torch's threads and Gloo's), against the user's
  ``ulimit -u`` (RLIMIT_NPROC) and the kernel's ``pid_max``;
* open files: every rank keeps a connection to every other rank in each of GLOO_GROUPS process
  groups, so 4 x (ranks) + FD_MARGIN descriptors, against ``ulimit -n`` (RLIMIT_NOFILE, which the
  processes inherit); the launcher itself keeps 2 pipes per process.
"""

from __future__ import annotations

import resource
from dataclasses import dataclass

from bandwidth.errors import ConfigError

PROCESS_BYTES = 150 * 10**6
THREADS_PER_PROCESS = 8
GLOO_GROUPS = 4
FD_MARGIN = 64


@dataclass(frozen=True)
class HostLimits:
    mem_available: int | None        # bytes; None: unknown
    nproc: int | None                # RLIMIT_NPROC soft; None: unlimited
    pid_max: int | None
    nofile: int | None               # RLIMIT_NOFILE soft; None: unlimited


def host_limits() -> HostLimits:
    """This host's limits, as its processes inherit them."""
    def soft(which: int) -> int | None:
        value = resource.getrlimit(which)[0]
        return None if value == resource.RLIM_INFINITY else value

    return HostLimits(_mem_available(), soft(resource.RLIMIT_NPROC), _read_int(
        "/proc/sys/kernel/pid_max"), soft(resource.RLIMIT_NOFILE))


def check_startable(here: int, ranks: int, limits: HostLimits) -> None:
    """Refuse ``here`` processes on this host, in a job of ``ranks`` ranks, beyond ``limits``."""
    if limits.mem_available is not None and here * PROCESS_BYTES > limits.mem_available:
        fit = limits.mem_available // PROCESS_BYTES
        raise ConfigError(f"{here} processes on this host need about {here * PROCESS_BYTES / 1e9:.1f}"
                          f" GB before measuring ({PROCESS_BYTES / 1e6:.0f} MB each), but only "
                          f"{limits.mem_available / 1e9:.1f} GB is available (MemAvailable): at "
                          f"most {fit} fit; use fewer workers/servers or more hosts (-H)")
    tasks = here * THREADS_PER_PROCESS
    for name, limit in (("ulimit -u (RLIMIT_NPROC)", limits.nproc),
                        ("kernel.pid_max", limits.pid_max)):
        if limit is not None and tasks > limit:
            raise ConfigError(f"{here} processes on this host start about {tasks} threads "
                              f"({THREADS_PER_PROCESS} each), beyond {name} = {limit}: raise it "
                              "or use fewer processes per host")
    files = max(GLOO_GROUPS * ranks + FD_MARGIN, 2 * here + FD_MARGIN)
    if limits.nofile is not None and files > limits.nofile:
        raise ConfigError(f"a job of {ranks} ranks needs about {files} open files per process "
                          f"({GLOO_GROUPS} connections to every rank), beyond ulimit -n "
                          f"(RLIMIT_NOFILE) = {limits.nofile}: raise it (ulimit -n {files})")


def _mem_available() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _read_int(path: str) -> int | None:
    try:
        with open(path) as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None
