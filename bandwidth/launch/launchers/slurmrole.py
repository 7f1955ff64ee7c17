"""Give one task of the slurm launcher's ``srun`` step its role in the contract, then run the
command (``bandwidth.launch.launchers.rolewrap``: as its child, telling the launcher how it ended).

Usage (what ``--launcher slurm`` puts after ``srun ...``; not meant to be typed)::

    python3 -m bandwidth.launch.launchers.slurmrole --hosts HOST0,HOST1,... -- command [args...]

Task ``SLURM_PROCID`` gets the role of index ``SLURM_PROCID`` in rank order (workers, servers,
then the scheduler: ``environment.Job.role_at``), as ``bandwidth.launch.launchers.mpirole`` does for
Open MPI. ``--hosts`` is the launcher's placement, one node per task; srun placed the tasks with
``--distribution arbitrary`` from the same list, and the wrapper checks that Slurm ran this task on
its planned node (``SLURMD_NODENAME``) and with the planned local rank (``SLURM_LOCALID``), and
stops with one line if not, rather than give a process another node's name.
"""

from __future__ import annotations

import os
import sys

from bandwidth.launch.contract.environment import ContractError, Job
from bandwidth.launch.planning.hostfile import Host
from bandwidth.launch.planning.plan import local_ranks
from bandwidth.launch.launchers.rolewrap import become, role_environ


def environ_for(task: int, ntasks: int, node: str, local_id: int, hosts: list[str],
                environ: dict[str, str]) -> dict[str, str]:
    """The environment of task ``task``; raises ContractError on any mismatch."""
    job = Job.from_environ(environ)
    if ntasks not in (job.world_size, job.world_size + 1) or len(hosts) != ntasks:
        raise ContractError(f"srun started {ntasks} tasks and --hosts lists {len(hosts)} for "
                            f"{job.num_workers} workers and {job.num_servers} servers")
    if node != hosts[task]:
        raise ContractError(f"Slurm ran task {task} on {node}, but the launcher planned it on "
                            f"{hosts[task]}")
    placed = [Host(name) for name in hosts]
    if local_ranks(placed)[task][0] != local_id:
        raise ContractError(f"Slurm numbered task {task} local task {local_id} on {node}, but "
                            f"the launcher planned {local_ranks(placed)[task][0]}")
    return role_environ(job, placed, task, environ)


def main(argv: list[str] | None = None) -> int:
    def environ_of(hosts: list[str]) -> dict[str, str]:
        e = os.environ
        return environ_for(int(e["SLURM_PROCID"]), int(e["SLURM_NTASKS"]), e["SLURMD_NODENAME"],
                           int(e["SLURM_LOCALID"]), hosts, dict(e))

    return become("slurmrole", "srun", "node of each task, comma-separated", argv, environ_of)


if __name__ == "__main__":
    sys.exit(main())
