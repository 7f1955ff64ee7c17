"""How every command ends on Ctrl-C and on a closed stdout: quietly, with a conventional status.

* Ctrl-C (SIGINT): one line ``PROG: interrupted`` on stderr and exit status 130 (128 + SIGINT),
  as a shell reports for a command it interrupted. ``quiet_interrupt_while_importing`` covers the
  first second of a command, while torch imports and no ``try`` of ``main`` is running yet: a
  Ctrl-C there ends the process at once (it has started nothing that could be left behind).
* The reader of stdout went away (``... | head -1``): no traceback, further output discarded,
  exit status 141 (128 + SIGPIPE), what a shell reports for a C tool killed by SIGPIPE. Output cut
  short is not a success: under ``set -o pipefail`` it reads as ``yes | head -1`` does.
"""

from __future__ import annotations

import os
import signal
import sys

INTERRUPTED = 128 + signal.SIGINT          # 130
BROKEN_PIPE = 128 + signal.SIGPIPE         # 141


def require(prog: str, modules: tuple[str, ...] = ("torch", "numpy")) -> None:
    """End with one line and status 2 where this interpreter lacks one of ``modules`` (a python
    outside the environment the tool was installed in), instead of an import's traceback."""
    import importlib.util

    missing = [name for name in modules if importlib.util.find_spec(name) is None]
    if missing:
        print(f"{prog}: error: {' and '.join(missing)} not installed for {sys.executable}: "
              f"install the package there (pip install -e . or pip install torch), or run the "
              "python of the environment that has it", file=sys.stderr)
        sys.exit(2)


def quiet_interrupt_while_importing(prog: str) -> None:
    """Until ``restore_interrupt`` (call it in ``main`` once torch is imported): a Ctrl-C prints
    one line and ends the process with status 130, with no traceback from inside an import."""

    def _interrupted(signum, frame):
        try:
            os.write(2, f"{prog}: interrupted\n".encode())
        finally:
            os._exit(INTERRUPTED)

    signal.signal(signal.SIGINT, _interrupted)


def restore_interrupt() -> None:
    """Ctrl-C raises KeyboardInterrupt again (main's handlers stop what runs and report)."""
    signal.signal(signal.SIGINT, signal.default_int_handler)


def interrupted(prog: str) -> int:
    print(f"{prog}: interrupted", file=sys.stderr)
    return INTERRUPTED


def broken_pipe() -> int:
    """After a BrokenPipeError on stdout: send further output to /dev/null (Python would raise
    again when it flushes stdout at exit) and return 141."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except OSError:
        pass
    return BROKEN_PIPE


def error(line: str) -> None:
    """Print the one error line; under torchrun also hand it to torchrun as this rank's error
    (TORCHELASTIC_ERROR_FILE), so that its failure report shows the line as the cause instead of
    "To enable traceback see ..."."""
    print(line, file=sys.stderr)
    path = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if path:
        import json
        import time

        try:
            with open(path, "w") as out:
                json.dump({"message": line, "timestamp": int(time.time())}, out)
        except OSError:
            pass


def exiting() -> None:
    """main has returned its status: a SIGTERM or SIGHUP from now on (torchrun stops the other
    ranks once one has failed) cannot change it or print a traceback from an exit handler."""
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_IGN)


def out_of_memory() -> type[BaseException]:
    """torch's out-of-memory error, for an ``except`` clause, where torch is imported; before
    that nothing raises it (the commands check their flags before importing torch)."""
    torch = sys.modules.get("torch")
    return torch.OutOfMemoryError if torch is not None else _NeverRaised


class _NeverRaised(Exception):
    pass
