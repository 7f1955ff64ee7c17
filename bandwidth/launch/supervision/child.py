"""One child process of a launch (``Child``: how it starts, reads, stops and dies with the
launcher), and the ``Failure`` report that names a launch's root cause. The ``Supervisor``
(``bandwidth.launch.supervision.supervisor``) runs them; launchers subclass ``Child`` (ssh, mpi,
srun).
"""

from __future__ import annotations

import collections
import ctypes
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from bandwidth.errors import WorkerError
from bandwidth.launch.supervision.ending import Ending, is_error_line
from bandwidth.launch.supervision.noise import NoiseFilter
from bandwidth.launch.supervision.repeats import Repeats
from bandwidth.launch.supervision.lifeline import describe_stopped

TAIL_LINES = 20          # stderr lines kept per child for the report
REPORT_LINES = 12        # of which the report shows the last
try:
    _LIBC = ctypes.CDLL(None, use_errno=True)
except OSError:          # not Linux: no parent-death signal
    _LIBC = None


@dataclass(frozen=True)
class Failure:
    """The root cause of a failed launch, and the launcher's exit status for it."""

    subject: str                    # "worker 1 (rank 1) on node2", or a host for ssh errors
    what: str                       # "exited with status 1", "was killed by SIGKILL", ...
    exit_code: int
    tail_label: str = ""
    tail: tuple[str, ...] = ()
    # What the launcher was doing ("while starting worker 1@node2"). Given, it goes on a line of
    # its own with the elapsed time, so that the first line is the cause alone, exactly
    # "FAIL: node2: connection timed out after 60 s".
    context: str = ""
    pid: int | None = None          # the failed process's pid (on its host)
    detail: str = ""                # its first error line, or what it said of its end

    def report(self, elapsed_s: float | None = None, stopped: int = 0,
               consequences: str = "") -> str:
        when = "" if elapsed_s is None else f"after {elapsed_s:.1f} s"
        first = f"FAIL: {self.subject}: {self.what}"
        if not self.context and when:
            first += f" {when}"
        if self.pid is not None:
            first += f" (pid {self.pid})"
        if self.detail:
            first += f": {self.detail}"
        lines = [first] + ([consequences] if consequences else [])
        if self.context:
            lines.append("  " + ", ".join(filter(None, (self.context, when))))
        if self.tail:
            lines.append(f"  last stderr lines of {self.tail_label}:")
            lines += [f"    {line}" for line in self.tail[-REPORT_LINES:]]
        if stopped:
            lines.append(f"  stopped {stopped} running process{'es' if stopped > 1 else ''}")
        return "\n".join(lines)


class LaunchFailed(WorkerError):
    """A launch that failed; ``str()`` is the report, ``exit_code`` the launcher's status."""

    def __init__(self, failure: Failure, report: str):
        super().__init__(report)
        self.failure = failure
        self.exit_code = failure.exit_code


def status_failure(subject: str, returncode: int, tail_label: str, tail: Sequence[str]) -> Failure:
    """Failure for a process that ended with ``returncode`` (negative: killed by a signal)."""
    if returncode < 0:
        return Failure(subject, f"was killed by {signal.Signals(-returncode).name}",
                       128 - returncode, tail_label, tuple(tail))
    return Failure(subject, f"exited with status {returncode}", returncode, tail_label, tuple(tail))


