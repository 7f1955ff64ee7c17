"""Ends what a launch started on this host once the launcher is gone, even by SIGKILL.

    python3 -m bandwidth.launch.supervision.sentinel    (started by the supervisor; reads its stdin)

A local child dies with the launcher (``PR_SET_PDEATHSIG``), but what the child started does not:
a SIGKILLed launcher left ``sh -c 'sleep 300 & setsid sleep 300'``'s sleeps running under PID 1.
So the supervisor gives every child it starts one more variable, ``BANDWIDTH_LAUNCH_ID`` (random,
one per launch), which whatever the child starts inherits, ``setsid`` or not, and starts this
process, in a session of its own, with the same variable and a pipe whose write end only the
launcher holds. When the launcher ends, however it ends, the pipe reads end-of-file; this
process then kills every process whose environment holds that variable with that value (read in
/proc, as the user's own processes are), until none is left. The launcher closes the pipe itself
when the job is over, so what a process left running after a normal end goes too, as the remote
guard does. A process that empties its environment escapes it.

Linux only (/proc); elsewhere it waits for end-of-file and does nothing.
"""

import os
import secrets
import signal
import subprocess
import sys
from pathlib import Path

from bandwidth.launch.supervision.guard import kill_until_none, proc_table

ID_VARIABLE = "BANDWIDTH_LAUNCH_ID"


class Sentinel:
    """The launcher's side: ``tag(env)`` marks a child's environment before it starts; ``close``
    at the end of the job (the sentinel then kills what carries the mark and exits)."""

    def __init__(self):
        self.token = secrets.token_hex(8)
        root = str(Path(__file__).resolve().parents[3])          # where bandwidth/ is
        path = os.environ.get("PYTHONPATH")
        env = dict(os.environ, PYTHONPATH=f"{root}{os.pathsep}{path}" if path else root)
        env[ID_VARIABLE] = self.token
        try:
            self.proc = subprocess.Popen([sys.executable, "-m",
                                          "bandwidth.launch.supervision.sentinel"],
                                         env=env, stdin=subprocess.PIPE,
                                         stdout=subprocess.DEVNULL, start_new_session=True)
        except OSError:
            self.proc = None              # no sentinel: the children still die with the launcher

    def tag(self, env: dict) -> None:
        env[ID_VARIABLE] = self.token

    def close(self, wait_s: float = 5.0) -> None:
        if self.proc is None:
            return
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(wait_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _marked(entry: bytes) -> list[int]:
    """The processes whose environment holds ``entry`` (``NAME=value``), this one excepted."""
    me, found = os.getpid(), []
    for pid in proc_table():
        try:
            with open(f"/proc/{pid}/environ", "rb") as environ:
                if pid != me and entry in environ.read().split(b"\0"):
                    found.append(pid)
        except OSError:
            continue
    return found


def main() -> int:
    token = os.environ.get(ID_VARIABLE, "")
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_IGN)     # the pipe's end decides, nothing else
    while os.read(0, 4096):
        pass
    if not token:
        return 0
    entry = f"{ID_VARIABLE}={token}".encode()
    return 0 if kill_until_none(lambda: _marked(entry), 3.0) else 1


if __name__ == "__main__":
    sys.exit(main())
