"""Under the launcher: opens the job's store itself, as a program using init_method env:// does,
from a process that is no descendant of the launcher (started with ``setsid -f``, re-parented
away), as a process on another host is. Prints ``served <value>`` or ``refused <error>``.
Argument: how long the client tries to connect, in seconds (default 20; a refused client tries
for all of it)."""

import os
import subprocess
import sys
import tempfile
import time

CLIENT = """
from datetime import timedelta
import os, torch.distributed as dist
try:
    s = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False,
                      timeout=timedelta(seconds=float(os.environ["STRANGER_TIMEOUT_S"])))
    s.set("from-elsewhere", "1")
    print("served", s.get("from-elsewhere").decode(), flush=True)
except Exception as err:
    print("refused", type(err).__name__, flush=True)
"""

with tempfile.TemporaryDirectory() as folder:
    out = os.path.join(folder, "client.out")
    with open(out, "w") as sink:
        timeout_s = sys.argv[1] if len(sys.argv) > 1 else "20"
        subprocess.run(["setsid", "-f", sys.executable, "-c",
                        CLIENT + f"\nopen({out!r} + '.done', 'w').close()\n"],
                       stdout=sink, stderr=subprocess.STDOUT, check=True, timeout=30,
                       env=dict(os.environ, STRANGER_TIMEOUT_S=timeout_s))
    deadline = time.monotonic() + 90
    while not os.path.exists(out + ".done") and time.monotonic() < deadline:
        time.sleep(0.1)
    # The client's own line, not the last one: torch's C++ warnings on its stderr (the same
    # file) may come after it. It flushes its line before it writes the .done file: left to the
    # interpreter's exit, the line came after the file, and a loaded machine read "nothing
    # printed" in between.
    lines = open(out).read().strip().splitlines()
    said = [line for line in lines if line.startswith(("served", "refused"))]
    print((said or lines or ["nothing printed"])[-1], flush=True)
