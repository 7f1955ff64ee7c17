"""Start child processes, forward their output, and stop them all at the first failure.

``Supervisor(children, ...).run()`` returns when every child exited with status 0. Otherwise it
stops the others and raises ``LaunchFailed`` carrying one ``Failure``: the first child that
exited non-zero or by a signal, a child that did not start within the start timeout, a check
(the rendezvous) that failed, or the signal (SIGINT, SIGTERM, SIGHUP) that interrupted the
launcher. Everything runs on the calling thread: one ``select`` loop reads every child's output,
so no helper thread can fail unnoticed.

Every child's end is recorded on the launcher's clock (``bandwidth.launch.supervision.ending``): at
the first failure the supervisor keeps listening for ``SETTLE_S`` more, so that a process that
failed earlier but was seen later (its report still on its way over ssh) is not missed, and then
names the root cause: the earliest failure that is not a consequence of another. With a heartbeat
(``bandwidth.launch.contract.heartbeat``) a process silent for the threshold is a failure too, dated
at its last beat. Local children also die with the launcher (``PR_SET_PDEATHSIG``), even when it is
killed with SIGKILL, and what they started goes with them:
``bandwidth.launch.supervision.sentinel``, a process of its own, kills every process that carries
this launch's mark in its environment once the launcher is gone (or, at the end, what they left
running).

Every child runs in its own session (``start_new_session``): a terminal's Ctrl-C reaches only
the launcher, which then stops the children, and a child's whole process group can be signalled.
Stopping is SIGTERM, then SIGKILL after the grace period. When a child's first process exits,
whatever is left of its process group is killed, so helpers it started do not linger (one that
makes a session of its own is left to the sentinel).
"""

from __future__ import annotations

import collections
import os
import selectors
import signal
import sys
import time
from collections.abc import Callable, Sequence

from bandwidth.launch.supervision.child import (  # noqa: F401 (some re-exported)
    Child, Failure, LaunchFailed, ReaderGone, emit, mute, status_failure)
from bandwidth.launch.supervision.ending import consequence_line, pick_root, record
from bandwidth.launch.supervision.noise import NoiseFilter
from bandwidth.launch.supervision.repeats import Repeats
from bandwidth.launch.supervision.sentinel import Sentinel

POLL_S = 0.05
SETTLE_S = 1.0           # after the first failure, how long other failures are still collected
CONSEQUENCE_SETTLE_S = 5.0   # as long while every failure so far says another failed first


