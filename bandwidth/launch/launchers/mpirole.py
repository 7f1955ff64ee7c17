"""Give one ``mpirun`` process its role in the contract, then run the command.

Usage (what ``--launcher mpi`` puts after ``mpirun ...``; not meant to be typed)::

    python3 -m bandwidth.launch.launchers.mpirole --hosts HOST0,HOST1,... -- command [args...]

Open MPI numbers the processes with ``OMPI_COMM_WORLD_RANK``. Process ``i`` gets the role of
index ``i`` in rank order: workers ``0..n-1``, then servers ``n..n+s-1``, then, when
``OMPI_COMM_WORLD_SIZE`` is ``n+s+1``, the scheduler (``environment.Job.role_at``). The job-wide
variables (``DMLC_NUM_WORKER``, ``MASTER_ADDR``, ...) arrive from mpirun with ``-x``; this
wrapper adds the per-process ones (``DMLC_ROLE``, ``DMLC_TASK_ID``, ``RANK``, ``LOCAL_RANK``,
``LOCAL_WORLD_SIZE``, ``DMLC_NODE_HOST``) and runs the command as its child
(``bandwidth.launch.launchers.rolewrap``): it tells the launcher when the command started and how it
ended, and ends the same way, so the command's exit status and signals are still mpirun's to
see.

``--hosts`` is the launcher's placement (``bandwidth.launch.planning.plan``), one host per process.
mpirun places with ``--map-by node`` on the same hosts and slot counts, which is the same
round-robin; the wrapper checks that mpirun's local rank and local size agree with the plan
and stops with an error if not (for instance when two hosts-file names are one machine), rather
than give a process another host's name.
"""

from __future__ import annotations

import os
import sys

from bandwidth.launch.contract.environment import ContractError, Job
from bandwidth.launch.planning.hostfile import Host
from bandwidth.launch.planning.plan import local_ranks
from bandwidth.launch.launchers.rolewrap import become, role_environ


def environ_for(index: int, mpi_size: int, hosts: list[str], environ: dict[str, str],
                mpi_local: tuple[int, int]) -> dict[str, str]:
    """The environment of MPI process ``index``; raises ContractError on any mismatch."""
    job = Job.from_environ(environ)
    if mpi_size not in (job.world_size, job.world_size + 1) or len(hosts) != mpi_size:
        raise ContractError(f"mpirun started {mpi_size} processes and --hosts lists {len(hosts)} "
                            f"for {job.num_workers} workers and {job.num_servers} servers")
    placed = [Host(name) for name in hosts]
    planned = local_ranks(placed)[index]
    if planned != mpi_local:
        raise ContractError(
            f"mpirun placed process {index} as local rank {mpi_local[0]} of {mpi_local[1]} on "
            f"its node, but the launcher planned {planned[0]} of {planned[1]} on {hosts[index]}: "
            "list each machine once in the hosts file")
    return role_environ(job, placed, index, environ)


def main(argv: list[str] | None = None) -> int:
    def environ_of(hosts: list[str]) -> dict[str, str]:
        e = os.environ
        return environ_for(int(e["OMPI_COMM_WORLD_RANK"]), int(e["OMPI_COMM_WORLD_SIZE"]), hosts,
                           dict(e), (int(e["OMPI_COMM_WORLD_LOCAL_RANK"]),
                                     int(e["OMPI_COMM_WORLD_LOCAL_SIZE"])))

    return become("mpirole", "Open MPI's mpirun", "host of each MPI process, comma-separated",
                  argv, environ_of)


if __name__ == "__main__":
    sys.exit(main())
