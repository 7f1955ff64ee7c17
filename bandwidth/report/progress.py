"""A sweep's progress on stderr: a bar that a person recognises, updated in place with ``\\r`` on a
terminal, and one line per finished configuration elsewhere, so that CI logs stay readable::

    [=========>              ] 3/8 local flat 1M cpu x2: 2.512 GB/sec per gpu, 94.6 % of ceiling
"""

from __future__ import annotations

import shutil
import sys
from typing import TextIO

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

    def _show(self, line: str) -> None:
        # A line longer than the terminal wraps, and \r would then rewrite only its last part.
        line = line[:max(20, shutil.get_terminal_size().columns - 1)]
        self.stream.write("\r" + line + " " * max(0, self._shown - len(line)))
        self.stream.flush()
        self._shown = len(line)
