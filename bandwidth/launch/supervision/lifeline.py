"""How a process of a run ends when it must: its parent died, or it stopped making progress.

Used by the per-device ranks (``bandwidth.execution.rank``, started by
``bandwidth.processes.spawn``), by
``measure.py``'s measurements in every mode, and by the supervisors that name a hung process:

* ``die_with_parent(pid)``: on Linux, ask the kernel for SIGKILL when the parent dies
  (``PR_SET_PDEATHSIG``), then check that the parent is still ``pid`` (it may have died before
  the request); elsewhere only the check. The kernel's signal follows the parent *thread* that
  started the process, so ``bandwidth.processes.spawn`` starts ranks from the thread that waits for
  them.
* ``read_line(fd)`` then ``watch_lifeline(fd)``: the payload line from the rank's stdin, then a
  thread that reads on (the parent holds stdin open and never writes again) and kills this
  process's group at end-of-file. Raw ``os.read``: no buffered reader's lock is held by the
  thread when the interpreter shuts down.
* ``Watchdog``: ``--timeout``'s one meaning. ``kick()`` at every iteration; when none comes for
  ``seconds``, one line on stderr names the process and what it was doing, and it exits 1.
* ``describe_stopped(pid)``: "stopped by a signal (SIGSTOP/SIGTSTP)" when ``pid`` (or a process of
  its group) is stopped, else "": how the supervisors name a process that stopped answering.

Nothing here imports torch.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time
from pathlib import Path

PR_SET_PDEATHSIG = 1


def die_with_parent(parent_pid: int) -> None:
    """SIGKILL this process when its parent dies; exit at once if it already has."""
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):
            pass                        # no prctl: the lifeline pipe still covers it
    if os.getppid() != parent_pid:
        os._exit(1)


def read_line(fd: int) -> bytes:
    """Bytes from ``fd`` up to the first newline (or end-of-file), read one at a time so that
    nothing after it is consumed."""
    line = bytearray()
    while not line.endswith(b"\n"):
        byte = os.read(fd, 1)
        if not byte:
            break
        line += byte
    return bytes(line)


def watch_lifeline(fd: int) -> threading.Thread:
    """Kill this process's group when ``fd`` reaches end-of-file (the parent is gone or is
    stopping this process). Returns the (daemon) thread."""
    def watch() -> None:
        try:
            while os.read(fd, 65536):
                pass
        except OSError:
            pass
        kill_own_group()

    thread = threading.Thread(target=watch, name="lifeline", daemon=True)
    thread.start()
    return thread


def kill_own_group() -> None:
    """Kill this process's group if it leads one (its helpers with it), then exit 1."""
    try:
        if os.getpgrp() == os.getpid():         # a group of our own: take helpers with us
            os.killpg(os.getpid(), signal.SIGKILL)
    except OSError:
        pass
    os._exit(1)


class Watchdog:
    """Exit 1 with one line when ``kick`` is not called for ``seconds`` (``--timeout``)."""

    def __init__(self, seconds: float, who: str, prog: str = "measure.py"):
        self.seconds, self.who, self.prog = seconds, who, prog
        self.what = "starting"
        self.deadline = time.monotonic() + seconds
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._watch, name="watchdog", daemon=True)
        self.thread.start()

    def kick(self, what: str) -> None:
        self.what, self.deadline = what, time.monotonic() + self.seconds

    def stop(self) -> None:
        self.stopped.set()

    def __enter__(self) -> Watchdog:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def _watch(self) -> None:
        while not self.stopped.wait(min(1.0, max(0.01, self.seconds / 10))):
            if time.monotonic() > self.deadline and not self.stopped.is_set():
                line = (f"{self.who}: no progress for {self.seconds:g} s in {self.what} "
                        "(--timeout): stopped as hung")
                try:
                    from bandwidth.launch.contract.heartbeat import report_end
                    report_end(line, consequence=True)      # waiting on another process
                    print(f"{self.prog}: error: {line}", file=sys.stderr, flush=True)
                finally:
                    os._exit(1)


def process_state(pid: int) -> str:
    """The one-letter state of ``pid`` from /proc ("" if unknown or gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat[stat.rfind(")") + 2:][:1]


def group_members(pgid: int) -> list[int]:
    """Processes of process group ``pgid`` (Linux /proc; [] elsewhere)."""
    members = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for entry in entries:
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rfind(")") + 2:].split()
            if len(fields) > 2 and fields[2] == str(pgid):
                members.append(int(entry))
    return members


def describe_stopped(pid: int, group: bool = False) -> str:
    """Why ``pid`` (with ``group``: any process of its group) is not answering, if it is stopped
    by a signal; "" otherwise."""
    for member in ([pid] + [p for p in group_members(pid) if p != pid]) if group else [pid]:
        if process_state(member) in ("T", "t"):
            which = "" if member == pid else f" (its process {member})"
            return f"stopped by a signal (SIGSTOP or SIGTSTP){which}"
    return ""
