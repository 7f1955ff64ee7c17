"""Rank R fails (exit status or a signal) after a little stderr; every other process sleeps.

Usage (under the launcher): fail.py MARKER --rank R [--exit CODE | --signal NAME] [--after S]
                                    [--spawn]
MARKER only makes the processes findable in /proc; R=-1: nobody fails (all sleep).
``--spawn``: every process first starts a sleeping helper process (MARKER in its argv), which
the launcher must not leave behind either.
"""

import argparse
import os
import signal
import subprocess
import sys
import time

parser = argparse.ArgumentParser()
parser.add_argument("marker")
parser.add_argument("--rank", type=int, required=True)
parser.add_argument("--exit", type=int, default=1)
parser.add_argument("--signal")
parser.add_argument("--after", type=float, default=0.5)
parser.add_argument("--spawn", action="store_true")
args = parser.parse_args()
if args.spawn:
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", args.marker])
rank = int(os.environ.get("RANK", "-2"))
if rank == args.rank:
    time.sleep(args.after)
    print("about to fail: first line", file=sys.stderr)
    print(f"rank {rank} failing on purpose ({args.marker})", file=sys.stderr, flush=True)
    if args.signal:
        os.kill(os.getpid(), getattr(signal, args.signal))
    sys.exit(args.exit)
time.sleep(600)
