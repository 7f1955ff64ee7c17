"""When each process under ``--launcher mpi`` or ``slurm`` started and how it ended, as the
launcher learns it.

The launcher starts one ``mpirun`` or ``srun`` and sees only that. So every process's wrapper
(``bandwidth.launch.launchers.rolewrap``, behind ``mpirole`` and ``slurmrole``) runs the command as
its child and says, on its stderr, which the runner already carries to the launcher with the rank's
tag (mpirun's ``--tag-output``, srun's ``--label``), two protocol lines, as the ssh launcher's
remote guard does::

    bandwidth-role: start {"pid": 4711}
    bandwidth-role: end {"pid": 4711, "status": 1, "signal": null, "stopped": null}

and, while the command runs, every ``ALIVE_S``::

    bandwidth-role: alive {}

so that a rank whose heartbeat went silent on a host whose wrapper still speaks is a starved
beating thread, not a frozen host or a cut link (the ssh guard's ``alive``; see
``supervisor._silent``).

``status`` or ``signal`` (a name: ``SIGKILL``) is how the command ended; ``stopped`` the signal
its runner (mpirun's daemon, slurmstepd: the wrapper's parent) sent the job's processes before
it ended, which makes it a process the launch stopped rather than a failure. The launcher dates
each line on its own clock as it arrives: the moment the process started or ended. JSON only;
a line that is not the JSON above is shown as the rank's own output. No torch in the wrapper, no
connection of its own: the rank's word travels with its output.

What a process said of its own end (``heartbeat.report_end``: why it fails, and whether because
another failed first) is in the launcher's rendezvous store, as under every launcher;
``SaidWatch`` reads it while the job runs (each such word moves ``launch/rank_events``), so that
it too is dated when it was said.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Mapping

from bandwidth.launch.contract.heartbeat import EVENTS_KEY, read_ended

PREFIX = "bandwidth-role:"
ALIVE_S = 1.0
ALIVE_LINE = f"{PREFIX} alive {{}}\n"
POLL_S = 0.1
_SIGNAL_NAMES = {s.name for s in signal.Signals}


def signal_name(returncode: int) -> str | None:
    """``SIGKILL`` for -9 (a Popen returncode); None for an exit status."""
    if returncode >= 0:
        return None
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"SIG{-returncode}"


def start_line(pid: int) -> str:
    return f"{PREFIX} start {json.dumps({'pid': pid})}\n"


def end_line(pid: int, returncode: int, stopped: str | None) -> str:
    """The line of a command that ended with Popen's ``returncode``."""
    record = {"pid": pid, "status": returncode if returncode >= 0 else None,
              "signal": signal_name(returncode), "stopped": stopped}
    return f"{PREFIX} end {json.dumps(record)}\n"


def split_line(text: str) -> tuple[str, tuple[str, dict] | None]:
    """``text`` (one line of a rank's stderr) as (the rank's own text before a protocol line,
    (kind, record) or None). The command may have left a line unfinished before its wrapper's
    word, so the protocol is looked for anywhere in the line."""
    at = text.find(PREFIX)
    if at < 0:
        return text, None
    kind, _, payload = text[at + len(PREFIX):].strip().partition(" ")
    if kind == "alive" and payload.strip() == "{}":
        return text[:at], ("alive", {})
    record = parse_record(payload) if kind in ("start", "end") else None
    if record is None:
        return text, None
    return text[:at], (kind, record)


def parse_record(payload: str) -> dict | None:
    """A record as the wrapper writes it, every field checked; None for anything else."""
    try:
        doc = json.loads(payload)
    except ValueError:
        return None
    if not isinstance(doc, dict):
        return None

    def number(name, low, high):
        value = doc.get(name)
        ok = isinstance(value, int) and not isinstance(value, bool) and low <= value <= high
        return value if ok else None

    def name(field):
        value = doc.get(field)
        ok = isinstance(value, str) and (value in _SIGNAL_NAMES or (
            value.startswith("SIG") and value[3:].isdigit()))
        return value if ok else None

    return {"pid": number("pid", 1, 2**31), "status": number("status", 0, 255),
            "signal": name("signal"), "stopped": name("stopped")}


class SaidWatch:
    """What ranks ``0..world_size-1`` said of their end, each dated on the launcher's clock when
    first seen: ``said``, rank -> (record, seconds)."""

    def __init__(self, store, world_size: int):
        self.store, self.world_size = store, world_size
        self.said: dict[int, tuple[Mapping, float]] = {}
        self.events = 0
        self.next_poll = 0.0

    def poll(self, now: float, force: bool = False) -> None:
        """Read what is new (at most every ``POLL_S``; ``force``: now, every rank not seen)."""
        if not force and now < self.next_poll:
            return
        self.next_poll = now + POLL_S
        try:
            events = self.store.add(EVENTS_KEY, 0)
        except Exception:    # noqa: BLE001 - the store lives in this process; be safe
            return
        if events == self.events and not force:
            return
        self.events = events
        for rank in range(self.world_size):
            if rank not in self.said and (said := read_ended(self.store, rank)):
                self.said[rank] = (said, now)
