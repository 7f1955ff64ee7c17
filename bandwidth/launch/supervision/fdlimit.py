"""The open-file limit (RLIMIT_NOFILE), checked before anything starts.

The launcher holds, for every process it starts, the read ends of its stdout and stderr pipes, its
stdin (over ssh: the environment is sent on it) and its connection to the rendezvous store. With
``-n 2000`` that is some 8,000 descriptors, far above the common soft limit of 1024: the start
would fail half-way with EMFILE. So before the first process starts, the soft limit is raised up
to the hard one where that is enough, and otherwise the launch is refused in one line naming the
limit and how to raise it.
"""

from __future__ import annotations

import logging
import resource

from bandwidth.errors import ConfigError

log = logging.getLogger(__name__)

FDS_PER_PROCESS = 4      # stdout and stderr pipes, stdin, the store connection
BASE_FDS = 64            # the launcher's own (the store's socket, Python, logging...)


def fds_needed(processes: int) -> int:
    return BASE_FDS + FDS_PER_PROCESS * processes


def ensure_fd_limit(processes: int, what: str) -> None:
    """Raise the soft RLIMIT_NOFILE to what ``processes`` need (up to the hard limit), or raise
    ConfigError naming both limits and the fix. ``what`` names the request (``-n 2000 -s 0``)."""
    needed = fds_needed(processes)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return
    if hard == resource.RLIM_INFINITY or hard >= needed:
        resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))
        log.info("raised the open-file limit from %d to %d for %d processes", soft, needed,
                 processes)
        return
    raise ConfigError(f"{what}: {processes} processes need about {needed} open files in the "
                      f"launcher, but its limit (RLIMIT_NOFILE) is {soft} and the hard limit "
                      f"{hard}: raise it with `ulimit -n {needed}` (the hard limit as root, or "
                      "in /etc/security/limits.conf), or start fewer processes")
