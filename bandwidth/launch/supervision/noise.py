"""torch's warnings that flood the stderr of multi-host jobs, explained once by the launcher.

Each pattern here matches a line torch prints for every connection or rank, with nothing for the
user to do. The first matching line of a launch is shown with one explanation; the rest of its
kind are hidden (and kept out of the ``FAIL:`` report's last lines, where they would push out the
cause). Everything else passes through untouched.
"""

from __future__ import annotations

import re

# (pattern, explanation)
KNOWN = (
    (re.compile(r"\[c10d\] The hostname of the client socket cannot be retrieved"),
     "torch's c10d could not look up a name for a peer's address (no reverse DNS or /etc/hosts "
     "entry for it); harmless, the job connects by address; further such lines are hidden"),
    (re.compile(r"\[c10d\] waitForInput: (poll for )?socket .*(returned 0|timed out)"),
     "torch's c10d store client gave up waiting on a peer (the process that stopped answering "
     "is named in the FAIL: line); further such lines are hidden"),
)


class NoiseFilter:
    """Shared by every child of one launch (see ``Supervisor``)."""

    def __init__(self, known=KNOWN):
        self.known = known
        self.seen: set[int] = set()

    def explain(self, line: str) -> str | None:
        """None: show ``line`` as it is; "": hide it; else the explanation to show once."""
        for index, (pattern, explanation) in enumerate(self.known):
            if pattern.search(line):
                if index in self.seen:
                    return ""
                self.seen.add(index)
                return explanation
        return None
