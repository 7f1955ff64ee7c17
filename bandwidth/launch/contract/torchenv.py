"""Roles from torchrun's variables, for programs started without launch.py.

    torchrun --nproc-per-node 2 -m bandwidth.measure --kv-store dist_nccl --cpus 1
    torchrun --nproc-per-node 4 -m bandwidth.measure --kv-store dist_sync --num-servers 2 --cpus 1
    torchrun --nnodes 2 --node-rank R --master-addr HOST0 --master-port 29500 \\
        --nproc-per-node 8 -m bandwidth.measure --kv-store dist_nccl --gpus 0,1,2,3,4,5,6,7

torchrun, a Kubernetes pod spec, ``srun`` with a wrapper, or any launcher that sets ``RANK``,
``WORLD_SIZE``, ``MASTER_ADDR`` and ``MASTER_PORT`` (and, optionally, ``LOCAL_RANK`` and
``LOCAL_WORLD_SIZE``; without them a process counts as alone on its host) gives each process a
place in the job. ``role_from_environ`` turns it into the same ``environment.Role`` that launch.py's
variables give:

* ranks ``0..W-S-1`` are workers, ranks ``W-S..W-1`` servers, where ``W`` is ``WORLD_SIZE`` and
  ``S`` is the program's ``--num-servers`` (default 0; the parameter-server modes need at least
  one, and at least one rank must be left to work). Under torchrun the servers are therefore the
  last processes of the last node;
* the rendezvous: under torchrun (``TORCHELASTIC_USE_AGENT_STORE=True``) torchrun's agent already
  hosts a ``TCPStore`` at ``MASTER_ADDR:MASTER_PORT``; every rank joins it as a client and keeps
  its keys under ``bandwidth/<TORCHELASTIC_RUN_ID>/<restart>``, apart from the agent's own. Under
  any other launcher rank 0 hosts that store itself on ``MASTER_PORT`` (every address of its
  host), and the other ranks wait for it to answer (``environment.join_store``), up to the program's
  ``--timeout``;
* every rank posts its ``WORLD_SIZE`` in the store and reads every other rank's before the
  process group forms (``environment.join_store``): ranks that disagree end at once in one line
  naming the rank and both values, instead of waiting for a world that never forms;
* ``DMLC_NODE_HOST`` is this host's name (``socket.gethostname()``), which reports use to name the
  process; ``DMLC_JOB_CLUSTER`` is ``torchrun``, or ``env`` under another launcher.

There is no job secret: a store torchrun or rank 0 opens has none, as ``init_method="env://"``
has none (docs/launcher.md, Security). launch.py's own variables (``DMLC_ROLE``...) win where both
are set.
"""

from __future__ import annotations

from collections.abc import Mapping

from bandwidth.launch.contract.environment import ContractError, Job, Role

TORCH_VARIABLES = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def is_torch_environ(environ: Mapping[str, str]) -> bool:
    """Whether torchrun (or a launcher like it) started this process, and launch.py did not."""
    return "DMLC_ROLE" not in environ and all(environ.get(name) for name in TORCH_VARIABLES)


def _number(environ: Mapping[str, str], name: str, default: int | None = None) -> int:
    value = environ.get(name)
    if not value and default is not None:
        return default
    if not value or not value.isdigit():
        raise ContractError(f"{name}={value!r} is not a non-negative integer (set by torchrun or "
                            "the launcher that started this process)")
    return int(value)


def torch_role(environ: Mapping[str, str], num_servers: int, node_host: str) -> Role:
    """This process's Role from ``RANK``, ``WORLD_SIZE``, ``MASTER_*`` (and ``LOCAL_*``) with
    ``num_servers`` of the ranks serving; ContractError (one line) for a bad combination."""
    rank, world_size = _number(environ, "RANK"), _number(environ, "WORLD_SIZE")
    port = _number(environ, "MASTER_PORT")
    if not 0 < port < 65536:
        raise ContractError(f"MASTER_PORT={port} is not a TCP port (1..65535; set by torchrun "
                            "or the launcher that started this process)")
    local_rank = _number(environ, "LOCAL_RANK", 0)
    local_world_size = _number(environ, "LOCAL_WORLD_SIZE", max(local_rank + 1, 1))
    if not rank < world_size:
        raise ContractError(f"RANK={rank} is not below WORLD_SIZE={world_size}")
    if not local_rank < local_world_size:
        raise ContractError(f"LOCAL_RANK={local_rank} is not below "
                            f"LOCAL_WORLD_SIZE={local_world_size}")
    if num_servers >= world_size:
        raise ContractError(f"--num-servers {num_servers} leaves no worker among WORLD_SIZE="
                            f"{world_size} ranks: give at most {world_size - 1}, or start more "
                            "processes (torchrun --nproc-per-node)")
    agent_store = environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
    namespace = ""
    if agent_store:
        namespace = (f"bandwidth/{environ.get('TORCHELASTIC_RUN_ID', 'none')}/"
                     f"{environ.get('TORCHELASTIC_RESTART_COUNT', '0')}")
    job = Job(world_size - num_servers, num_servers, environ["MASTER_ADDR"], port, port,
              "torchrun" if "TORCHELASTIC_RUN_ID" in environ else "env", namespace,
              store_on_rank0=not agent_store)
    return job.role(rank, node_host, (local_rank, local_world_size))


def role_from_environ(environ: Mapping[str, str], num_servers: int | None,
                      node_host: str) -> Role | None:
    """The Role of a program started by launch.py (its contract), by torchrun or a launcher like
    it (``torch_role``), or None when started by hand. ``num_servers`` is ``--num-servers``
    (None when not given), which only the torchrun way takes."""
    if "DMLC_ROLE" in environ:
        if num_servers is not None:
            raise ContractError(f"--num-servers {num_servers}: under launch.py the number of "
                                "servers is launch.py's -s; drop --num-servers")
        return Role.from_environ(environ)
    if is_torch_environ(environ):
        return torch_role(environ, num_servers or 0, node_host)
    if num_servers is not None:
        raise ContractError(f"--num-servers {num_servers} applies under torchrun (or a launcher "
                            "that sets RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT), which "
                            "did not start this process; under launch.py use -s")
    return None
