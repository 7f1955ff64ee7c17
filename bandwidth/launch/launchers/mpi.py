"""The mpi launcher: every process from one Open MPI ``mpirun``.

The command (``NAME`` runs over the forwarded and job-wide variables; values stay in mpirun's
environment, off the command line)::

    mpirun --allow-run-as-root --tag-output -np N -H host1:c1,host2:c2 --map-by node \\
        [--mca orte_keep_fqdn_hostnames 1] \\
        [--mca plm_rsh_args "-o BatchMode=yes -o ConnectTimeout=T"] \\
        -x NAME... python3 -m bandwidth.launch.launchers.mpirole --hosts h0,h1,... -- command...

``c1, c2`` are the numbers of processes the placement rule (``bandwidth.launch.planning.plan``)
gives each host, so mpirun never oversubscribes and ``--map-by node`` deals ranks the same way; the
scheduler (``--scheduler``) is the last MPI process. ``mpirole`` derives each process's role from
``OMPI_COMM_WORLD_RANK``. ``--tag-output`` marks every output line with its MPI rank, which the
launcher strips again: stderr gets the usual ``[worker 0@host]`` prefix and a tail per rank for the
report. Each rank's wrapper tells the launcher in a line of its stderr when its command started and
how it ended (``bandwidth.launch.supervision.rankends``), so that the launcher reports every rank as
it reports the local launcher's processes (``bandwidth.launch.supervision.runner``); a rank that
left no record (its wrapper killed with SIGKILL) is named from mpirun's own message (which rank
failed, and how). When mpirun cannot start its daemon on a host, the launcher finds ssh's error
among mpirun's messages and reports it as the ssh launcher does (``FAIL: node3: cannot resolve the
host name``); ``orte_keep_fqdn_hostnames`` (Open MPI 4) keeps mpirun from shortening
``node3.example.com`` to ``node3`` there. Hosts-file ports are refused: mpirun has one ssh command
for all hosts (use ``~/.ssh/config``). mpirun runs on the launching host and passes remote processes
only the ``-x`` variables; processes on the launching host inherit mpirun's environment, which the
launcher filters the same way.
"""

from __future__ import annotations

import collections
import functools
import os
import re
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from bandwidth.errors import UnsupportedError
from bandwidth.launch.supervision.child import Child, Failure, emit, status_failure
from bandwidth.launch.contract.environment import Role
from bandwidth.launch.contract.forwarding import child_environ
from bandwidth.launch.planning.hostfile import Host
from bandwidth.launch.planning.plan import Plan, slot_counts
from bandwidth.launch.supervision.runner import RunnerChild
from bandwidth.launch.launchers.ssh import explain_ssh_error, ssh_error_lines

_TAG = re.compile(r"\[\d+,(\d+)\]<(stdout|stderr)>:")
_EXIT = re.compile(r"Process name: \[\[\d+,\d+\],(\d+)\]")
_EXIT_CODE = re.compile(r"Exit code:\s+(\d+)")
_SIGNAL = re.compile(r"process rank (\d+) with PID \d+ on node \S+ exited on signal (\d+)")
MPI_VARIABLE_PREFIXES = ("OMPI_", "OPAL_", "PMIX_", "ORTE_")  # mpirun's own configuration
_VERSION = re.compile(r"Open MPI\)?\s+(\d+)\.(\d+)")
PACKAGE_ROOT = str(Path(__file__).resolve().parents[3])


@functools.cache
def open_mpi_version() -> tuple[int, int]:
    """(major, minor) of the ``mpirun`` on PATH; UnsupportedError if it is not Open MPI's."""
    try:
        text = subprocess.run(["mpirun", "--version"], capture_output=True, text=True,
                              timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired) as err:
        raise UnsupportedError(f"--launcher mpi: cannot run 'mpirun --version': {err}") from None
    match = _VERSION.search(text)
    if "Open MPI" not in text or match is None:
        first = text.strip().splitlines()[0] if text.strip() else "no version output"
        raise UnsupportedError(f"--launcher mpi needs Open MPI's mpirun, found: {first}")
    return int(match[1]), int(match[2])


def keep_fqdn_args(version: tuple[int, int]) -> list[str]:
    """mpirun's option to keep host names whole in its messages: ORTE's
    ``orte_keep_fqdn_hostnames`` up to Open MPI 4; none for Open MPI 5, whose PRRTE has no
    ORTE options (and this launcher has not been tried with it)."""
    return ["--mca", "orte_keep_fqdn_hostnames", "1"] if version[0] < 5 else []


def mpirun_argv(placed: Sequence[Host], exported: Sequence[str], command: Sequence[str],
                rsh_args: str | None = None, python: str = "python3",
                options: Sequence[str] = ()) -> list[str]:
    """The mpirun command for processes on ``placed`` (one host per MPI rank); ``options``:
    more of mpirun's own (``--mca NAME VALUE``...)."""
    slots = ",".join(f"{host}:{count}" for host, count in slot_counts(placed))
    argv = ["mpirun", "--allow-run-as-root", "--tag-output", "-np", str(len(placed)),
            "-H", slots, "--map-by", "node", *options]
    if rsh_args is not None:
        argv += ["--mca", "plm_rsh_args", rsh_args]
    for name in exported:
        argv += ["-x", name]
    return argv + [python, "-m", "bandwidth.launch.launchers.mpirole",
                   "--hosts", ",".join(str(h) for h in placed), "--", *command]


