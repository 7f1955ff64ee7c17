"""Start child processes, forward their output, and stop them all at the first failure.

``Supervisor(children, ...).run()`` returns when every child exited with status 0. Otherwise it
stops the others and raises ``LaunchFailed`` carrying one ``Failure``: the first child that
exited non-zero or by a signal, a child that did not start within the start timeout, a check
(the rendezvous) that failed, or the signal (SIGINT, SIGTERM, SIGHUP) that interrupted the
launcher. Everything runs on the calling thread: one ``select`` loop reads every child's output,
so no helper thread can fail unnoticed.

Every child runs in its own session (``start_new_session``): a terminal's Ctrl-C reaches only
the launcher, which then stops the children, and a child's whole process group can be signalled.
Stopping is SIGTERM, then SIGKILL after the grace period. When a child's first process exits,
whatever is left of its process group is killed, so helpers it started do not linger (a helper
that makes a session of its own escapes this, as it would any process-group based supervisor).
"""

from __future__ import annotations

import collections
import os
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from bandwidth.errors import WorkerError
from bandwidth.launch.noise import NoiseFilter
from bandwidth.launch.repeats import Repeats
from bandwidth.processes.lifeline import describe_stopped

TAIL_LINES = 20          # stderr lines kept per child for the report
REPORT_LINES = 12        # of which the report shows the last
POLL_S = 0.05


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

    def report(self, elapsed_s: float | None = None, stopped: int = 0) -> str:
        when = "" if elapsed_s is None else f"after {elapsed_s:.1f} s"
        if self.context:
            lines = [f"FAIL: {self.subject}: {self.what}",
                     "  " + ", ".join(filter(None, (self.context, when)))]
        else:
            lines = [f"FAIL: {self.subject}: {self.what}" + (f" {when}" if when else "")]
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

    def __init__(self, label: str, subject: str, argv: Sequence[str], env: dict[str, str],
                 cwd: str | None = None, capture_stdout: bool = False, stdin_pipe: bool = False):
        self.label = label          # output prefix: "worker 0@node1"
        self.subject = subject      # report wording: "worker 0 (rank 0) on node1"
        self.argv, self.env, self.cwd = list(argv), env, cwd
        self.capture_stdout, self.stdin_pipe = capture_stdout, stdin_pipe
        self.tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
        self.proc: subprocess.Popen | None = None
        self.started_at = 0.0
        self.finished = False

    def start(self) -> None:
        self.proc = subprocess.Popen(
            self.argv, env=self.env, cwd=self.cwd, start_new_session=True,
            stdin=subprocess.PIPE if self.stdin_pipe else subprocess.DEVNULL,
            stdout=subprocess.PIPE if self.capture_stdout else None, stderr=subprocess.PIPE)
        self.started_at = time.monotonic()

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
            self.tail.append(line)
            if self.repeats is None or self.repeats.show(self.label, line):
                emit(sys.stderr, f"[{self.label}] {line}\n")
        else:
            emit(sys.stdout, line + "\n")

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


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def emit(stream, text: str) -> None:
    """Write ``text`` to the launcher's ``stream`` at once (children's lines arrive live)."""
    try:
        stream.write(text)
        stream.flush()
    except BrokenPipeError:
        pass  # the launcher's own output was closed (e.g. piped into head); keep supervising


