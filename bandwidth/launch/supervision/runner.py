"""A child that runs every process of the job itself (``mpirun``, ``srun``), and the processes
it runs as the launcher's reports see them.

``RunnerChild`` splits the runner's output back into one stream per process
(``rank_line``), takes each wrapper's protocol lines out of it
(``bandwidth.launch.supervision.rankends``: started and ended, dated on the launcher's clock as they
arrive, pid, status or signal), and when the runner has exited (``reap``) gives each process its
ending from them and from what it said of its own end (``heartbeat.report_end``, read from the
store). Then ``parts()`` is those processes, so that the root cause is picked among them as among
the local launcher's children, the consequence line lists them and ``--report`` holds one object per
process. Where a process left no record (its wrapper killed with SIGKILL, or unable to reach the
store), the runner's own message names the one that failed (``named_rank``, the launcher's sole
source before), and the runner's own failures (a host it cannot reach) stay its own
(``own_failure``).
"""

from __future__ import annotations

import collections
import signal
from collections.abc import Sequence

from bandwidth.launch.supervision.child import TAIL_LINES, Child, Failure, status_failure
from bandwidth.launch.supervision.ending import Ending, is_error_line, pick_root
from bandwidth.launch.supervision.rankends import split_line


ABORT_WAIT_S = 15.0     # a process failed: the runner has this long to end the job itself


class RankProcess:
    """One process of the job that the runner started (what ``ending.record`` reads)."""

    finished = True

    def __init__(self, role, label: str, subject: str):
        self.role, self.label, self.subject = role, label, subject
        self.tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
        self.ending = Ending()
        self.pid: int | None = None
        self.started_s: float | None = None
        self.failure_found: Failure | None = None
        self.alive_s: float | None = None      # its wrapper's last ``alive``, launcher's clock

    def reachable(self, now_s: float, within_s: float) -> bool:
        """Its wrapper spoke within ``within_s`` (launcher's clock): the host runs and the
        runner's line carries, so a silent heartbeat is a starved thread, not a lost host."""
        return self.alive_s is not None and now_s - self.alive_s <= within_s

    def stopped(self) -> str:
        return ""          # on another host: its state is not read here

    def note(self, line: str) -> None:
        """One line of this process's stderr."""
        if not self.ending.first_error and is_error_line(line):
            self.ending.first_error = line.strip()[:300]
        self.tail.append(line)


def settle(part: RankProcess, start, end, said, named: int | None, runner_code: int,
           now: float) -> bool:
    """Fill ``part``'s ending from its records (``start``, ``end``, ``said``: (record, at_s) or
    None; ``said``: what it said of its own end) and, without an exit record, from the runner:
    ``named`` is the returncode the runner's message gives this process, ``runner_code`` the
    runner's status. Returns whether anything was known of this process. A process the launcher
    already named while the runner ran (it stopped answering: ``supervisor._silent``) keeps
    that ending."""
    ending = part.ending
    if part.failure_found is not None:
        return True
    if start is not None:
        part.pid, part.started_s = start[0]["pid"], start[1]
    ending.said = said[0] if said is not None else {}
    consequence = ending.said.get("consequence") is True
    if end is not None:
        record, ending.at_s = end
        part.pid = record["pid"] or part.pid
        if record["signal"] is not None:
            ending.signal = record["signal"]
        else:
            ending.status = record["status"]
        ok = ending.status == 0 and ending.signal is None
        # stopped by the runner, unless it had already failed because of another process
        ending.by_launcher = not ok and record["stopped"] is not None and not consequence
        ending.failed = not ok and not ending.by_launcher
    elif named is not None:
        ending.at_s = said[1] if said is not None else now
        ending.set_returncode(named)
        ending.failed = named != 0
    elif runner_code == 0:              # the runner succeeds only when every process did
        ending.at_s, ending.status = now, 0
    elif consequence:                   # its exit record lost (the runner's SIGKILL)
        ending.at_s, ending.failed = said[1], True
    elif start is not None:             # stopped by the runner, its last word lost
        ending.at_s, ending.by_launcher = now, True
    if ending.failed:
        code = -_signal_number(ending.signal) if ending.signal else ending.status
        part.failure_found = Failure(part.subject, "failed", 1, part.label, tuple(part.tail)) \
            if code is None else status_failure(part.subject, code, part.label, part.tail)
    return any(x is not None for x in (start, end, said, named))


