"""The argument parser of every command: a bad flag is one line on stderr and exit status 2.

argparse's own ``error`` prints the whole usage block (17 lines for measure.py) before the
message; the usage stays in ``--help``, and the one line says so. ``check_output_path``: every
command's output files, checked before anything runs.
"""

from __future__ import annotations

import argparse
import errno
import os
from pathlib import Path

from bandwidth.errors import ConfigError


class OneLineParser(argparse.ArgumentParser):
    """``argparse.ArgumentParser`` whose errors are ``prog: error: message (see --help)``."""

    def error(self, message: str):
        message = " ".join(message.split())            # never more than one line
        self.exit(2, f"{self.prog}: error: {message[:500]} (see --help)\n")


PLOT_SUFFIXES = (".png", ".svg", ".pdf")


def check_output_path(flag: str, path: str | None) -> None:
    """Refuse, before anything runs, an output file that could not be written or whose writing
    would replace what is not a file: a folder, a FIFO, socket or device (through a symlink too),
    a symlink loop, a missing or read-only folder. Nothing measured is then lost at the end."""
    if path is None:
        return
    if not path.strip():
        raise ConfigError(f"{flag} '': give a file name")
    target = Path(path)
    if target.is_symlink():
        try:
            target = Path(os.path.realpath(target, strict=True))
        except FileNotFoundError:
            target = Path(os.path.realpath(target))     # a dangling link: its target is created
        except OSError as exc:
            why = "is a symlink loop" if exc.errno == errno.ELOOP else \
                f"cannot follow the symlink ({exc.strerror})"
            raise ConfigError(f"{flag} {path}: {why}; give a file") from None
    if target.is_dir():
        raise ConfigError(f"{flag} {path}: is a folder; give a file name inside it")
    if target.exists() and not target.is_file():
        raise ConfigError(f"{flag} {path}: is not a regular file (a FIFO, socket or device); "
                          "give a file name")
    folder = target.parent
    if not folder.is_dir():
        raise ConfigError(f"{flag} {path}: the folder {str(folder)!r} does not exist")
    if not os.access(folder, os.W_OK | os.X_OK) or (target.exists()
                                                     and not os.access(target, os.W_OK)):
        raise ConfigError(f"{flag} {path}: not writable by this user")
    if flag == "--plot" and target.suffix.lower() not in PLOT_SUFFIXES:
        raise ConfigError(f"--plot {path}: give a file name ending in "
                          f"{', '.join(PLOT_SUFFIXES)} (the format follows the name)")
