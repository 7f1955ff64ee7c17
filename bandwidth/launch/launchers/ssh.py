"""The ssh launcher: one ssh client per process, and rsync for ``--sync-dst-dir``.

Each process is started as (every word of the remote command passed through ``shlex.quote``)::

    ssh [-F CONFIG] -T -o BatchMode=yes -o ConnectTimeout=T -o ServerAliveInterval=ceil(T/4)
        -o ServerAliveCountMax=3 [-p PORT] [-o OPTION]... -- HOST \\
        "cd DIR && exec python3 -c <guard source> --grace G --env-stdin -- command..."

* ``BatchMode=yes``: never prompt (a prompt would hang the launch); keys or an agent only.
  Host keys are checked as ssh always does: add hosts to ``known_hosts`` first, or point
  ``--ssh-option UserKnownHostsFile=...`` / ``--ssh-config`` at your own file.
* ``ConnectTimeout=T`` (``--timeout``) covers the TCP connect and the banner exchange, so an
  unreachable host fails with ``FAIL: host: connection timed out after T s``; the launcher
  also fails a process whose remote side has not started within T s (+5 s for the login).
* ``ServerAliveInterval``/``CountMax``: a host that goes silent mid-run (its link down, the
  machine gone) ends its ssh client after about 3/4 of T, and the launcher reports that process
  as having lost its ssh connection, before the other ranks' own timeouts name a symptom.
* The remote command runs under ``bandwidth.launch.supervision.guard``, which stops its process
  group when the ssh connection closes: stopping a process is closing its ssh client's stdin, and a
  killed launcher or ssh client leaves nothing running remotely.
* The remote login shell must be POSIX (sh, bash, dash, zsh) to read the quoting.
* The environment travels on the ssh client's stdin (one JSON line the guard reads before it
  starts the command), never on a command line, where every user of either machine could read
  it (``ps``); only the forwarded variables (``bandwidth.launch.contract.forwarding``), ``--env``'s
  and the contract's are sent, never the launcher's whole environment. The remote program otherwise
  has its login's environment (``HOME``, ``USER``...). The local ssh client itself runs with the
  launcher's environment, so that ``SSH_AUTH_SOCK`` reaches the agent.
* The launcher's ``-o`` options come first, and ssh keeps the first value it sees: ``--ssh-option``
  cannot turn ``BatchMode`` off or change ``ConnectTimeout`` (use ``--timeout``).
* At most 8 connections are being set up at once (sshd's ``MaxStartups`` starts dropping
  unauthenticated connections at 10); the next one starts when a remote program is running.
"""

from __future__ import annotations

import ipaddress
import json
import math
import os
import shlex
import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from bandwidth.launch.supervision import guard
from bandwidth.launch.contract.forwarding import child_environ
from bandwidth.launch.planning.hostfile import Host
from bandwidth.launch.launchers.local import local_child
from bandwidth.launch.planning.plan import Plan
from bandwidth.launch.supervision.supervisor import Child, Failure, status_failure

GUARD_SOURCE = Path(guard.__file__).read_text()
GUARD_GRACE_S = 5.0
# The launcher writes a byte on each guard's stdin every BEAT_S; a guard that reads none for
# GUARD_QUIET_S takes the launcher for gone (a cut link gives no end-of-file) and stops its
# command: well above a loop that the launcher's host is slow to schedule, within the time the
# launcher itself names a cut-off host (the heartbeat's threshold and the start's slack).
BEAT_S = 1.0
GUARD_QUIET_S = 10.0
LOGIN_SLACK_S = 5.0   # authentication and the remote shell, on top of the connect timeout

# (what ssh says, what the report says) for ssh's own errors (exit status 255).
_SSH_ERRORS = (
    ("timed out", "connection timed out after {timeout} s"),
    ("Connection refused", "connection refused (is sshd listening on port {port}?)"),
    ("No route to host", "no route to host"),
    ("Could not resolve hostname", "cannot resolve the host name"),
    ("Host key verification failed", "host key verification failed: add the host's key to "
     "known_hosts (ssh-keyscan -p {port} {host}); the launcher never disables the check"),
    ("Permission denied", "ssh authentication failed (BatchMode: set up a key or an agent)"),
)


