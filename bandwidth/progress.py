"""Progress on stderr: a bar that a person recognises, updated in place with ``\\r`` on a
terminal, and plain lines elsewhere, so that CI logs stay readable.

``Progress``: a sweep's bar, one line per finished configuration where stderr is no terminal::

    [=========>              ] 3/8 local flat 1M cpu x2: 2.512 GB/sec per gpu, 94.6 % of ceiling

``Stages``: what a long wait is doing (a distributed job's rendezvous, its set-up, an iteration's
error check), said once nothing else has been said for ``SILENCE_S``: on a terminal the stage
and its seconds rewritten in place until something else is printed, elsewhere one line per
stage, so that a run shows nothing more unless it falls silent::

    # joining: 3 of 4 processes in the rendezvous ... 12 s
"""

from __future__ import annotations

import shutil
import sys
import threading
import time
from collections.abc import Callable
from typing import TextIO

SILENCE_S = 10.0         # a wait longer than this says what it is doing

BAR_WIDTH = 24


def bar(done: int, total: int, width: int = BAR_WIDTH) -> str:
    """``[=====>    ] 3/8``: ``done`` of ``total`` as a bar of ``width`` characters."""
    filled = width * done // total if total else width
    inner = "=" * width if filled >= width else "=" * filled + ">" + " " * (width - filled - 1)
    return f"[{inner}] {done}/{total}"


class Progress:
    """``start`` announces a configuration (on a terminal only), ``finish`` reports it; ``close``
    ends the line a terminal bar leaves open."""

    def __init__(self, total: int, stream: TextIO | None = None, tty: bool | None = None):
        self.total = total
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty() if tty is None else tty
        self._shown = 0          # characters of the bar line now on the terminal

    def start(self, done: int, text: str) -> None:
        if self.tty:
            self._show(f"{bar(done, self.total)} {text} ...")

    def finish(self, done: int, text: str) -> None:
        line = f"{bar(done, self.total)} {text}"
        if self.tty:
            self._show(line)
        else:
            print(line, file=self.stream, flush=True)

    def close(self) -> None:
        if self.tty and self._shown:
            self.stream.write("\n")
            self.stream.flush()
            self._shown = 0

    def clear(self) -> None:
        """Blank the terminal's bar line (others' output follows on a clean line)."""
        if self.tty and self._shown:
            self.stream.write("\r" + " " * self._shown + "\r")
            self.stream.flush()
            self._shown = 0

    def _show(self, line: str) -> None:
        # A line longer than the terminal wraps, and \r would then rewrite only its last part.
        line = line[:max(20, shutil.get_terminal_size().columns - 1)]
        self.stream.write("\r" + line + " " * max(0, self._shown - len(line)))
        self.stream.flush()
        self._shown = len(line)


class Stages:
    """The stage a process is in (``enter``), shown once nothing has been said for ``after_s``
    (``said`` records that something else was printed): on a terminal ``[bar] stage ... 12 s``
    rewritten each ``tick`` until ``said`` or ``close`` clears it, elsewhere one line per stage,
    ``# stage ... 12 s``, which restarts the silence. A stage is a text or a function of nothing
    that returns it (asked at each tick: a count of processes that joined). ``watching()`` ticks
    on a thread of its own, for a caller blocked in the wait it reports; a caller with a loop
    of its own calls ``tick``."""

    def __init__(self, after_s: float = SILENCE_S, stream: TextIO | None = None,
                 tty: bool | None = None, clock: Callable[[], float] = time.monotonic):
        self.after_s, self.clock = after_s, clock
        self._progress = Progress(0, stream, tty)
        self._lock = threading.RLock()
        self._stage: str | Callable[[], str] | None = None
        self._count: tuple[int, int] | None = None
        self._entered = self._quiet_since = clock()
        self._stage_said = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @classmethod
    def quiet(cls) -> "Stages":
        """Stages that never say anything (a process that does not print)."""
        return cls(after_s=float("inf"))

    def enter(self, stage: str | Callable[[], str] | None, done: int | None = None,
              total: int | None = None) -> None:
        """From now on the process is in ``stage`` (None: in none worth saying), step ``done``
        of ``total`` where given (the bar on a terminal)."""
        with self._lock:
            self._stage, self._entered, self._stage_said = stage, self.clock(), False
            self._count = (done, total) if done is not None and total else None

    def said(self) -> None:
        """Something else is about to be printed: the terminal's line is cleared, the silence
        starts again."""
        with self._lock:
            self._progress.clear()
            self._quiet_since = self.clock()

    def tick(self) -> None:
        with self._lock:
            now = self.clock()
            if self._stage is None or now - self._quiet_since < self.after_s:
                return
            if not self._progress.tty and self._stage_said:
                return                                      # one line per stage
            text = self._stage() if callable(self._stage) else self._stage
            line = f"{text} ... {now - self._entered:.0f} s"
            if self._progress.tty:
                count = self._count
                self._progress._show(f"{bar(*count)} {line}" if count else line)
            else:
                print(f"# {line}", file=self._progress.stream, flush=True)
                self._quiet_since = now
            self._stage_said = True

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
        with self._lock:
            self._progress.clear()
            self._stage = None

    def watching(self, tick_s: float = 0.5) -> "Stages":
        """Tick every ``tick_s`` on a thread of its own until ``close`` (or the ``with`` block's
        end). The thread only writes to the stream, and a failure to write ends it quietly:
        progress must never fail a measurement."""
        def run() -> None:
            while not self._stop.wait(tick_s):
                try:
                    self.tick()
                except (OSError, ValueError):
                    return                                  # stderr closed
        self._thread = threading.Thread(target=run, name="stages", daemon=True)
        self._thread.start()
        return self

    def __enter__(self) -> "Stages":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
