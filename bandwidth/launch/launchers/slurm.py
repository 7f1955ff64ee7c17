"""The slurm launcher: every process from one ``srun`` step, inside a Slurm allocation.

    salloc -N 2 -n 8 python launch.py --launcher slurm -n 4 -s 4 python3 -m bandwidth.measure \\
        --kv-store dist_sync --cpus 1
    sbatch examples/slurm.sbatch            # the same from a batch script

The hosts are the allocation's (``scontrol show hostnames $SLURM_JOB_NODELIST``) and each one's
slots are its tasks (``SLURM_TASKS_PER_NODE``, e.g. ``2(x3),1``); the usual placement rule
(``bandwidth.launch.planning.plan``) deals workers, then servers (then the ``--scheduler``) over
them. The command (values in srun's environment, off the command line; srun passes its whole
environment to the tasks, ``--export=ALL``)::

    srun --label --kill-on-bad-exit=1 --ntasks N --distribution arbitrary \\
        --nodelist h0,h1,h0,h1,... --export ALL \\
        python3 -m bandwidth.launch.launchers.slurmrole --hosts h0,h1,h0,h1,... -- command...

``--distribution arbitrary`` with one node per task places task ``i`` exactly where the plan put
process ``i``; ``slurmrole`` gives task ``SLURM_PROCID`` its role and checks that Slurm ran it on
the planned node (``SLURMD_NODENAME``). One step for the whole job, not one per role: srun then
supervises every process as one unit (``--kill-on-bad-exit`` ends the step at the first task
that fails, ``scancel`` and a SIGTERM to srun reach every task at once, the accounting shows one
step), and two steps would have to share the allocation's CPUs, which Slurm refuses or queues
unless each asks for ``--overlap``. ``--label`` prefixes every output line with its task number,
which the launcher strips again: stderr gets the usual ``[worker 0@host]`` prefix and a tail per
task for the report. Each task's wrapper says in a line of its stderr when its command started
and how it ended (``bandwidth.launch.supervision.rankends``), so that the launcher reports every
task as it reports the local launcher's processes (``bandwidth.launch.supervision.runner``: root
cause, consequences, ``--report``); a task that left no such line (its wrapper killed with SIGKILL
after Slurm's ``KillWait``) is named from srun's own message (``srun: error: node2: task 1: Exited
with exit code 3``).

Outside an allocation (no ``SLURM_JOB_ID``), or asking for more processes than the allocation
has tasks, the launch stops before starting anything, with one ``FAIL:`` line (exit status 2).
"""

from __future__ import annotations

import collections
import os
import re
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence

from bandwidth.launch.supervision.child import Child, Failure, LaunchFailed, emit, status_failure
from bandwidth.launch.contract.environment import Role
from bandwidth.launch.contract.forwarding import child_environ
from bandwidth.launch.planning.hostfile import Host
from bandwidth.launch.launchers.mpi import PACKAGE_ROOT
from bandwidth.launch.planning.plan import Plan
from bandwidth.launch.supervision.runner import RunnerChild

_LABEL = re.compile(r"^\s*(\d+): ?(.*)$")
_TASK_EXIT = re.compile(r"srun: error: (\S+): tasks? (\d+)[-,\d]*: Exited with exit code (\d+)")
_TASK_SIGNAL = re.compile(r"srun: error: (\S+): tasks? (\d+)[-,\d]*: (.+?)( \(core dumped\))?$")
_CANCELLED = re.compile(r"\*\*\* (STEP|JOB) \S+ ON \S+ CANCELLED AT \S+.*?\*\*\*")
_TASKS_PER_NODE = re.compile(r"^(\d+)(?:\(x(\d+)\))?$")
SIGNAL_WORDS = {signal.strsignal(s): s for s in signal.Signals if signal.strsignal(s)}


def _refuse(what: str) -> LaunchFailed:
    failure = Failure("slurm", what, 2)
    return LaunchFailed(failure, failure.report())


def tasks_per_node(text: str) -> list[int]:
    """``SLURM_TASKS_PER_NODE`` (``2(x3),1``) as one count per node: ``[2, 2, 2, 1]``."""
    counts = []
    for part in text.split(","):
        match = _TASKS_PER_NODE.match(part.strip())
        if match is None:
            raise ValueError(f"SLURM_TASKS_PER_NODE={text!r}: cannot read {part!r}")
        counts += [int(match[1])] * int(match[2] or 1)
    return counts


def allocation(environ: Mapping[str, str], count: int) -> tuple[Host, ...]:
    """The allocation's hosts, each with its tasks as ``slots``; LaunchFailed (one FAIL: line,
    status 2) outside an allocation or when ``count`` processes do not fit."""
    job_id = environ.get("SLURM_JOB_ID")
    if not job_id:
        raise _refuse("not inside a Slurm allocation (SLURM_JOB_ID is not set): run launch.py "
                      f"under salloc or sbatch, e.g. salloc -n {count} python launch.py "
                      "--launcher slurm ...")
    nodelist = environ.get("SLURM_JOB_NODELIST") or environ.get("SLURM_NODELIST", "")
    try:
        out = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True,
                             text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise _refuse(f"cannot run 'scontrol show hostnames {nodelist}': {err}") from None
    names = out.stdout.split()
    if out.returncode != 0 or not names:
        raise _refuse(f"scontrol cannot expand SLURM_JOB_NODELIST={nodelist!r}: "
                      f"{out.stderr.strip()[:200]}")
    try:
        counts = tasks_per_node(environ.get("SLURM_TASKS_PER_NODE", ",".join("1" for _ in names)))
    except ValueError as err:
        raise _refuse(str(err)) from None
    if len(counts) != len(names):
        raise _refuse(f"SLURM_TASKS_PER_NODE={environ.get('SLURM_TASKS_PER_NODE')!r} does not "
                      f"give one count for each of the {len(names)} nodes of {nodelist}")
    if sum(counts) < count:
        raise _refuse(f"the job needs {count} processes but allocation {job_id} has "
                      f"{sum(counts)} tasks ({nodelist}): ask for more (salloc -n {count}, "
                      "sbatch --ntasks), or launch fewer (-n, -s)")
    return tuple(Host(name, slots=n) for name, n in zip(names, counts))


