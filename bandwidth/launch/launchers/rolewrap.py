"""What ``mpirole`` and ``slurmrole`` share: a process that another program started (mpirun, srun)
finds its place in the job the launcher planned, takes the contract's environment for it, and
runs the command with it, so that the command sees what launch.py's own children see.

The command runs as this wrapper's child, in the wrapper's process group (the one mpirun's
daemon or slurmstepd signals), with the wrapper's stdin, stdout and stderr, so that mpirun and
srun see its output and its signals as before. The wrapper says on stderr when the command
started and how it ended (``bandwidth.launch.supervision.rankends``: the runner carries the line to
the launcher with the rank's tag); when the command ends, whatever it left running is killed first
(helpers it started, as the local launcher does; the wrapper is their child subreaper, so they are
found whatever their process group), and the wrapper ends as the command did: its exit status, or
the same signal, so mpirun and srun report the same failure.

The launcher gone (killed, or this host cut off from it: ``launcherwatch``): the wrapper stops the
command (SIGTERM, SIGKILL after ``GONE_GRACE_S``) and whatever it left, and under mpirun ends the
MPI daemon above it too, which would wait for an mpirun it can no longer reach.

Signals: SIGTERM, SIGINT and SIGHUP from the runner (the wrapper's parent: mpirun's daemon,
slurmstepd) reach the command directly, since the runner signals the whole group or step; the
wrapper only notes that the job's runner stopped it. The same signals from anyone else are
passed on to the command.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import resource
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence

from bandwidth.launch.contract.environment import ContractError, Job
from bandwidth.launch.contract.heartbeat import LAUNCHER_GONE_BEATS
from bandwidth.launch.planning.hostfile import Host
from bandwidth.launch.planning.plan import local_ranks
from bandwidth.launch.supervision.rankends import ALIVE_LINE, ALIVE_S, end_line, start_line
from bandwidth.launch.supervision.launcherwatch import watch_launcher
from bandwidth.launch.supervision.lifeline import die_with_parent

_WAITED = {signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGCHLD}
PR_SET_CHILD_SUBREAPER = 36
GONE_GRACE_S = 5.0                   # the launcher gone: SIGTERM, then SIGKILL after this
MPI_DAEMONS = ("orted", "prted")     # what starts a wrapper under mpirun (Open MPI 4, 5)


def role_environ(job: Job, placed: Sequence[Host], index: int,
                 environ: dict[str, str]) -> dict[str, str]:
    """``environ`` with the contract of process ``index`` of ``job`` placed on ``placed``: the
    workers and servers first (their local ranks among themselves), then the scheduler."""
    world_local = local_ranks(list(placed[:job.world_size]))
    local = world_local[index] if index < job.world_size else None
    env = dict(environ)
    env.update(job.role(index, placed[index].name, local).to_environ())
    return env


def become(name: str, runner: str, hosts_help: str, argv: list[str] | None,
           environ_of: Callable[[list[str]], dict[str, str]]) -> int:
    """Parse ``--hosts H1,H2,... -- command...``, take ``environ_of(hosts)`` and run the command
    with it (see the module docstring). Returns the command's status; 2 (not under
    ``runner``, or a placement that does not match the plan), 127 (the command cannot run)."""
    parser = argparse.ArgumentParser(prog=f"python3 -m bandwidth.launch.launchers.{name}")
    parser.add_argument("--hosts", required=True, help=hosts_help)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command after --")
    try:
        env = environ_of(args.hosts.split(","))
    except KeyError as err:
        print(f"{name}: {err.args[0]} is not set: run under {runner}", file=sys.stderr)
        return 2
    except ContractError as err:
        print(f"{name}: {err}", file=sys.stderr)
        return 2
    return run_command(name, command, env)


def run_command(name: str, command: Sequence[str], env: dict[str, str]) -> int:
    """Run ``command`` with ``env`` and end as it ended (never returns once it started; 127 if
    it cannot start)."""
    _adopt_orphans()
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, _WAITED)     # taken with sigtimedwait
    wrapper = os.getpid()

    def in_child() -> None:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        die_with_parent(wrapper)

    try:
        child = subprocess.Popen(list(command), env=env, preexec_fn=in_child)
    except OSError as err:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        print(f"{name}: cannot run {command[0]!r}: {err.strerror}", file=sys.stderr)
        return 127
    _say(start_line(child.pid))
    gone = _watch(name, env, child)
    stopped = _wait(child)
    _kill_leftovers()
    _say(end_line(child.pid, child.returncode, stopped))
    if gone.is_set():
        _end_mpi_daemon()
    _end_as(child.returncode)


def _watch(name: str, env: dict[str, str], child: subprocess.Popen) -> threading.Event:
    """Stop ``child`` when the launcher is gone (``launcherwatch``): SIGTERM, then SIGKILL after
    ``GONE_GRACE_S``. Only with a heartbeat (``--heartbeat-interval 0`` turns both off); the line
    is lost after as many intervals as a process's own heartbeat allows
    (``heartbeat.LAUNCHER_GONE_BEATS``). Returns the event set once the launcher is gone."""
    gone = threading.Event()
    try:
        job = Job.from_environ(env)
    except ContractError:                  # no contract to find the launcher by
        return gone
    if job.heartbeat_s <= 0:
        return gone

    def on_gone(why: str) -> None:
        gone.set()
        _say(f"{name}: error: the launcher is gone ({why}): stopping the command\n")
        with contextlib.suppress(OSError):
            os.kill(child.pid, signal.SIGTERM)
        if not _ended(child, GONE_GRACE_S):
            with contextlib.suppress(OSError):
                os.kill(child.pid, signal.SIGKILL)

    watch_launcher(job, LAUNCHER_GONE_BEATS * job.heartbeat_s, on_gone)
    return gone


def _ended(child: subprocess.Popen, within_s: float) -> bool:
    """Whether ``child`` exits within ``within_s`` (read without reaping: the main thread
    waits for it)."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        with contextlib.suppress(ChildProcessError):
            if os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
                return True
        if child.returncode is not None:
            return True
        time.sleep(0.1)
    return False