class MpiChild(RunnerChild):
    """mpirun, whose tagged output is split back into one stream per rank."""

    grace_s = 10.0   # mpirun forwards SIGTERM to every rank and tears the job down itself
    # mpirun, not its process group: the ranks are in their own groups, and mpirun forwards
    # SIGTERM to them and cleans up.
    terminate_group = False
    die_with_launcher = False    # a SIGKILL would keep it from stopping what it started

    def __init__(self, argv: Sequence[str], env: dict[str, str], roles: Sequence[Role],
                 hosts: Sequence[Host] = (), connect_timeout_s: int = 0):
        super().__init__("mpirun", argv, env, roles)
        self.hosts = list(dict.fromkeys(hosts))         # for naming a host ssh could not reach
        self.connect_timeout_s = connect_timeout_s
        self.own = collections.deque(maxlen=60)     # mpirun's own messages
        self.partial: dict[tuple[int, str], str] = {}

    def on_line(self, stream: str, line: str) -> None:
        pieces = _TAG.split(line)
        if pieces[0] or len(pieces) == 1:
            self._emit(None, stream, pieces[0])
        # A rank's output can be split over several tags on one line ("err[1,1]<stderr>: 1");
        # text up to the next tag belongs to that rank, and the newline ends the last one.
        for i in range(1, len(pieces), 3):
            key = (int(pieces[i]), pieces[i + 1])
            self.partial[key] = self.partial.get(key, "") + pieces[i + 2]
        if len(pieces) > 1:
            key = (int(pieces[-3]), pieces[-2])
            self._emit(key[0], key[1], self.partial.pop(key))

    def _emit(self, rank: int | None, stream: str, text: str) -> None:
        if rank is None:
            self.own.append(text)
            emit(sys.stderr, f"[mpirun] {text}\n")
        elif stream == "stdout":
            emit(sys.stdout, text + "\n")
        elif (text := self.rank_line(rank, text)) is not None:
            label = self.labels[rank] if rank < len(self.labels) else f"mpi rank {rank}"
            emit(sys.stderr, f"[{label}] {text}\n")

    def named_rank(self) -> tuple[int, int] | None:
        """The rank mpirun's message names: "exited on signal N", or "Process name: [[J,1],R]"
        with its "Exit code"."""
        text = "\n".join(self.own)
        if (match := _SIGNAL.search(text)) is not None:
            return int(match[1]), -int(match[2])
        if (match := _EXIT.search(text)) is not None:
            exit_code = _EXIT_CODE.search(text, match.end())
            return int(match[1]), int(exit_code[1]) if exit_code else self.proc.returncode
        return None

    def own_failure(self) -> Failure:
        named = self.named_rank()
        if named is None or named[0] >= len(self.subjects):
            return self._ssh_failure() or status_failure("mpirun", self.proc.returncode,
                                                         "mpirun", self.own)
        return self.rank_failure(*named)

    def _ssh_failure(self) -> Failure | None:
        """mpirun could not start its daemon on a host: ssh's error, worded as the ssh launcher
        words it, naming the host (the one ssh's message names, or the only one)."""
        lines = ssh_error_lines(self.own)
        if not lines:
            return None
        named = [host for host in self.hosts
                 if any(re.search(rf"(?<![\w.-]){re.escape(host.name)}(?![\w.-])", line)
                        for line in lines)]
        host = named[0] if named else self.hosts[0] if len(self.hosts) == 1 else None
        what = explain_ssh_error(lines, host or Host("?"), self.connect_timeout_s)
        return Failure(str(host) if host else "mpirun", what, 255, "mpirun", tuple(lines),
                       context="while mpirun was starting its daemons over ssh")


def build(plan: Plan) -> list[Child]:
    """The one mpirun child. Remote processes get the ``-x`` variables (forwarded ones, the
    job-wide contract); mpirun and the processes on this host also get the session variables
    and mpirun's own configuration (``OMPI_*``...)."""
    config = plan.config
    remote = child_environ(plan.environ, config.env, same_host=False)
    # The wrapper module must import on every host: put this toolkit first on PYTHONPATH.
    remote["PYTHONPATH"] = os.pathsep.join(p for p in (PACKAGE_ROOT, remote.get("PYTHONPATH")) if p)
    remote.update(plan.job.to_environ())
    env = {name: value for name, value in plan.environ.items()
           if name.startswith(MPI_VARIABLE_PREFIXES)}
    env.update(child_environ(plan.environ, config.env, same_host=True))
    env.update(remote)
    # mpirun reaches remote hosts with ssh too: never prompt, and time out like --launcher ssh
    # (unless the user configured mpirun's ssh arguments themselves).
    rsh_args = None if "OMPI_MCA_plm_rsh_args" in plan.environ else \
        f"-o BatchMode=yes -o ConnectTimeout={config.timeout_s}"
    argv = mpirun_argv(plan.hosts, sorted(remote), config.command, rsh_args,
                       options=keep_fqdn_args(open_mpi_version()))
    return [MpiChild(argv, env, plan.roles, plan.hosts, config.timeout_s)]
