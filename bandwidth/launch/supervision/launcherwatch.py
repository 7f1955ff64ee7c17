"""Notice, on a host where mpirun or srun started a process of the job, that the launcher is gone:
killed, or cut off from this host.

Usage (``bandwidth.launch.launchers.rolewrap`` around each command it runs)::

    watch_launcher(job, lost_after_s, on_gone)   # a daemon thread; on_gone(why) once

The ssh launcher's guard hears the launcher write a byte every second; a process that mpirun's
or srun's daemon started has no such line. So the wrapper holds a connection of its own to the
job's store, through its gate (``storegate.open_line``), that carries nothing. The launcher's
end closes it (end-of-file at once). A cut link or a lost host closes nothing: TCP keepalive
probes, one a second once the line has been idle a second, are answered by the launcher's kernel
whatever its load, and ``TCP_USER_TIMEOUT`` ends the connection when they go unanswered for
``lost_after_s``. Either way ``on_gone`` is called, once. Nothing here imports torch.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable

from bandwidth.launch.contract.environment import Job
from bandwidth.launch.contract.storegate import open_line

CONNECT_S = 10.0


def watch_launcher(job: Job, lost_after_s: float,
                   on_gone: Callable[[str], None]) -> threading.Thread | None:
    """Start watching (see the module docstring); None where the store cannot be reached now
    (the command will find that out itself, and say so)."""
    try:
        line = open_line(job.master_addr, job.master_port, job.secret if job.gated else "",
                         CONNECT_S)
    except OSError:
        return None
    _keep_alive(line, lost_after_s)
    where = f"{job.master_addr}:{job.master_port}"
    thread = threading.Thread(target=_wait_for_end, args=(line, where, lost_after_s, on_gone),
                              name="launcher-watch", daemon=True)
    thread.start()
    return thread


def _keep_alive(line: socket.socket, lost_after_s: float) -> None:
    line.settimeout(None)
    line.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    options = (("TCP_KEEPIDLE", 1), ("TCP_KEEPINTVL", 1),
               ("TCP_KEEPCNT", max(1, round(lost_after_s))),
               ("TCP_USER_TIMEOUT", max(1000, round(lost_after_s * 1000))))
    for name, value in options:
        if hasattr(socket, name):          # Linux; elsewhere the system's keepalive times
            with contextlib.suppress(OSError):
                line.setsockopt(socket.IPPROTO_TCP, getattr(socket, name), value)


def _wait_for_end(line: socket.socket, where: str, lost_after_s: float,
                  on_gone: Callable[[str], None]) -> None:
    try:
        while line.recv(4096):             # the store sends nothing unasked; read it anyway
            pass
        why = f"its store at {where} closed the connection"
    except OSError as err:
        why = f"its store at {where} has not answered for {lost_after_s:g} s ({err.strerror})"
    with contextlib.suppress(OSError):
        line.close()
    on_gone(why)