def _end_mpi_daemon() -> None:
    """The launcher is gone and the command has ended: end the MPI daemon that started this
    wrapper (Open MPI's ``orted``, PRRTE's ``prted``), which would otherwise wait for an mpirun
    it cannot reach. slurmstepd, a Slurm task's parent, is the site's daemon and is left to it."""
    parent = os.getppid()
    with contextlib.suppress(OSError):
        with open(f"/proc/{parent}/comm") as comm:
            if comm.read().strip() in MPI_DAEMONS:
                os.kill(parent, signal.SIGTERM)


def _say(line: str) -> None:
    """One protocol line on stderr, in one write (the command's output shares the pipe)."""
    with contextlib.suppress(OSError):
        sys.stderr.flush()
        os.write(2, line.encode())


def _wait(child: subprocess.Popen) -> str | None:
    """Wait for ``child``, passing signals on; returns the signal the runner stopped it with."""
    stopped, said_alive = None, 0.0
    while child.poll() is None:
        if time.monotonic() - said_alive >= ALIVE_S:
            said_alive = time.monotonic()
            _say(ALIVE_LINE)
        info = signal.sigtimedwait(_WAITED, ALIVE_S)
        if info is None or info.si_signo == signal.SIGCHLD:
            _reap_orphans(child.pid)
            continue
        if info.si_pid == os.getppid():   # the runner: it signalled the command too
            stopped = stopped or signal.Signals(info.si_signo).name
        else:
            with contextlib.suppress(OSError):
                os.kill(child.pid, info.si_signo)
    return stopped


def _reap_orphans(keep: int) -> None:
    """Reap the adopted helpers that ended (not ``keep``, the command: Popen reaps it)."""
    with contextlib.suppress(ChildProcessError, OSError):
        while (info := os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)) is not None \
                and info.si_pid != keep:
            os.waitpid(info.si_pid, 0)


def _adopt_orphans() -> None:
    """Become the reaper of what the command leaves behind (Linux's child subreaper): its
    helpers become this wrapper's children when it ends, whatever their process group."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def _kill_leftovers() -> None:
    """Kill what the command left running (this wrapper's children now, and theirs in turn),
    as the local launcher kills what is left of a process's group. Not by process group: under
    Slurm every task of a node shares one."""
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline:
        left = _children(os.getpid())
        if not left:
            return
        for pid in left:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.02)
        with contextlib.suppress(ChildProcessError):
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass


def _children(parent: int) -> list[int]:
    """The processes whose parent is ``parent`` (Linux /proc; [] elsewhere)."""
    found = []
    with contextlib.suppress(OSError):
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                with contextlib.suppress(OSError, IndexError):
                    with open(f"/proc/{entry}/stat") as stat:
                        fields = stat.read().rpartition(")")[2].split()
                    if fields[1] == str(parent) and fields[0] != "Z":
                        found.append(int(entry))
    return found


def _end_as(returncode: int):
    """Exit as the command did: its status, or killed by the same signal (no core dump)."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    if returncode >= 0:
        os._exit(returncode)
    signum = -returncode
    with contextlib.suppress(OSError, ValueError):
        resource.setrlimit(resource.RLIMIT_CORE, (0, resource.getrlimit(resource.RLIMIT_CORE)[1]))
    with contextlib.suppress(OSError, ValueError):
        signal.signal(signum, signal.SIG_DFL)
    with contextlib.suppress(OSError, ValueError):
        os.kill(os.getpid(), signum)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signum})
        time.sleep(1.0)
    os._exit(128 + signum)