class RunnerChild(Child):
    """mpirun or srun: one child of the launcher for every process of the job."""

    said_watch = None      # the launch's rankends.SaidWatch (set by the Supervisor), or None

    def __init__(self, runner: str, argv: Sequence[str], env: dict[str, str], roles,
                 cwd: str | None = None):
        super().__init__(runner, runner, argv, env, cwd=cwd, capture_stdout=True)
        self.runner = runner
        self.ranks = [RankProcess(role, role.label, role.title) for role in roles]
        self.labels = [role.label for role in roles]
        self.subjects = [role.title for role in roles]
        self.started: dict[int, tuple[dict, float]] = {}    # index -> (record, launcher clock)
        self.exits: dict[int, tuple[dict, float]] = {}
        self.settled = False
        self.forced_at: float | None = None    # when the launcher stopped a runner that hung

    def rank_line(self, index: int, line: str) -> str | None:
        """One stderr line of process ``index``: its wrapper's word is noted and taken out;
        returns what is left to show (None: nothing)."""
        text, event = split_line(line)
        if event is not None and index < len(self.ranks):
            kind, record = event
            if kind == "alive":
                self.ranks[index].alive_s = self.clock()
            else:
                (self.started if kind == "start" else self.exits)[index] = (record, self.clock())
            if not text:
                return None
        if index < len(self.ranks):
            self.ranks[index].note(text)
        return text

    def tick(self, now: float) -> None:
        """A process failed ``ABORT_WAIT_S`` ago and the runner still runs: its own abort hung
        (mpirun that cannot reach a cut-off host's daemon; Open MPI 4's crashed in
        PMIx_Finalize and never exited), so the launcher stops it: SIGTERM, SIGKILL after the
        grace period."""
        failed = [at for record, at in self.exits.values()
                  if record["stopped"] is None and (record["status"] or record["signal"])]
        clock = self.clock()
        if self.forced_at is None:
            if failed and clock - min(failed) > ABORT_WAIT_S:
                self.forced_at = clock
                self.terminate()
        elif clock - self.forced_at > self.grace_s:
            self.kill()

    def members(self) -> list:
        return [self, *self.ranks]

    def watched(self) -> list:
        """The processes whose heartbeat the launcher watches: those that started and have not
        ended."""
        return [part for index, part in enumerate(self.ranks)
                if index in self.started and index not in self.exits
                and part.role.rank is not None]

    def parts(self) -> list:
        """The processes of the job once anything is known of them; else the runner itself."""
        return list(self.ranks) if self.settled else [self]

    def reap(self) -> None:
        super().reap()
        if not self.settled:
            self._settle_ranks()

    def _settle_ranks(self) -> None:
        watch, now = self.said_watch, self.clock()
        if watch is not None:
            watch.poll(now, force=True)
        code = self.proc.returncode
        named = self.named_rank() if code != 0 else None
        known = False
        for index, part in enumerate(self.ranks):
            rank = part.role.rank
            said = watch.said.get(rank) if watch is not None and rank is not None else None
            start, end = self.started.get(index), self.exits.get(index)
            returncode = named[1] if named is not None and named[0] == index else None
            known |= settle(part, start, end, said, returncode, code, now)
        self.settled = known

    def failure(self) -> Failure | None:
        if self.proc.returncode == 0:
            return None
        root = pick_root(self.ranks) if self.settled else None
        if root is not None:
            return root.failure_found
        return self.own_failure()

    def named_rank(self) -> tuple[int, int] | None:
        """(index, returncode) of the process the runner's own message names as failed."""
        return None

    def own_failure(self) -> Failure:
        """The runner's failure where no process of the job is known to have failed."""
        return status_failure(self.runner, self.proc.returncode, self.runner, self.tail)

    def rank_failure(self, index: int, returncode: int, fallback: Sequence[str] = ()) -> Failure:
        """Process ``index`` failed with ``returncode``, as the runner's message says."""
        if index >= len(self.ranks):
            return status_failure(f"{self.runner} task {index}", returncode, self.runner,
                                  fallback)
        return status_failure(self.subjects[index], returncode, self.labels[index],
                              self.ranks[index].tail or fallback)


def _signal_number(name: str) -> int:
    if name.startswith("SIG") and name[3:].isdigit():
        return int(name[3:])
    return int(getattr(signal.Signals, name, signal.SIGKILL))
