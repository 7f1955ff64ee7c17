"""Run one command in its own process group; stop the whole group when stdin closes.

Usage (the ssh launcher sends this file's source and runs it on every remote host as
``python3 -c SOURCE``; it needs only the standard library)::

    python3 -m bandwidth.launch.supervision.guard [--grace SECONDS] [--quiet SECONDS] [--env-stdin]
                                      -- command [args...]

With ``--env-stdin`` the first line of stdin is a JSON object of environment variables added to
the command's (the ssh launcher sends them this way, never on a command line).

Why: without a terminal, sshd does not signal a remote command when the connection goes away, so
a remote program outlives a launcher that crashed or an ssh client that was killed. The launcher
keeps the ssh client's stdin open and never writes to it. When the launcher stops this process,
dies (even by SIGKILL), or the connection drops, this side's stdin reads end-of-file and the
guard sends SIGTERM to the command's process group, then SIGKILL after the grace period.
SIGTERM, SIGHUP and SIGINT to the guard do the same. A host cut off from the launcher reads no
end-of-file (nothing tells sshd that the far side is gone), so the launcher also writes a byte on
that stdin every second: with ``--quiet S``, S seconds without one are the launcher gone, and the
guard stops the command as above. Whatever ends the command, what it started is killed too:
members of its process group, and every process below the guard, ``setsid`` ones included (the
guard is their child subreaper, so they stay below it when their parents end).

Protocol lines on stderr, read by the launcher and not shown to the user:
``bandwidth-guard: started PID`` once the command runs, ``bandwidth-guard: stopped PID`` when a
process of its group is stopped by a signal (SIGSTOP) and ``bandwidth-guard: running`` when it
runs again, ``bandwidth-guard: alive`` every second meanwhile (the host runs and the link
carries: a silent heartbeat is then no frozen host or cut link), and last
``bandwidth-guard: exit N`` or ``bandwidth-guard: signal NAME``. The guard exits with the
command's status (128+N for signal N).
"""

import ctypes
import json
import os
import select
import signal
import subprocess
import sys
import time

PREFIX = "bandwidth-guard:"
PR_SET_CHILD_SUBREAPER = 36


def _say(message):
    sys.stderr.write(f"{PREFIX} {message}\n")
    sys.stderr.flush()


def _kill_group(pgid, sig):
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _exited(pid):
    """True once ``pid`` has exited; it stays a zombie (WNOWAIT), so its process-group id
    cannot be reused before the group is killed."""
    return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None


def proc_table():
    """{pid: the fields of /proc/PID/stat after the command's name} of every process but the
    zombies: [0] state, [1] parent, [2] process group, [3] session, [19] start time ({} where
    there is no /proc). bandwidth.launch.supervision.sentinel reads it too."""
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
            table[int(entry)] = fields
    return table


def _descendants(root):
    """Every process below ``root`` (Linux /proc), children before their own."""
    parents = {}
    for pid, fields in proc_table().items():
        parents.setdefault(int(fields[1]), []).append(pid)
    found, todo = [], [root]
    while todo:
        for pid in parents.get(todo.pop(), []):
            found.append(pid)
            todo.append(pid)
    return found


def _kill_below(keep):
    """SIGKILL every process below the guard but ``keep`` (the command, reaped by Popen), until
    none is left: those that left the command's group (setsid) included."""
    def reap():
        try:
            while True:
                info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
                if info is None or info.si_pid == keep:
                    break
                os.waitpid(info.si_pid, 0)
        except (ChildProcessError, OSError):
            pass

    kill_until_none(lambda: [pid for pid in _descendants(os.getpid()) if pid != keep], 2.0, reap)


def kill_until_none(find, within_s, after=lambda: None):
    """SIGKILL what ``find()`` lists, again and again (a process may fork meanwhile), until it
    lists none or ``within_s`` has passed; ``after()`` after each round. True if none is left.
    bandwidth.launch.supervision.sentinel uses it too."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        left = find()
        if not left:
            return True
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.02)
        after()
    return not find()


def _stopped(pgid):
    """The pid of a process of group ``pgid`` stopped by a signal (SIGSTOP), or 0."""
    for pid, fields in proc_table().items():
        if fields[2] == str(pgid) and fields[0] in ("T", "t"):
            return pid
    return 0


def main(argv=None):
    args = list(sys.argv[1:] if argv is None else argv)
    grace_s, quiet_s = 5.0, None
    if args[:1] == ["--grace"]:
        grace_s, args = float(args[1]), args[2:]
    if args[:1] == ["--quiet"]:
        quiet_s, args = float(args[1]), args[2:]
    env = None
    if args[:1] == ["--env-stdin"]:
        args = args[1:]
        line = b""
        while not line.endswith(b"\n"):
            byte = os.read(0, 1)
            if not byte:
                _say("exit 1")
                return 1                     # the launcher went away before sending it
            line += byte
        env = dict(os.environ)
        env.update(json.loads(line))
    if args[:1] == ["--"]:
        args = args[1:]
    if not args:
        sys.stderr.write("usage: python3 -m bandwidth.launch.supervision.guard [--grace S] -- "
                         "command...\n")
        return 2
    try:            # what the command leaves behind stays below the guard (Linux)
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass
    try:
        proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, start_new_session=True, env=env)
    except OSError as err:
        sys.stderr.write(f"cannot run {args[0]!r}: {err.strerror}\n")
        _say("exit 127")
        return 127
    _say(f"started {proc.pid}")
    stop_signals = []
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, lambda signum, frame: stop_signals.append(signum))
    was_stopped, polls = 0, 0
    heard = time.monotonic()
    while not stop_signals and not _exited(proc.pid):
        # Poll both the command and stdin every 0.2 s; a read of b"" is end-of-file.
        ready = select.select([0], [], [], 0.2)[0]
        if ready:
            if not os.read(0, 4096):
                break
            heard = time.monotonic()
        elif quiet_s is not None and time.monotonic() - heard > quiet_s:
            _say(f"launcher silent {quiet_s:g} s")
            break
        polls += 1
        stopped = _stopped(proc.pid) if polls % 3 == 0 else was_stopped     # every 0.6 s
        if stopped != was_stopped:      # the launcher names a stopped process as the cause
            _say(f"stopped {stopped}" if stopped else "running")
            was_stopped = stopped
        elif polls % 5 == 0:
            _say("alive")
    if not _exited(proc.pid):
        _kill_group(proc.pid, signal.SIGTERM)
        _kill_group(proc.pid, signal.SIGCONT)      # a stopped process handles it now
        deadline = time.monotonic() + grace_s
        while not _exited(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
    # The leader is still running or a zombie (not reaped), so the group id is still this
    # command's: SIGKILL reaches whatever is left of the group, stragglers included.
    _kill_group(proc.pid, signal.SIGKILL)
    _kill_below(proc.pid)
    proc.wait()
    code = proc.returncode
    if code < 0:
        _say(f"signal {signal.Signals(-code).name}")
        return 128 - code
    _say(f"exit {code}")
    return code


if __name__ == "__main__":
    sys.exit(main())
