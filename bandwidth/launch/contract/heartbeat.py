"""The heartbeat: each process of a job tells the launcher it is alive, through the launcher's
own rendezvous TCPStore (no other transport), and says how it ended when it fails.

Process side (``environment.join_store`` starts it; nothing to do in a program)::

    beat = Heartbeat.start(role, interval_s)   # a daemon thread, its own store connection
    report_end("a peer process is gone ...", consequence=True)   # before a failing exit

Every ``interval_s`` the thread adds 1 to ``launch/alive/<rank>`` (under the job's secret). It
uses a TCPStore client of its own, so a main thread blocked in the store (a ``wait``, a long
``get``) never delays a beat. When the store stops answering for ``LAUNCHER_GONE_BEATS``
intervals in a row the launcher is gone (killed with SIGKILL, its host lost): the process says so
in one line and ends, with what it started (its process group), instead of running on. A beat
that never comes back counts the same: torch's client waits for an answer without a limit, and
over a cut link (``ip link set down``: no reset, no end-of-file) the beat's ``add`` never
returns, so a second thread (``_watch``) takes a beat outstanding for ``LAUNCHER_GONE_BEATS``
intervals for the launcher gone.

Launcher side: ``HeartbeatWatch.poll`` reads every rank's counter and notes, on the launcher's
clock, when it last changed; ``silent_for(rank)`` is how long a rank has been silent. A rank is
watched from its first beat on (a program that never joins is never blamed). The launcher reads
``ended(rank)`` (JSON: reason, consequence, pid) when it sees the process end.

Nothing here imports torch at module level.
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence

ALIVE_KEY_PREFIX = "launch/alive/"
ENDED_KEY_PREFIX = "launch/ended/"
EVENTS_KEY = "launch/rank_events"     # moved after each record of an end (and rankends')
INTERVAL_VARIABLE = "BANDWIDTH_HEARTBEAT_S"
DEFAULT_INTERVAL_S = 1.0
DEFAULT_MISSES = 2.5          # silent for this many intervals: named as stopped answering
LAUNCHER_GONE_BEATS = 5       # beats that could not reach the store: the launcher is gone

_current: Heartbeat | None = None


class Heartbeat:
    """The beating thread of this process (one per process; see the module docstring)."""

    def __init__(self, store, rank: int, interval_s: float, prog: str):
        self.store, self.rank, self.interval_s, self.prog = store, rank, interval_s, prog
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._beat, name="heartbeat", daemon=True)
        self.sent_at: float | None = None      # monotonic time of the beat under way, if any
        self.watch = threading.Thread(target=self._watch, name="heartbeat-watch", daemon=True)

    @classmethod
    def start(cls, master_addr: str, master_port: int, secret: str, rank: int,
              interval_s: float, prog: str | None = None,
              gated: bool = True) -> Heartbeat | None:
        """Connect a store client of its own and start beating; None if ``interval_s`` is 0."""
        global _current
        if interval_s <= 0 or _current is not None:
            return _current
        from torch.distributed import PrefixStore

        from bandwidth.launch.contract.storegate import connect

        # A client of its own, through the job's gate as join_store's (launch.storegate).
        store = connect(master_addr, master_port, secret, max(2.0, interval_s * 2), gated=gated)
        store = PrefixStore(secret, store) if secret else store     # as environment.job_store
        prog = prog or os.path.basename(sys.argv[0] or "process")
        _current = cls(store, rank, interval_s, prog)
        _current.thread.start()
        _current.watch.start()
        atexit.register(_current.stop_and_join)
        return _current

    def _beat(self) -> None:
        failures = 0
        while True:
            try:
                self.sent_at = time.monotonic()
                self.store.add(f"{ALIVE_KEY_PREFIX}{self.rank}", 1)
                self.sent_at = None
                failures = 0
            except Exception:        # noqa: BLE001 - torch's store errors have no common base
                self.sent_at = None
                failures += 1
                if failures >= LAUNCHER_GONE_BEATS and not self.stopped.is_set():
                    _launcher_gone(self.prog, failures * self.interval_s)
            if self.stopped.wait(self.interval_s):
                return

    def _watch(self) -> None:
        """A beat still under way after ``LAUNCHER_GONE_BEATS`` intervals: the launcher is gone
        (the beat's own client never gives up; see the module docstring)."""
        limit_s = LAUNCHER_GONE_BEATS * max(self.interval_s, 1.0)   # a round trip takes ms
        while not self.stopped.wait(min(max(self.interval_s, 0.1), 1.0)):
            sent = self.sent_at
            if sent is not None and time.monotonic() - sent > limit_s:
                _launcher_gone(self.prog, time.monotonic() - sent)

    def stop(self) -> None:
        self.stopped.set()

    def stop_and_join(self) -> None:
        """At exit: a daemon thread still inside a store call when the interpreter finalizes is
        ended by pthread_exit while C++ frames are on its stack, and the C++ runtime aborts the
        process ("terminate called without an active exception", status 134 after a clean
        run). So the thread is stopped and waited for first; a store call lasts at most its
        client's timeout."""
        self.stopped.set()
        if self.thread.is_alive() and self.thread is not threading.current_thread():
            self.thread.join(timeout=max(2.0, self.interval_s * 2) + 1.0)


def _launcher_gone(prog: str, seconds: float) -> None:
    """One line, then this process's group (it and what it started) ends."""
    try:
        print(f"{prog}: error: the launcher is gone (its rendezvous has not answered for "
              f"{seconds:.0f} s): stopping", file=sys.stderr, flush=True)
    finally:
        try:
            if os.getpgrp() == os.getpid():
                os.killpg(os.getpid(), signal.SIGKILL)
        except OSError:
            pass
        os._exit(1)


def interval_from_environ(environ) -> float:
    """The launcher's heartbeat interval (0: none asked for)."""
    try:
        return max(0.0, float(environ.get(INTERVAL_VARIABLE, "0")))
    except ValueError:
        return 0.0


def report_end(reason: str, consequence: bool) -> None:
    """Tell the launcher why this process is about to fail (``consequence``: because another
    process of the job failed or stopped answering first). No-op without a heartbeat."""
    beat = _current
    if beat is None:
        return
    record = {"reason": reason[:300], "consequence": consequence, "pid": os.getpid()}
    try:
        beat.store.set(f"{ENDED_KEY_PREFIX}{beat.rank}", json.dumps(record))
        beat.store.add(EVENTS_KEY, 1)
    except Exception:            # noqa: BLE001 - the launcher is gone: nothing to tell
        pass


class HeartbeatWatch:
    """The launcher's view of the beats: when each rank's counter last changed."""

    def __init__(self, store, ranks: Sequence[int], interval_s: float, misses: float):
        self.store, self.ranks = store, list(ranks)
        self.interval_s, self.misses = interval_s, misses
        self.counts: dict[int, int] = {}
        self.last_change: dict[int, float] = {}
        self.next_poll = 0.0

    @property
    def threshold_s(self) -> float:
        return self.interval_s * self.misses

    def poll(self, now: float, ranks: Sequence[int] | None = None) -> None:
        """Read the counters of ``ranks`` (default all) about four times an interval."""
        if self.interval_s <= 0 or now < self.next_poll:
            return
        late = now - self.next_poll if self.next_poll else 0.0
        if late > self.interval_s / 4:
            # This launcher itself was late to look (a host whose cores are all busy): the time
            # it did not look is nobody's silence.
            for rank in self.last_change:
                self.last_change[rank] += late
        self.next_poll = now + self.interval_s / 4
        for rank in self.ranks if ranks is None else ranks:
            try:
                count = self.store.add(f"{ALIVE_KEY_PREFIX}{rank}", 0)
            except Exception:    # noqa: BLE001 - the store lives in this process; be safe
                return
            if count and count != self.counts.get(rank):
                self.counts[rank] = count
                self.last_change[rank] = now

    def silent_for(self, rank: int, now: float) -> float:
        """Seconds since ``rank`` last beat; 0 before its first beat (not watched yet)."""
        last = self.last_change.get(rank)
        if last is None:
            return 0.0
        if len(self.last_change) > 1 and now - max(self.last_change.values()) > self.threshold_s:
            # Every process silent at once: the store or this whole host stalled (dozens of
            # processes starting on a few cores starve their beating threads alike), not one
            # process; none is named, and the job's --timeout still bounds a real hang.
            return 0.0
        return now - last

    def ended(self, rank: int) -> dict:
        """What ``rank`` said of its end (``report_end``), or {}."""
        return read_ended(self.store, rank)


def read_ended(store, rank: int) -> dict:
    """What ``rank`` said of its end in ``store`` (``report_end``; JSON only), or {}."""
    key = f"{ENDED_KEY_PREFIX}{rank}"
    try:
        if not store.check([key]):
            return {}
        record = json.loads(store.get(key))
    except Exception:        # noqa: BLE001 - a malformed or missing record says nothing
        return {}
    return record if isinstance(record, dict) else {}
