"""Start a distributed job (MXNet's tools/launch.py interface); see bandwidth/launch/cli.py.

    python launch.py -n 2 -s 2 python3 train.py
    python launch.py -H hosts -n 4 --launcher mpi python3 train.py
"""

import os
import signal
import sys


def _early_stop(signum, frame):
    # SIGTERM or SIGHUP while the launcher's own modules (and torch) still import: nothing runs
    # yet; one line and 128 + N, as at any later moment (bandwidth/launch/cli.py takes over).
    # os._exit, not sys.exit: an exception raised inside an import that is half done (torch's)
    # can leave the interpreter unable to finish (the launcher hung past 60 s twice in this
    # session's suite runs on the loaded 2-core VM, SIGTERM 0.2-0.4 s after its start).
    sys.stderr.write(f"launch.py: interrupted by {signal.Signals(signum).name} (no process was "
                     "running)\n")
    sys.stderr.flush()
    os._exit(128 + signum)


if __name__ == "__main__":
    for _signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(_signum, _early_stop)

from bandwidth.launch.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