@dataclass(frozen=True)
class SshOptions:
    """How to reach the hosts: ``-F config_file`` and ``-o`` options, the connect timeout."""

    connect_timeout_s: int
    config_file: str | None = None
    options: tuple[str, ...] = ()

    def argv(self, host: Host) -> list[str]:
        """The ssh command up to and excluding the host."""
        argv = ["ssh"] + (["-F", self.config_file] if self.config_file else [])
        argv += ["-T", "-o", "BatchMode=yes", "-o", f"ConnectTimeout={self.connect_timeout_s}",
                 "-o", f"ServerAliveInterval={max(1, math.ceil(self.connect_timeout_s / 4))}",
                 "-o", "ServerAliveCountMax=3"]
        argv += ["-p", str(host.port)] if host.port else []
        for option in self.options:
            argv += ["-o", option]
        return argv


def remote_command(workdir: str, command: Sequence[str], python: str = "python3") -> str:
    """The one string ssh hands to the remote login shell (the environment follows on stdin:
    ``env_line``)."""
    words = ["exec", python, "-c", GUARD_SOURCE, "--grace", f"{GUARD_GRACE_S:g}", "--quiet",
             f"{GUARD_QUIET_S:g}", "--env-stdin", "--", *command]
    return f"cd {shlex.quote(workdir)} && {shlex.join(words)}"


def env_line(env: Mapping[str, str]) -> bytes:
    """What the launcher writes first on the ssh client's stdin: the remote environment."""
    return json.dumps(dict(env)).encode() + b"\n"


def ssh_error_lines(lines: Sequence[str]) -> list[str]:
    """The lines of ``lines`` (another program's output: mpirun's) that are ssh's own errors."""
    return [line for line in lines
            if line.startswith("ssh:") or any(needle in line for needle, _ in _SSH_ERRORS)]


def explain_ssh_error(lines: Sequence[str], host: Host, timeout_s: int) -> str:
    """Turn ssh's stderr into the report's wording."""
    for needle, wording in _SSH_ERRORS:
        if any(needle in line for line in lines):
            return wording.format(timeout=timeout_s, port=host.port or 22, host=host.name)
    last = next((line for line in reversed(lines) if line.strip()), "no message")
    return f"ssh failed: {last.strip()}"


