"""Run one command in its own process group; stop the whole group when stdin closes.

Usage (the ssh launcher sends this file's source and runs it on every remote host as
``python3 -c SOURCE``; it needs only the standard library)::

    python3 -m bandwidth.launch.guard [--grace SECONDS] [--env-stdin] -- command [args...]

With ``--env-stdin`` the first line of stdin is a JSON object of environment variables added to
the command's (the ssh launcher sends them this way, never on a command line).

Why: without a terminal, sshd does not signal a remote command when the connection goes away, so
a remote program outlives a launcher that crashed or an ssh client that was killed. The launcher
keeps the ssh client's stdin open and never writes to it. When the launcher stops this process,
dies (even by SIGKILL), or the connection drops, this side's stdin reads end-of-file and the
guard sends SIGTERM to the command's process group, then SIGKILL after the grace period.
SIGTERM, SIGHUP and SIGINT to the guard do the same. Whatever ends the command, members of its
process group that are still running afterwards are killed too, so nothing is left behind.

Protocol lines on stderr, read by the launcher and not shown to the user:
``bandwidth-guard: started PID`` once the command runs, ``bandwidth-guard: stopped PID`` when a
process of its group is stopped by a signal (SIGSTOP) and ``bandwidth-guard: running`` when it
runs again, ``bandwidth-guard: alive`` every second meanwhile (the host runs and the link
carries: a silent heartbeat is then no frozen host or cut link), and last
``bandwidth-guard: exit N`` or ``bandwidth-guard: signal NAME``. The guard exits with the
command's status (128+N for signal N).
"""

import json
import os
import select
import signal
import subprocess
import sys
import time

PREFIX = "bandwidth-guard:"


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


def _stopped(pgid):
    """The pid of a process of group ``pgid`` stopped by a signal (SIGSTOP), or 0."""
    try:
        entries = os.listdir("/proc")
    except OSError:
        return 0
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rpartition(")")[2].split()
        except OSError:
            continue
        if len(fields) > 2 and fields[2] == str(pgid) and fields[0] in ("T", "t"):
            return int(entry)
    return 0


def main(argv=None):
    args = list(sys.argv[1:] if argv is None else argv)
    grace_s = 5.0
    if args[:1] == ["--grace"]:
        grace_s, args = float(args[1]), args[2:]
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
        sys.stderr.write("usage: python3 -m bandwidth.launch.guard [--grace S] -- command...\n")
        return 2
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
    stdin_open = True
    was_stopped, polls = 0, 0
    while not stop_signals and not _exited(proc.pid):
        # Poll both the command and stdin every 0.2 s; a read of b"" is end-of-file.
        ready = select.select([0] if stdin_open else [], [], [], 0.2)[0]
        if ready and not os.read(0, 4096):
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
    proc.wait()
    code = proc.returncode
    if code < 0:
        _say(f"signal {signal.Signals(-code).name}")
        return 128 - code
    _say(f"exit {code}")
    return code


if __name__ == "__main__":
    sys.exit(main())