class Supervisor:
    """Run ``children`` to completion or to the first failure; see the module docstring.

    ``start_timeout_s``: a child not ``running`` by then fails the launch.
    ``max_starting``: children started at once that are not yet running (sshd's MaxStartups
    drops unauthenticated connections beyond 10 by default).
    ``check``: called about every 0.5 s with the seconds since the start; a Failure it returns
    fails the launch (the rendezvous watch).
    ``heartbeat``: a ``HeartbeatWatch``; a child whose rank stops beating for its threshold fails.
    ``said_watch``: a ``rankends.SaidWatch``, read as the job runs, for children that run many
    processes (mpirun, srun: ``bandwidth.launch.supervision.runner``).
    """

    def __init__(self, children: Sequence[Child], *, start_timeout_s: float,
                 max_starting: int = 8, check: Callable[[float], Failure | None] | None = None,
                 heartbeat=None, said_watch=None):
        self.children = list(children)
        noise, self.repeats = NoiseFilter(), Repeats()
        self.t0 = time.monotonic()
        for child in self.children:
            child.noise, child.repeats = noise, self.repeats
            child.clock = self.clock
            child.said_watch = said_watch
        self.start_timeout_s = start_timeout_s
        self.max_starting = max_starting
        self.check = check
        self.heartbeat = heartbeat
        self.said_watch = said_watch
        self.selector = selectors.DefaultSelector()
        self.partial: dict[int, bytearray] = {}
        self.signals: list[int] = []
        self.root: Child | None = None
        self.failure: Failure | None = None

    def clock(self) -> float:
        return time.monotonic() - self.t0

    def run(self) -> None:
        self.t0 = time.monotonic()
        previous = _catch_signals(self.signals.append)
        gone = False
        mute(False)                       # this launch's output, whatever an earlier one met
        self.sentinel = Sentinel()
        try:
            failure = self._loop()
            gone = self._reader_went_away(failure)
            if gone:
                mute()
        finally:
            # On ReaderGone too: the job stops (emit writes nothing more) and it goes on up
            stopped = self._stopped_count(self._stop())
            self.sentinel.close()
            _restore_signals(previous)
            self.selector.close()
            for line in self.repeats.summary():
                emit(sys.stderr, line + "\n")
        self.failure = failure
        if gone:
            raise ReaderGone
        if failure is not None:
            elapsed = self.clock() if self.root is None else self.root.ending.at_s
            processes = self.processes()
            consequences = consequence_line(self.root, processes) \
                if self.root is not None and len(processes) > 1 else ""
            raise LaunchFailed(failure, failure.report(elapsed, stopped, consequences))

    def _reader_went_away(self, failure: Failure | None) -> bool:
        """The job ended because a process that writes straight to the launcher's stdout was
        killed by SIGPIPE, or ended with 141 as this tool's commands do on a closed stdout: the
        reader of that output went away (``| head -1``), no fault."""
        root = self.root
        return failure is not None and root is not None and \
            (root.ending.signal == "SIGPIPE" or root.ending.status == 128 + signal.SIGPIPE) \
            and not getattr(root, "capture_stdout", True)

    def processes(self) -> list:
        """Every process of the job: the children, a runner's (mpirun's) ranks in its place."""
        return [part for child in self.children for part in child.parts()]

    def report_doc(self) -> dict:
        """Every child's ending and the root cause (the ``--report`` file's body)."""
        root = record(self.root, self.root) if self.root is not None else None
        if root is None and self.failure is not None:
            root = {"subject": self.failure.subject, "reason": self.failure.what}
        return {"elapsed_s": round(self.clock(), 3), "root_cause": root,
                "processes": [record(c, self.root) for c in self.processes()]}

    def _loop(self) -> Failure | None:
        pending = collections.deque(self.children)
        next_check = 0.0
        while True:
            if self.signals:
                return self._interrupted()
            started = [c for c in self.children if c.proc is not None]
            starting = sum(1 for c in started if not c.finished and not c.running)
            while pending and starting < self.max_starting:
                failure = self._start(pending.popleft())
                if failure is not None:
                    return failure
                starting += 1
            self._pump(POLL_S)
            if self.said_watch is not None:
                self.said_watch.poll(self.clock())
            now = time.monotonic()
            for child in started:
                if not child.finished:
                    child.tick(now)
            if self._collect() or self._silent():
                return self._settle()
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

    def _interrupted(self) -> Failure:
        name = signal.Signals(self.signals[0]).name
        return Failure("launcher", f"interrupted by {name}", 128 + self.signals[0])

    def _collect(self) -> list[Child]:
        """Reap the children that exited; return those that failed."""
        failed = []
        for child in self.children:
            if child.proc is None or child.finished or not child.exited():
                continue
            self._drain(child)
            child.reap()
            child.finished = True
            ending = child.ending
            if ending.at_s is None:
                ending.at_s = self.clock()
            failure = child.failure()
            if ending.status is None and ending.signal is None:
                ending.set_returncode(child.proc.returncode)
            if failure is not None and not ending.failed:
                ending.failed = True
                child.failure_found = failure
                if self.heartbeat is not None and child.role is not None \
                        and child.role.rank is not None:
                    ending.said = self.heartbeat.ended(child.role.rank)
                failed.append(child)
        return failed

    def _silent(self) -> list[Child]:
        """Children whose heartbeat stopped for the threshold (they still run)."""
        if self.heartbeat is None:
            return []
        watched = [part for c in self.children if c.proc is not None and not c.finished
                   and not c.ending.failed for part in c.watched() if not part.ending.failed]
        now = self.clock()
        self.heartbeat.poll(now, [c.role.rank for c in watched])
        silent = []
        for child in watched:
            quiet = self.heartbeat.silent_for(child.role.rank, now)
            if quiet > self.heartbeat.threshold_s:
                state = child.stopped()
                if not state and child.reachable(now, self.heartbeat.threshold_s):
                    # Not stopped, on a host that runs and answers: its beating thread was
                    # starved (six processes starting on two cores kept one silent past 5 s in
                    # 2 of 3 runs), not a process that stopped answering; a real hang meets
                    # the job's timeout.
                    continue
                self._mark_stopped(child, state or "no heartbeat", quiet)
                silent.append(child)
        return silent

    def _members(self) -> list:
        """The children, and the processes a runner (mpirun, srun) ran, as far as known."""
        return [member for child in self.children for member in child.members()]

    def _mark_stopped(self, child: Child, state: str, quiet: float | None) -> None:
        ending = child.ending
        ending.failed, ending.silent_s = True, quiet
        rank = child.role.rank if child.role is not None else None
        last = self.heartbeat.last_change.get(rank) if self.heartbeat is not None else None
        ending.at_s = last if last is not None else 0.0
        ago = f" (last heartbeat {quiet:.1f} s ago)" if quiet is not None else ""
        child.failure_found = Failure(child.subject, f"stopped answering: {state}{ago}", 1,
                                      child.label, tuple(child.tail))

    def _settle(self) -> Failure | None:
        """After the first failure: collect the others for ``SETTLE_S``, name the root cause."""
        first = min((c for c in self._members() if c.ending.failed),
                    key=lambda c: c.ending.at_s or 0.0)
        start = time.monotonic()
        while not all(c.finished or c.ending.failed for c in self.children if c.proc is not None):
            cause_seen = any(c.ending.failed and not c.ending.consequence
                             for c in self._members())
            if time.monotonic() - start > (SETTLE_S if cause_seen else CONSEQUENCE_SETTLE_S):
                break
            if self.signals:
                return self._interrupted()
            self._pump(POLL_S)
            self._collect()
            self._silent()
        for child in self.children:       # stopped by a signal on this host: it is the cause
            if child.proc is not None and not child.finished and not child.ending.failed:
                state = child.stopped()
                if state:
                    rank = child.role.rank if child.role is not None else None
                    quiet = self.heartbeat.silent_for(rank, self.clock()) \
                        if self.heartbeat is not None and rank is not None else None
                    self._mark_stopped(child, state, quiet or None)
        processes = self.processes()
        first = min((p for p in processes if p.ending.failed),
                    key=lambda p: p.ending.at_s or 0.0, default=first)
        self.root = pick_root(processes) or first
        root = self.root.failure_found
        context = root.context
        if self.root is not first:
            context = f"found when {first.subject} {first.failure_found.what}"
        # a process of the job (not a host that could not be reached, not mpirun or srun for
        # many ranks): its pid and its own words go on the FAIL line
        named = self.root.role is not None and not root.context
        return Failure(root.subject, root.what, root.exit_code, root.tail_label, root.tail,
                       context=context, pid=self.root.pid if named else None,
                       detail=self.root.ending.reason if named else "")

    def _start(self, child: Child) -> Failure | None:
        if child.die_with_launcher:
            self.sentinel.tag(child.env)
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

    def _stopped_count(self, alive: list[Child]) -> int:
        """The processes stopped: those of ``alive`` that stand for themselves, and those that
        a runner (mpirun, srun) stopped when the job ended."""
        return sum(1 for c in alive if c.parts() == [c]) + \
            sum(1 for c in self.children for p in c.parts() if p is not c and p.ending.by_launcher)

    def _stop(self) -> list[Child]:
        """Stop every child still running; return those."""
        alive = [c for c in self.children if c.proc is not None and not c.finished]
        for child in alive:
            child.ending.by_launcher = not child.ending.failed
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
            if child.ending.at_s is None or not child.ending.failed:
                child.ending.at_s = self.clock()
            if child.ending.status is None and child.ending.signal is None \
                    and child.ending.silent_s is None:
                child.ending.set_returncode(child.proc.returncode)
        for key in list(self.selector.get_map().values()):
            self.selector.unregister(key.fileobj)
            key.fileobj.close()
        return alive


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
