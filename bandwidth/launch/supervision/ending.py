"""How each process of a launch ended, which one was the root cause, and the ``--report`` file.

Every child the supervisor starts gets an ending on the launcher's clock (seconds since the
launch started): the moment its exit was seen (an ssh child: the moment the remote guard's
``exit``/``signal`` line arrived; the guard sends it as soon as the command ends; a process that
mpirun or srun runs: the moment its wrapper's ``end`` line arrived,
``bandwidth.launch.supervision.runner``), its status or signal, the first line of its stderr that
reads as an error, what the process itself said of its end through the heartbeat
(``heartbeat.report_end``), and whether the launcher (or mpirun, srun) had already stopped it. A
process that stopped answering (no heartbeat for the threshold) ends, for this purpose, at its last
heartbeat.

The root cause is the earliest failure among the processes that did not say they failed
because of another (a process that gave up waiting for a peer is a consequence); only when
every failure is a consequence is the earliest of those taken. Processes the launcher stopped
afterwards are never the cause.
"""

from __future__ import annotations

import errno
import json
import os
import re
import signal
import tempfile
from collections.abc import Sequence

# A line of a child's stderr that reads as its error (the first one is kept).
_ERROR_LINE = re.compile(r"(^|\W)(error|Error|ERROR|FAIL|Exception|Killed)\b")
# measure.py's line for a failure caused by another process (see measure.py's main).
PEER_PHRASES = ("a peer process is gone", "the launcher is gone")


def is_error_line(line: str) -> bool:
    return bool(_ERROR_LINE.search(line)) and not line.startswith("Traceback")


class Ending:
    """What the launcher knows of one child's end (filled in as it learns it)."""

    def __init__(self):
        self.at_s: float | None = None       # launcher clock: when it ended (or went silent)
        self.status: int | None = None       # exit status, or None
        self.signal: str | None = None       # the signal that killed it, or None
        self.first_error = ""                # first error line of its stderr
        self.said: dict = {}                 # what it reported itself (reason, consequence)
        self.by_launcher = False             # the launcher had asked it to stop
        self.silent_s: float | None = None   # no heartbeat for this long when it was judged
        self.failed = False

    @property
    def consequence(self) -> bool:
        if self.said.get("consequence") is True:
            return True
        return any(phrase in self.first_error for phrase in PEER_PHRASES)

    @property
    def reason(self) -> str:
        return str(self.said.get("reason") or self.first_error)

    def set_returncode(self, code: int) -> None:
        if code < 0:
            self.signal = signal.Signals(-code).name
        else:
            self.status = code


def pick_root(candidates: Sequence) -> object | None:
    """The root cause among ``candidates`` (children with an ``ending``): failures only, those
    that are not consequences first, then the earliest."""
    failed = [c for c in candidates if c.ending.failed and not c.ending.by_launcher]
    if not failed:
        return None
    return min(failed, key=lambda c: (c.ending.consequence, c.ending.at_s or 0.0))


def how(ending: Ending) -> str:
    if ending.silent_s is not None and ending.status is None and ending.signal is None:
        return f"stopped answering ({ending.silent_s:.0f} s without a heartbeat)"
    if ending.signal:
        return f"was killed by {ending.signal}"
    if ending.status is not None:
        return f"exited with status {ending.status}"
    return "failed" if ending.failed else "ended"     # its status lost (mpirun's SIGKILL)


def consequence_line(root, children: Sequence) -> str:
    """One line: the processes that failed after the root cause, in the order they ended."""
    after = [c for c in children if c is not root and c.ending.failed
             and not c.ending.by_launcher]
    after.sort(key=lambda c: c.ending.at_s or 0.0)
    if not after:
        return "  then: no other process failed"
    parts = [f"{c.subject} {how(c.ending)} at {c.ending.at_s or 0.0:.1f} s" for c in after]
    return "  then, as a consequence: " + "; ".join(parts)


def record(child, root) -> dict:
    """One child's ending as the report file holds it."""
    ending = child.ending
    role = getattr(child, "role", None)
    return {
        "subject": child.subject, "label": child.label,
        "role": getattr(role, "name", None), "rank": getattr(role, "rank", None),
        "host": getattr(role, "node_host", None), "pid": child.pid,
        "started_s": child.started_s, "ended_s": ending.at_s, "status": ending.status,
        "signal": ending.signal, "failed": ending.failed, "reason": ending.reason,
        "consequence": ending.consequence if ending.failed else False,
        "stopped_by_launcher": ending.by_launcher, "silent_s": ending.silent_s,
        "root_cause": child is root,
    }


def write_report(path: str, doc: dict) -> None:
    """Write ``doc`` as JSON to ``path`` through a temporary file in the same folder and a rename,
    so that a failed write never leaves a truncated report (or loses an older one). A symlink is
    written through (its target replaced, the link kept); what is not a regular file (a FIFO, a
    device, checked before the job by cliparse.check_output_path) is never replaced."""
    path = os.path.realpath(path)
    if os.path.exists(path) and not os.path.isfile(path):
        raise OSError(errno.EINVAL, "not a regular file (a FIFO, socket or device)")
    folder = os.path.dirname(path)
    fd, tmp = tempfile.mkstemp(prefix=".launch-report-", dir=folder)
    try:
        with os.fdopen(fd, "w") as out:
            json.dump(doc, out, indent=2)
            out.write("\n")
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