class Supervisor:
    """Run ``children`` to completion or to the first failure; see the module docstring.

    ``start_timeout_s``: a child not ``running`` by then fails the launch.
    ``max_starting``: children started at once that are not yet running (sshd's MaxStartups
    drops unauthenticated connections beyond 10 by default).
    ``check``: called about every 0.5 s with the seconds since the start; a Failure it returns
    fails the launch (the rendezvous watch).
    """

    def __init__(self, children: Sequence[Child], *, start_timeout_s: float,
                 max_starting: int = 8, check: Callable[[float], Failure | None] | None = None):
        self.children = list(children)
        noise, self.repeats = NoiseFilter(), Repeats()
        for child in self.children:
            child.noise, child.repeats = noise, self.repeats
        self.start_timeout_s = start_timeout_s
        self.max_starting = max_starting
        self.check = check
        self.selector = selectors.DefaultSelector()
        self.partial: dict[int, bytearray] = {}
        self.signals: list[int] = []

    def run(self) -> None:
        self.t0 = time.monotonic()
        previous = _catch_signals(self.signals.append)
        try:
            failure = self._loop()
        finally:
            stopped = self._stop()
            _restore_signals(previous)
            self.selector.close()
            for line in self.repeats.summary():
                emit(sys.stderr, line + "\n")
        if failure is not None:
            elapsed = time.monotonic() - self.t0
            raise LaunchFailed(failure, failure.report(elapsed, stopped))

    def _loop(self) -> Failure | None:
        pending = collections.deque(self.children)
        next_check = 0.0
        while True:
            if self.signals:
                name = signal.Signals(self.signals[0]).name
                return Failure("launcher", f"interrupted by {name}", 128 + self.signals[0])
            started = [c for c in self.children if c.proc is not None]
            starting = sum(1 for c in started if not c.finished and not c.running)
            while pending and starting < self.max_starting:
                failure = self._start(pending.popleft())
                if failure is not None:
                    return failure
                starting += 1
            self._pump(POLL_S)
            now = time.monotonic()
            for child in started:
                if child.finished or not child.exited():
                    continue
                self._drain(child)
                child.reap()
                child.finished = True
                failure = child.failure()
                if failure is not None:
                    return self._stopped_instead(failure, child)
            for child in started:
                if not child.finished and not child.running \
                        and now - child.started_at > self.start_timeout_s:
                    return child.start_timeout(self.start_timeout_s)
            if self.check is not None and now >= next_check:
                next_check = now + 0.5
                failure = self.check(now - self.t0)
                if failure is not None:
                    return failure
            if not pending and all(c.finished for c in self.children):
                return None

    def _stopped_instead(self, failure: Failure, failed: Child) -> Failure:
        """A process that failed because another stopped answering (its timeout ran out while
        waiting): name the stopped one, with the failed one's words as the context."""
        for child in self.children:
            if child is failed or child.proc is None or child.finished:
                continue
            state = child.stopped()
            if state:
                return Failure(child.subject, f"stopped answering: {state}", failure.exit_code,
                               failure.tail_label, failure.tail,
                               context=f"found when {failure.subject} {failure.what}")
        return failure

    def _start(self, child: Child) -> Failure | None:
        try:
            child.start()
        except OSError as err:   # no such program, not executable, no such directory
            child.proc = None
            return Failure(child.subject, f"cannot run {child.argv[0]!r}: {err.strerror}", 127)
        for stream, pipe in (("stdout", child.proc.stdout), ("stderr", child.proc.stderr)):
            if pipe is not None:
                os.set_blocking(pipe.fileno(), False)
                self.partial[pipe.fileno()] = bytearray()
                self.selector.register(pipe, selectors.EVENT_READ, (child, stream))
        return None

    def _pump(self, timeout_s: float) -> None:
        for key, _ in self.selector.select(timeout_s):
            self._read(key)

    def _drain(self, child: Child) -> None:
        """Read what an exited child left in its pipes (its last words are the report)."""
        for key in list(self.selector.get_map().values()):
            if key.data[0] is child:
                while key.fileobj in self.selector.get_map() and self._read(key):
                    pass
                if self.partial[key.fd]:   # an unterminated last line, pipe still open
                    child.on_line(key.data[1], self.partial[key.fd].decode(errors="replace"))
                    self.partial[key.fd] = bytearray()

    def _read(self, key: selectors.SelectorKey) -> bool:
        """Read once from ``key``'s pipe and hand complete lines on; False if nothing came."""
        child, stream = key.data
        try:
            data = os.read(key.fd, 65536)
        except BlockingIOError:
            return False
        buffer = self.partial[key.fd]
        if not data:  # end of file: hand on an unterminated last line
            self.selector.unregister(key.fileobj)
            key.fileobj.close()
            if buffer:
                child.on_line(stream, buffer.decode(errors="replace"))
                self.partial[key.fd] = bytearray()
            return False
        buffer += data
        *lines, rest = buffer.split(b"\n")
        self.partial[key.fd] = bytearray(rest)
        for line in lines:
            child.on_line(stream, line.decode(errors="replace"))
        return True

    def _stop(self) -> int:
        """Stop every child still running; return how many there were."""
        alive = [c for c in self.children if c.proc is not None and not c.finished]
        for child in alive:
            child.terminate()
        deadline = time.monotonic() + max((c.grace_s for c in alive), default=0.0)
        while time.monotonic() < deadline and not all(c.exited() for c in alive):
            self._pump(POLL_S)
        for child in alive:
            if not child.exited():
                child.kill()
            self._drain(child)
            child.reap()
            child.finished = True
        for key in list(self.selector.get_map().values()):
            self.selector.unregister(key.fileobj)
            key.fileobj.close()
        return len(alive)


_CAUGHT = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _catch_signals(handler: Callable[[int], None]) -> dict:
    """Turn SIGINT/SIGTERM/SIGHUP into a stop request while supervising (main thread only)."""
    try:
        return {sig: signal.signal(sig, lambda signum, frame: handler(signum)) for sig in _CAUGHT}
    except ValueError:  # not the main thread: the caller handles signals
        return {}


def _restore_signals(previous: dict) -> None:
    for sig, old in previous.items():
        signal.signal(sig, old)