class SshChild(Child):
    """One process on a remote host, run through ssh and the guard."""

    grace_s = GUARD_GRACE_S + 3.0

    def __init__(self, label: str, subject: str, host: Host, ssh: SshOptions, remote: str,
                 ssh_env: dict[str, str], remote_env: Mapping[str, str]):
        # ssh takes an IPv6 address bare (the hosts file's brackets are for the port's sake)
        super().__init__(label, subject, ssh.argv(host) + ["--", host.name, remote], ssh_env,
                         stdin_pipe=True)
        self.host, self.ssh = host, ssh
        self.remote_env = env_line(remote_env)
        self.remote_pid: int | None = None
        self.remote_end: tuple[str, str] | None = None   # ("exit", "3") or ("signal", "SIGKILL")
        self.remote_stopped = ""        # the pid the guard found stopped by a signal, or ""
        self.guard_word_s: float | None = None     # the guard's last word, launcher's clock
        self.beat_s = 0.0               # when the launcher last wrote its byte to the guard

    @property
    def running(self) -> bool:
        return self.remote_pid is not None

    def start(self) -> None:
        super().start()
        try:       # a pipe holds 64 KiB; the guard reads this line before anything else
            self.proc.stdin.write(self.remote_env)
            self.proc.stdin.flush()
            os.set_blocking(self.proc.stdin.fileno(), False)     # tick never waits on ssh
        except BrokenPipeError:
            pass   # ssh already exited; its status and stderr say why

    def tick(self, now: float) -> None:
        """A byte to the guard every BEAT_S: the launcher is there (see GUARD_QUIET_S)."""
        if now - self.beat_s < BEAT_S or self.proc.stdin is None or self.proc.stdin.closed:
            return
        self.beat_s = now
        try:
            os.write(self.proc.stdin.fileno(), b"\n")
        except (BlockingIOError, BrokenPipeError, ValueError, OSError):
            pass   # ssh is not reading (a full pipe) or has gone: its own ending says why

    def on_line(self, stream: str, line: str) -> None:
        if stream == "stderr" and line.startswith(guard.PREFIX):
            kind, _, value = line[len(guard.PREFIX):].strip().partition(" ")
            self.guard_word_s = self.clock()
            if kind == "started":
                self.remote_pid = int(value)
            elif kind in ("stopped", "running"):
                self.remote_stopped = value if kind == "stopped" else ""
            elif kind in ("exit", "signal"):
                self.remote_end = (kind, value)
                self._remote_ended(kind, value)
            return
        super().on_line(stream, line)

    def reachable(self, now: float, within_s: float) -> bool:
        """The guard spoke within ``within_s``: the host runs and the link carries, so a silent
        heartbeat there is a starved beating thread, unless the guard says it is stopped."""
        return self.guard_word_s is not None and now - self.guard_word_s <= within_s

    @property
    def pid(self) -> int | None:
        return self.remote_pid

    def stopped(self) -> str:
        """What the remote guard said: a process of the command's group is stopped."""
        if not self.remote_stopped:
            return ""
        which = "" if self.remote_stopped == str(self.remote_pid) else \
            f" (its process {self.remote_stopped})"
        return f"stopped by a signal (SIGSTOP or SIGTSTP){which}"

    def _remote_ended(self, kind: str, value: str) -> None:
        """The guard's word that the command ended: the ending's time and status."""
        ending = self.ending
        if ending.failed:
            return
        ending.at_s = self.clock()
        if kind == "signal":
            ending.signal = value
        elif value.lstrip("-").isdigit():
            ending.status = int(value)

    def failure(self) -> Failure | None:
        if self.remote_end is not None and self.remote_pid is None:
            # the guard ran but could not start the command (no such program on the remote
            # PATH, which the forwarded environment sets)
            last = next((line for line in reversed(self.tail) if line.strip()), "")
            code = int(self.remote_end[1]) if self.remote_end[0] == "exit" else 1
            return Failure(self.subject, f"did not start: {last.strip() or 'no message'}",
                           code, self.label, tuple(self.tail))
        if self.remote_end is not None:
            kind, value = self.remote_end
            if kind == "signal":
                return status_failure(self.subject, -_signal_number(value), self.label, self.tail)
            code = int(value)
            return None if code == 0 else status_failure(self.subject, code, self.label, self.tail)
        code = self.proc.returncode
        if self.remote_pid is None and code == 255:   # ssh's own failure: no connection
            what = explain_ssh_error(self.tail, self.host, self.ssh.connect_timeout_s)
            return Failure(str(self.host), what, 255, f"ssh to {self.host}", tuple(self.tail),
                           context=f"while starting {self.label}")
        if self.remote_pid is None:   # the remote shell failed: no such directory or python3
            return Failure(self.subject, f"did not start: the remote shell exited with status "
                           f"{code}", code if code > 0 else 128 - code, self.label,
                           tuple(self.tail))
        return Failure(self.subject, f"lost its ssh connection (ssh exited with status {code})",
                       255, self.label, tuple(self.tail))

    def start_timeout(self, timeout_s: float) -> Failure:
        return Failure(str(self.host), f"connection timed out after {self.ssh.connect_timeout_s}"
                       " s", 255, f"ssh to {self.host}", tuple(self.tail),
                       context=f"while starting {self.label}")

    def terminate(self) -> None:
        # End-of-file on the guard's stdin: it stops the remote group (TERM, then KILL).
        try:
            self.proc.stdin.close()
        except BrokenPipeError:
            pass


