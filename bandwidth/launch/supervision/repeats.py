"""Identical stderr lines from many processes, shown once with the count: 100 workers that hit
the same error print one line, not 100 (issue 27). A line is shown the first time any process
prints it; the same line from another process is held back and counted, and ``summary`` says,
when the job ends, how many processes printed each held-back line. Lines a process repeats itself
(progress, its own retries) are all shown. At most MAX_LINES distinct lines are remembered."""

from __future__ import annotations

MAX_LINES = 10_000


class Repeats:
    def __init__(self):
        self.first: dict[str, str] = {}        # line -> label of the process that showed it
        self.count: dict[str, int] = {}        # line -> processes that printed it

    def show(self, label: str, line: str) -> bool:
        """Whether ``label``'s ``line`` is shown (False: another process showed it already)."""
        if not line.strip():
            return True
        shown_by = self.first.get(line)
        if shown_by is None:
            if len(self.first) < MAX_LINES:
                self.first[line], self.count[line] = label, 1
            return True
        if shown_by == label:
            return True
        self.count[line] += 1
        return False

    def summary(self) -> list[str]:
        """One line per held-back line: how many processes printed it."""
        return [f"launch: {n} processes printed this line, shown once (from {self.first[line]}): "
                f"{line[:200]}" for line, n in self.count.items() if n > 1]
