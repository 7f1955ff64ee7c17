"""This process's stdout, shared with the job's other processes: whole lines only, and sent to
/dev/null once its reader has gone. Imports nothing heavy: measure.py sets it up before it
parses its flags."""

from __future__ import annotations

import io
import os
import sys


def discard_stdout() -> None:
    """Send this process's further output to /dev/null: the reader of stdout has gone (measure.py
    ... | head -1), and Python would otherwise raise BrokenPipeError again when it flushes stdout
    at exit."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


class WholeLines(io.TextIOBase):
    """A text stream that hands ``stream`` only whole lines, each batch in one write and flushed
    at once. Several processes of a job (torchrun's ranks, launch.py's workers, the per-device
    ranks) share one stdout; ``print`` writes the text and its newline apart (under ``python -u``
    or PYTHONUNBUFFERED, as CI and containers set, each is a write of its own), and a block
    buffer flushes wherever it is full, so another process's line could land mid-line. A pipe
    keeps a write of up to 4 KiB whole."""

    def __init__(self, stream):
        super().__init__()
        self.stream = stream
        self.pending = ""

    def write(self, text: str) -> int:
        self.pending += text
        cut = self.pending.rfind("\n") + 1
        if cut:
            whole, self.pending = self.pending[:cut], self.pending[cut:]
            self.stream.write(whole)
            self.stream.flush()
        return len(text)

    def flush(self) -> None:
        if self.pending:                   # a line without its newline yet: as it is
            text, self.pending = self.pending, ""
            self.stream.write(text)
        self.stream.flush()

    def fileno(self) -> int:
        return self.stream.fileno()

    def isatty(self) -> bool:
        return self.stream.isatty()

    @property
    def encoding(self):
        return getattr(self.stream, "encoding", "utf-8")


def whole_lines() -> None:
    """Make this process's stdout a WholeLines stream (once)."""
    if not isinstance(sys.stdout, WholeLines) and sys.stdout is not None:
        sys.stdout = WholeLines(sys.stdout)