class Child:
    """One process the launcher starts. Subclasses say how its output reads and how it stops."""

    #: seconds between SIGTERM (or its equivalent) and SIGKILL
    grace_s = 5.0
    #: the launch's NoiseFilter, shared by its children (set by the Supervisor)
    noise: NoiseFilter | None = None
    repeats: Repeats | None = None      # identical lines of many processes shown once
    #: False: SIGTERM goes to the process alone, a leader (mpirun, srun) that forwards it to
    #: processes in other groups and cleans up; True: to the process's whole group
    terminate_group = True
    #: the contract Role of this child, where the launcher knows it (reports, heartbeat)
    role = None
    #: ask the kernel to SIGKILL this child when the launcher dies (PR_SET_PDEATHSIG); False
    #: for leaders (mpirun, srun) that must clean up their ranks themselves
    die_with_launcher = True
    #: the launcher's clock (seconds since the launch started), set by the Supervisor
    clock: Callable[[], float] = staticmethod(lambda: 0.0)

    def __init__(self, label: str, subject: str, argv: Sequence[str], env: dict[str, str],
                 cwd: str | None = None, capture_stdout: bool = False, stdin_pipe: bool = False):
        self.label = label          # output prefix: "worker 0@node1"
        self.subject = subject      # report wording: "worker 0 (rank 0) on node1"
        self.argv, self.env, self.cwd = list(argv), env, cwd
        self.capture_stdout, self.stdin_pipe = capture_stdout, stdin_pipe
        self.tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
        self.proc: subprocess.Popen | None = None
        self.started_at = 0.0
        self.started_s: float | None = None       # on the launcher's clock
        self.finished = False
        self.ending = Ending()
        self.failure_found: Failure | None = None

    @property
    def pid(self) -> int | None:
        """The program's pid on its host (here: the process the launcher started)."""
        return self.proc.pid if self.proc is not None else None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            self.argv, env=self.env, cwd=self.cwd, start_new_session=True,
            stdin=subprocess.PIPE if self.stdin_pipe else subprocess.DEVNULL,
            stdout=subprocess.PIPE if self.capture_stdout else None, stderr=subprocess.PIPE,
            preexec_fn=_die_with_parent(os.getpid()) if self.die_with_launcher else None)
        self.started_at = time.monotonic()
        self.started_s = self.clock()

    @property
    def running(self) -> bool:
        """Whether the program itself has started (an ssh child: once the remote side says so)."""
        return self.proc is not None

    def on_line(self, stream: str, line: str) -> None:
        """One line of the child's ``stream`` ("stdout" or "stderr"), without its newline."""
        if stream == "stderr":
            note = self.noise.explain(line) if self.noise is not None else None
            if note == "":
                return
            if note:
                emit(sys.stderr, f"launch: note: {note}:\n")
            if not self.ending.first_error and is_error_line(line):
                self.ending.first_error = line.strip()[:300]
            self.tail.append(line)
            if self.repeats is None or self.repeats.show(self.label, line):
                emit(sys.stderr, f"[{self.label}] {line}\n")
        else:
            emit(sys.stdout, line + "\n")

    def parts(self) -> list:
        """The processes of the job this child stands for, as reports list them: itself (a
        runner of many, mpirun or srun: those it ran, ``bandwidth.launch.supervision.runner``)."""
        return [self]

    def failure(self) -> Failure | None:
        """After exit: None for success, else why it failed."""
        code = self.proc.returncode
        return None if code == 0 else status_failure(self.subject, code, self.label, self.tail)

    def start_timeout(self, timeout_s: float) -> Failure:
        return Failure(self.subject, f"did not start within {timeout_s:g} s", 1)

    def exited(self) -> bool:
        """True once the child's first process exited. It is left a zombie (WNOWAIT) until
        ``reap``, so its process-group id stays ours until the group has been killed."""
        if self.proc.returncode is not None:
            return True
        return os.waitid(os.P_PID, self.proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None

    def reap(self) -> None:
        _signal_group(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def tick(self, now: float) -> None:
        """Called on every turn of the supervisor's loop while this child runs (an ssh child tells
        its remote guard that the launcher is still there)."""

    def members(self) -> list:
        """This child and the processes it runs (a runner's ranks), whatever is known of them."""
        return [self]

    def watched(self) -> list:
        """The processes this child stands for whose heartbeat the launcher watches."""
        return [self] if self.role is not None and self.role.rank is not None else []

    def reachable(self, now: float, within_s: float) -> bool:
        """Whether this process's host is known to run and answer, so that a silent heartbeat
        is not a frozen host or a cut link: always on the launcher's own host, where
        ``stopped`` reads /proc (ssh: the guard's words)."""
        return True

    def stopped(self) -> str:
        """Why this running child does not answer, if a signal stopped it (or a process of its
        group) on this host; "" otherwise (an ssh child's remote side is not looked at)."""
        return describe_stopped(self.proc.pid, group=True)

    def terminate(self) -> None:
        if not self.terminate_group:
            try:
                self.proc.send_signal(signal.SIGTERM)
            except ProcessLookupError:
                pass
            return
        _signal_group(self.proc.pid, signal.SIGTERM)
        _signal_group(self.proc.pid, signal.SIGCONT)     # a stopped process handles it now

    def kill(self) -> None:
        _signal_group(self.proc.pid, signal.SIGKILL)


def _die_with_parent(parent: int):
    """A ``preexec_fn``: SIGKILL for the child when the launcher dies, even by SIGKILL."""
    if _LIBC is None or not sys.platform.startswith("linux"):
        return None

    def arm() -> None:
        _LIBC.prctl(1, signal.SIGKILL, 0, 0, 0)     # PR_SET_PDEATHSIG
        if os.getppid() != parent:                  # the launcher died before the request
            os._exit(1)
    return arm


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


class ReaderGone(Exception):
    """The reader of the launcher's stdout went away (``launch.py ... | head -1``): the job is
    stopped without a word and the launcher ends with 141, as measure.py does."""


_reader_gone = False


def mute(on: bool = True) -> None:
    """From now on emit writes nothing (the reader of the launcher's stdout went away); False:
    write again (a new launch in the same process, as a program calling driver.run twice)."""
    global _reader_gone
    _reader_gone = on


def emit(stream, text: str) -> None:
    """Write ``text`` to the launcher's ``stream`` at once (children's lines arrive live). Once
    stdout's reader has gone (ReaderGone, raised once) nothing more is written anywhere: the job
    is being stopped because nobody reads it."""
    global _reader_gone
    if _reader_gone:
        return
    try:
        stream.write(text)
        stream.flush()
    except BrokenPipeError:
        if stream is not sys.stdout:
            return    # stderr closed: keep supervising, the status still tells the outcome
        _reader_gone = True
        raise ReaderGone from None
