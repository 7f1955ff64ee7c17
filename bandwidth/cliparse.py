"""The argument parser of every command: a bad flag is one line on stderr and exit status 2.

argparse's own ``error`` prints the whole usage block (17 lines for measure.py) before the
message; the usage stays in ``--help``, and the one line says so.
"""

from __future__ import annotations

import argparse


class OneLineParser(argparse.ArgumentParser):
    """``argparse.ArgumentParser`` whose errors are ``prog: error: message (see --help)``."""

    def error(self, message: str):
        message = " ".join(message.split())            # never more than one line
        self.exit(2, f"{self.prog}: error: {message[:500]} (see --help)\n")