def srun_argv(placed: Sequence[Host], command: Sequence[str], python: str = "python3") -> list[str]:
    hosts = ",".join(str(h) for h in placed)
    return ["srun", "--label", "--kill-on-bad-exit=1", "--ntasks", str(len(placed)),
            "--distribution", "arbitrary", "--nodelist", hosts, "--export", "ALL",
            python, "-m", "bandwidth.launch.launchers.slurmrole", "--hosts", hosts, "--", *command]


class SrunChild(RunnerChild):
    """srun, whose labelled output is split back into one stream per task."""

    grace_s = 10.0   # srun forwards SIGTERM to every task, then Slurm's KillWait applies
    # srun, not its process group: the tasks run under slurmstepd, and srun forwards the signal
    # to all of them and waits for the step to end.
    terminate_group = False
    die_with_launcher = False    # a SIGKILL would keep it from stopping what it started

    def __init__(self, argv: Sequence[str], env: dict[str, str], roles: Sequence[Role],
                 cwd: str, job_id: str = "?"):
        super().__init__("srun", argv, env, roles, cwd=cwd)
        self.job_id = job_id
        self.own = collections.deque(maxlen=60)          # srun's and slurmstepd's messages

    def on_line(self, stream: str, line: str) -> None:
        match = _LABEL.match(line)
        if match is None or int(match[1]) >= len(self.labels):
            self.own.append(line)
            emit(sys.stderr, f"[srun] {line}\n")
            return
        task, text = int(match[1]), match[2]
        if stream == "stdout":
            emit(sys.stdout, text + "\n")
            return
        note = self.noise.explain(text) if self.noise is not None else None
        if note == "":
            return                       # torch's per-connection warning, shown once
        if note:
            emit(sys.stderr, f"launch: note: {note}:\n")
        if (text := self.rank_line(task, text)) is not None:
            emit(sys.stderr, f"[{self.labels[task]}] {text}\n")

    def named_rank(self) -> tuple[int, int] | None:
        """The task srun's messages name: one that exited with a status, or died of a signal
        other than the SIGTERM with which ``--kill-on-bad-exit`` stops the others; None for a
        cancelled step (slurmstepd's "*** STEP 5.0 ON node1 CANCELLED AT ... ***")."""
        for line in self.own:
            if (match := _TASK_EXIT.search(line)) and int(match[3]) != 0:
                return int(match[2]), int(match[3])
        killed = self._killed()
        for task, signum in killed:
            if signum != signal.SIGTERM:
                return task, -int(signum)
        if killed and self._cancelled() is None:
            return killed[0][0], -int(killed[0][1])
        return None

    def _killed(self) -> list[tuple[int, int]]:
        return [(int(m[2]), SIGNAL_WORDS[m[3]]) for line in self.own
                if (m := _TASK_SIGNAL.search(line)) and m[3] in SIGNAL_WORDS]

    def _cancelled(self) -> str | None:
        return next((line for tail in (self.own, *(r.tail for r in self.ranks)) for line in tail
                     if _CANCELLED.search(line)), None)

    def own_failure(self) -> Failure:
        named = self.named_rank()
        if named is not None:
            return self.rank_failure(*named, fallback=self.own)
        cancelled = self._cancelled()
        if cancelled is not None:
            what = _CANCELLED.search(cancelled)[0].strip("* ")
            return Failure(f"slurm job {self.job_id}", f"was cancelled (scancel, or its time "
                           f"limit): {what}", 128 + signal.SIGTERM, "srun", tuple(self.own))
        return status_failure("srun", self.proc.returncode, "srun", self.own)


def build(plan: Plan) -> list[Child]:
    """The one srun child. srun gets the allocation's ``SLURM_*`` variables (it needs them to
    run inside the job), the forwarded ones and the job-wide contract; the tasks inherit them."""
    config = plan.config
    env = {name: value for name, value in plan.environ.items() if name.startswith("SLURM_")}
    # The allocation's task layout would override --distribution arbitrary's: let srun derive
    # the step's own from its arguments.
    for name in ("SLURM_DISTRIBUTION", "SLURM_HOSTFILE", "SLURM_NTASKS_PER_NODE",
                 "SLURM_TASKS_PER_NODE", "SLURM_NPROCS", "SLURM_NTASKS"):
        env.pop(name, None)
    env.update(child_environ(plan.environ, config.env, same_host=True))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (PACKAGE_ROOT, env.get("PYTHONPATH")) if p)
    env.update(plan.job.to_environ())
    return [SrunChild(srun_argv(plan.hosts, config.command), env, plan.roles, config.workdir,
                      plan.environ.get("SLURM_JOB_ID", "?"))]
