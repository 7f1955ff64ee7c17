"""Ends what a launch started on this host once the launcher is gone, even by SIGKILL.

    python3 -c SOURCE LAUNCHER_PID        (started by bandwidth.launch.driver; standard library)

A local child dies with the launcher (``PR_SET_PDEATHSIG``), but what the child started does not:
a SIGKILLed launcher left ``sh -c 'sleep 300 & setsid sleep 300'``'s sleeps running under PID 1.
This process, in a session of its own, watches the launcher through a pipe: the launcher writes
the pid of each child it starts on it (one line each); when the launcher ends, however it ends,
the pipe reads end-of-file. Meanwhile it notes, twice a second, those children and every process
below them (pid and start time) and the sessions they belong to: each local child runs in a
session of its own, so a process of one of those sessions is the job's. At end-of-file it kills every process of those
sessions and every noted process that still runs with the same start time (one that left its
session with ``setsid`` is known from a note; one started within the last half second of the
launcher's life may be missed). The launcher closes the pipe itself when the job is over, so what
a process left running after a normal end goes too, as the remote guard does.

Linux only (/proc); elsewhere it waits for end-of-file and does nothing.
"""

import os
import select
import signal
import subprocess
import sys
import time

NOTE_S = 0.5


class Sentinel:
    """The launcher's side: starts the sentinel, tells it each child (``follow``), and ``close``
    at the end of the job (it then kills what the children left and exits)."""

    def __init__(self):
        with open(__file__) as source:
            code = source.read()
        try:
            self.proc = subprocess.Popen([sys.executable, "-c", code, str(os.getpid())],
                                         stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                         start_new_session=True)
        except OSError:
            self.proc = None              # no sentinel: the children still die with the launcher

    def follow(self, pid: int) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                self.proc.stdin.write(f"{pid}\n".encode())
                self.proc.stdin.flush()
            except OSError:
                pass

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


def _table():
    """{pid: (ppid, session, start time)} of every process (Linux /proc)."""
    table = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return table
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rpartition(")")[2].split()
        except OSError:
            continue
        if len(fields) > 19 and fields[0] != "Z":
            table[int(entry)] = (int(fields[1]), int(fields[3]), fields[19])
    return table


def _below(table, roots):
    """``roots`` (those still running) and every process below them."""
    children = {}
    for pid, (ppid, _, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    found = [pid for pid in roots if pid in table]
    todo = list(found)
    while todo:
        for pid in children.get(todo.pop(), []):
            found.append(pid)
            todo.append(pid)
    return found


def main(argv=None):
    args = sys.argv[1:] if argv is None else argv
    launcher = int(args[0])
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_IGN)     # the pipe's end decides, nothing else
    table = _table()
    spared = {os.getsid(0)} | ({table[launcher][1]} if launcher in table else set())
    noted, sessions, roots, partial = {}, set(), {}, b""
    while True:
        new = []
        if select.select([0], [], [], NOTE_S)[0]:
            data = os.read(0, 4096)
            if not data:
                break
            *lines, partial = (partial + data).split(b"\n")
            new = [int(line) for line in lines if line.strip().isdigit()]
        table = _table()
        roots.update((pid, table[pid][2]) for pid in new if pid in table)
        # a root that ended (its pid free for another program) is no longer followed
        roots = {pid: start for pid, start in roots.items()
                 if pid in table and table[pid][2] == start}
        for pid in _below(table, roots):
            noted[pid] = table[pid][2]
        noted = {pid: start for pid, start in noted.items()
                 if pid in table and table[pid][2] == start}
        # the sessions that still hold a noted process (a session id is a pid, free again
        # once the session has no member left)
        sessions = {table[pid][1] for pid in noted}
    sessions -= spared
    me = os.getpid()
    deadline = time.monotonic() + 3.0
    while time.monotonic() < deadline:
        table = _table()
        left = [pid for pid, (_, session, start) in table.items() if pid != me and
                (session in sessions or noted.get(pid) == start)]
        if not left:
            return 0
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.05)
    return 1


if __name__ == "__main__":
    sys.exit(main())