def _signal_number(name: str) -> int:
    return int(getattr(signal.Signals, name, signal.SIGKILL))


def rsync_child(host: Host, ssh: SshOptions, source_dir: str, dst_dir: str,
                env: dict[str, str]) -> Child:
    """Copy ``source_dir``'s contents to ``dst_dir`` on ``host`` (created if its parent exists)."""
    rsh = shlex.join(ssh.argv(host))
    target = f"{host}:{dst_dir.rstrip('/')}/"
    argv = ["rsync", "-a", "--protect-args", "-e", rsh, f"{source_dir.rstrip('/')}/", target]
    return _RsyncChild(f"rsync {host}", f"{host}", argv, env, host, ssh)


class _RsyncChild(Child):
    def __init__(self, label, subject, argv, env, host: Host, ssh: SshOptions):
        super().__init__(label, subject, argv, env)
        self.host, self.ssh = host, ssh

    def failure(self) -> Failure | None:
        code = self.proc.returncode
        if code == 0:
            return None
        what = explain_ssh_error(self.tail, self.host, self.ssh.connect_timeout_s)
        if what.startswith("ssh failed"):
            what = f"rsync --sync-dst-dir failed with status {code}"
        return Failure(self.subject, what, code if code > 0 else 128 - code, self.label,
                       tuple(self.tail))


def start_timeout_s(connect_timeout_s: int) -> float:
    """How long an ssh child may take to report that its remote program started."""
    return math.ceil(connect_timeout_s) + LOGIN_SLACK_S


def is_loopback(name: str) -> bool:
    """``localhost``, an address of 127.0.0.0/8, or ``::1``: this machine, whatever it runs."""
    if name.lower() in ("localhost", "localhost.localdomain"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def runs_locally(host: Host, config) -> bool:
    """A hosts file's loopback host is this machine: its processes start here directly, as the
    local launcher starts them, without ssh (no sshd needed). A port, an ssh setting
    (``--ssh-config``, ``--ssh-option``) or ``--sync-dst-dir`` asks for ssh itself (an sshd of a
    lab or a container behind a forwarded port), which is then used."""
    return (host.port is None and not config.ssh_config and not config.ssh_options
            and config.sync_dst_dir is None and is_loopback(host.name))


def needs_ssh(config) -> bool:
    """Whether the ssh client is needed: some host of -H is not run locally."""
    return not all(runs_locally(host, config) for host in config.hosts)


def build(plan: Plan) -> list[Child]:
    """An ssh child per world rank (a local process for a loopback host: ``runs_locally``), and
    the scheduler (if any) as a local process."""
    config = plan.config
    ssh = SshOptions(config.timeout_s, config.ssh_config, config.ssh_options)
    workdir = config.sync_dst_dir or config.workdir
    children: list[Child] = []
    for role, host in plan.world:
        if runs_locally(host, config):
            children.append(local_child(plan, role))
            continue
        env = child_environ(plan.environ, config.env, same_host=False)
        env.update(role.to_environ())
        remote = remote_command(workdir, config.command)
        child = SshChild(role.label, role.title, host, ssh, remote, dict(plan.environ), env)
        child.role = role
        children.append(child)
    if plan.scheduler is not None:
        children.append(local_child(plan, plan.scheduler))
    return children


def sync_children(plan: Plan) -> list[Child]:
    """One rsync per distinct host that runs a process (``--sync-dst-dir``)."""
    config = plan.config
    ssh = SshOptions(config.timeout_s, config.ssh_config, config.ssh_options)
    hosts = dict.fromkeys(host for _, host in plan.world)
    return [rsync_child(host, ssh, config.workdir, config.sync_dst_dir, dict(plan.environ))
            for host in hosts]
