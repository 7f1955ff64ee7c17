"""Under the launcher: worker 1 runs the command until it has printed its first MXNet line, then
exits with status 1, its command still running (the launcher must stop it); every other process
simply becomes the command. The role comes from the launcher's contract, nothing else.

Usage: python worker_exits.py LOGDIR command...
"""

import os
import subprocess
import sys
import time

logdir, command = sys.argv[1], sys.argv[2:]
if os.environ.get("DMLC_ROLE") != "worker" or os.environ.get("DMLC_TASK_ID") != "1":
    os.execvp(command[0], command)
log = os.path.join(logdir, "worker-1.out")
with open(log, "w") as out:
    child = subprocess.Popen(command, stdout=out)
while "iter 1," not in open(log).read():
    if child.poll() is not None:                 # it ended before measuring: pass that on
        sys.exit(child.returncode or 3)
    time.sleep(0.05)
print("worker 1 exiting with status 1 on purpose, mid-run", file=sys.stderr, flush=True)
os._exit(1)
