"""The environment contract: the variables the launcher sets in every process it starts.

A program reads them with one call, never field by field::

    from bandwidth.launch.contract.environment import Role, join_store
    role = Role.from_environ(os.environ)      # ContractError if a variable is missing or wrong
    store = join_store(role)                  # TCPStore client of the launcher's rendezvous
    torch.distributed.init_process_group("gloo", store=store, rank=role.rank,
                                         world_size=role.world_size)

Variables (all launchers; values are decimal strings where numeric):

``DMLC_ROLE``          ``worker``, ``server`` or ``scheduler``
``DMLC_TASK_ID``       index within the role: workers ``0..n-1``, servers ``0..s-1``,
                       the scheduler ``0``
``DMLC_NUM_WORKER``    ``n`` (``-n``)
``DMLC_NUM_SERVER``    ``s`` (``-s``, default ``n``; ``0`` allowed)
``DMLC_PS_ROOT_URI``   the job's root address (= ``MASTER_ADDR``)
``DMLC_PS_ROOT_PORT``  with ``--scheduler``: the port the ps-lite scheduler binds (a free
                       port below the ephemeral range, never ``MASTER_PORT``); without:
                       ``MASTER_PORT``
``DMLC_NODE_HOST``     this process's host as written in the hosts file (local launcher:
                       ``127.0.0.1``; the scheduler of the local and ssh launchers, which
                       runs on the launching host: ``MASTER_ADDR``)
``DMLC_JOB_CLUSTER``   ``local``, ``ssh``, ``mpi`` or ``slurm`` (``torchrun`` or ``env``: torchenv.py)
``MASTER_ADDR``        address of the launching host, where the launcher hosts a
                       ``torch.distributed.TCPStore`` (``--master-addr`` overrides)
``MASTER_PORT``        that store's port (``--port``; default: a free port)
``WORLD_SIZE``         ``n + s`` (the scheduler is not counted)
``RANK``               workers ``0..n-1``, then servers ``n..n+s-1``; unset for the scheduler
``LOCAL_RANK``         rank among this host's world ranks (see ``bandwidth.launch.planning.plan``);
                       unset for the scheduler
``LOCAL_WORLD_SIZE``   number of world ranks on this host; unset for the scheduler
``TORCHELASTIC_USE_AGENT_STORE``  ``True``, as torchrun sets it: ``init_process_group(
                       init_method="env://")`` then joins the launcher's store instead of
                       making rank 0 host one on ``MASTER_PORT`` (which is taken)
``BANDWIDTH_HEARTBEAT_S``  the heartbeat interval (``--heartbeat-interval``):
                       ``join_store`` beats that often (``bandwidth.launch.contract.heartbeat``);
                       unset: no heartbeat
``BANDWIDTH_OPEN_STORE``  ``1`` under ``launch.py --open-store``: the store has no gate, and
                       ``join_store`` connects to it directly
``BANDWIDTH_JOB_SECRET``  a random secret of this launch (128 bits, hex), sent through the
                       environment only (over ssh: on the ssh client's stdin; mpirun: ``-x``
                       by name), never on a command line. The store's gate serves only
                       clients that prove they know it (``bandwidth.launch.contract.storegate``),
                       and ``join_store`` keeps every key of the job under it

Ranks that join with ``join_store`` register under ``<secret>/launch/joined/<rank>``; once any rank
has registered, the launcher fails the job naming the ranks that have not within ``--timeout``.
Programs that open the store themselves (``TCPStore(MASTER_ADDR, MASTER_PORT,
is_master=False)``) are not tracked and are bounded by their own store timeout instead.

This module imports nothing heavy (torch only inside ``join_store``), so wrappers such as
``bandwidth.launch.launchers.mpirole`` start fast.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from bandwidth.errors import ConfigError
from bandwidth.launch.contract.heartbeat import INTERVAL_VARIABLE, Heartbeat, interval_from_environ

WORKER, SERVER, SCHEDULER = "worker", "server", "scheduler"
ROLES = (WORKER, SERVER, SCHEDULER)
JOINED_COUNT_KEY = "launch/joined"
JOINED_KEY_PREFIX = "launch/joined/"
WORLD_KEY_PREFIX = "launch/world_size/"   # each rank's WORLD_SIZE, under torchrun or "env"
WORLD_FIRST_KEY = "launch/world_size"     # the first rank's, which the others must match
WORLD_CONFLICT_KEY = "launch/world_size_conflict"
SECRET_VARIABLE = "BANDWIDTH_JOB_SECRET"
OPEN_STORE_VARIABLE = "BANDWIDTH_OPEN_STORE"    # "1": launch.py --open-store, no gate

# Every variable the launcher sets; ``--env`` may not override them.
VARIABLES = ("DMLC_ROLE", "DMLC_TASK_ID", "DMLC_NUM_WORKER", "DMLC_NUM_SERVER",
             "DMLC_PS_ROOT_URI", "DMLC_PS_ROOT_PORT", "DMLC_NODE_HOST", "DMLC_JOB_CLUSTER",
             "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK",
             "LOCAL_WORLD_SIZE", "TORCHELASTIC_USE_AGENT_STORE", SECRET_VARIABLE,
             INTERVAL_VARIABLE, OPEN_STORE_VARIABLE)


class ContractError(ConfigError):
    """The environment does not hold a valid contract (the program was not started by the
    launcher, or a variable was overwritten)."""


def _reader(environ: Mapping[str, str]):
    def text(name: str) -> str:
        value = environ.get(name)
        if not value:
            raise ContractError(f"{name} is not set: start this program with the launcher "
                                "(python launch.py -n N ... command)")
        return value

    def number(name: str) -> int:
        value = text(name)
        if not value.isdigit():
            raise ContractError(f"{name}={value!r} is not a non-negative integer")
        return int(value)

    return text, number


@dataclass(frozen=True)
class Job:
    """What all processes of one launch share; hands out their Roles."""

    num_workers: int
    num_servers: int
    master_addr: str
    master_port: int
    ps_root_port: int               # = master_port unless a ps-lite scheduler runs
    cluster: str                    # local | ssh | mpi | slurm (launch.py); torchrun | env
    secret: str = ""                # BANDWIDTH_JOB_SECRET ("" from a launcher without one)
    store_on_rank0: bool = False    # rank 0 hosts the store (no launcher does: torchenv.py)
    heartbeat_s: float = 0.0        # BANDWIDTH_HEARTBEAT_S: beat interval (0: no heartbeat)
    open_store: bool = False        # BANDWIDTH_OPEN_STORE: launch.py --open-store (no gate)

    @property
    def world_size(self) -> int:
        return self.num_workers + self.num_servers

    @property
    def gated(self) -> bool:
        """The store is launch.py's, behind its gate (bandwidth.launch.contract.storegate): clients
        must prove they know the secret. torchrun's store, rank 0's and launch.py --open-store's
        have no gate (and the "secret" is only a namespace there)."""
        return bool(self.secret) and self.cluster not in ("torchrun", "env") \
            and not self.open_store

    @property
    def has_scheduler(self) -> bool:
        """The launch has a ps-lite scheduler (--scheduler gives it a port of its own)."""
        return self.ps_root_port != self.master_port

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> Job:
        text, number = _reader(environ)
        job = cls(number("DMLC_NUM_WORKER"), number("DMLC_NUM_SERVER"), text("MASTER_ADDR"),
                  number("MASTER_PORT"), number("DMLC_PS_ROOT_PORT"), text("DMLC_JOB_CLUSTER"),
                  environ.get(SECRET_VARIABLE, ""),
                  heartbeat_s=interval_from_environ(environ),
                  open_store=environ.get(OPEN_STORE_VARIABLE) == "1")
        if number("WORLD_SIZE") != job.world_size:
            raise ContractError(f"WORLD_SIZE={environ['WORLD_SIZE']} but DMLC_NUM_WORKER + "
                                f"DMLC_NUM_SERVER = {job.world_size}")
        if text("DMLC_PS_ROOT_URI") != job.master_addr:
            raise ContractError(f"DMLC_PS_ROOT_URI={environ['DMLC_PS_ROOT_URI']!r} differs from "
                                f"MASTER_ADDR={job.master_addr!r}")
        return job

    def to_environ(self) -> dict[str, str]:
        """The job-wide variables (the same in every process)."""
        env = {"DMLC_NUM_WORKER": self.num_workers, "DMLC_NUM_SERVER": self.num_servers,
               "DMLC_PS_ROOT_URI": self.master_addr, "DMLC_PS_ROOT_PORT": self.ps_root_port,
               "DMLC_JOB_CLUSTER": self.cluster, "MASTER_ADDR": self.master_addr,
               "MASTER_PORT": self.master_port, "WORLD_SIZE": self.world_size,
               "TORCHELASTIC_USE_AGENT_STORE": "True"}
        if self.secret:
            env[SECRET_VARIABLE] = self.secret
        if self.heartbeat_s > 0:
            env[INTERVAL_VARIABLE] = f"{self.heartbeat_s:g}"
        if self.open_store:
            env[OPEN_STORE_VARIABLE] = "1"
        return {key: str(value) for key, value in env.items()}

    def role_at(self, index: int) -> tuple[str, int]:
        """``(role, task_id)`` of process ``index``: workers, then servers, then the scheduler
        (the order of ranks, and of ``OMPI_COMM_WORLD_RANK`` under ``--launcher mpi``)."""
        if index < self.num_workers:
            return WORKER, index
        if index < self.world_size:
            return SERVER, index - self.num_workers
        if index == self.world_size:
            return SCHEDULER, 0
        raise ContractError(f"process index {index} is beyond {self.num_workers} workers, "
                            f"{self.num_servers} servers and one scheduler")

    def rank_of(self, name: str, task_id: int) -> int | None:
        """``RANK`` of a role's task; None for the scheduler, which has none."""
        return {WORKER: task_id, SERVER: self.num_workers + task_id}.get(name)

    def role(self, index: int, node_host: str, local: tuple[int, int] | None = None) -> Role:
        """The Role of process ``index``; ``local`` is ``(LOCAL_RANK, LOCAL_WORLD_SIZE)``."""
        name, task_id = self.role_at(index)
        local_rank, local_world_size = local if name != SCHEDULER else (None, None)
        return Role(self, name, task_id, node_host, self.rank_of(name, task_id), local_rank,
                    local_world_size)


@dataclass(frozen=True)
class Role:
    """One process's place in the job, as the launcher described it."""

    job: Job
    name: str                       # worker | server | scheduler
    task_id: int
    node_host: str
    rank: int | None = None         # None only for the scheduler
    local_rank: int | None = None
    local_world_size: int | None = None

    @property
    def world_size(self) -> int:
        return self.job.world_size

    @property
    def master_addr(self) -> str:
        return self.job.master_addr

    @property
    def master_port(self) -> int:
        return self.job.master_port

    @property
    def label(self) -> str:
        """``worker 0@host``: the prefix of this process's forwarded output."""
        return f"{self.name} {self.task_id}@{self.node_host}"

    @property
    def title(self) -> str:
        """``worker 0 (rank 0) on host``: how the launcher's reports name this process."""
        rank = "" if self.rank is None else f" {self.task_id} (rank {self.rank})"
        return f"{self.name}{rank} on {self.node_host}"

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> Role:
        """Parse and check the contract; raises ContractError naming the variable at fault."""
        text, number = _reader(environ)
        job = Job.from_environ(environ)
        name = text("DMLC_ROLE")
        if name not in ROLES:
            raise ContractError(f"DMLC_ROLE={name!r}: expected one of {', '.join(ROLES)}")
        task_id = number("DMLC_TASK_ID")
        rank = job.rank_of(name, task_id)
        if rank is None:
            return cls(job, name, task_id, text("DMLC_NODE_HOST"))
        if number("RANK") != rank or rank >= job.world_size:
            raise ContractError(f"RANK={environ['RANK']} does not match DMLC_ROLE={name} "
                                f"DMLC_TASK_ID={task_id} of {job.num_workers} workers and "
                                f"{job.num_servers} servers (expected RANK={rank})")
        local_rank, local_world_size = number("LOCAL_RANK"), number("LOCAL_WORLD_SIZE")
        if not local_rank < local_world_size:
            raise ContractError(f"LOCAL_RANK={local_rank} is not below "
                                f"LOCAL_WORLD_SIZE={local_world_size}")
        return cls(job, name, task_id, text("DMLC_NODE_HOST"), rank, local_rank, local_world_size)

    def to_environ(self) -> dict[str, str]:
        """Every contract variable of this process (the inverse of ``from_environ``)."""
        env = self.job.to_environ()
        env.update(DMLC_ROLE=self.name, DMLC_TASK_ID=str(self.task_id),
                   DMLC_NODE_HOST=self.node_host)
        if self.rank is not None:
            env.update(RANK=str(self.rank), LOCAL_RANK=str(self.local_rank),
                       LOCAL_WORLD_SIZE=str(self.local_world_size))
        return env


def job_store(store, secret: str):
    """``store`` seen through the job's secret: every key under ``<secret>/``."""
    from torch.distributed import PrefixStore

    return PrefixStore(secret, store) if secret else store


def join_store(role: Role, timeout_s: float = 300.0):
    """Connect to the launcher's TCPStore and register this rank, so the launcher can name the
    ranks that never arrive. Returns the store client, every key under the job's secret.

    First it finds the interface this host reaches the rendezvous from and sets
    ``GLOO_SOCKET_IFNAME``/``NCCL_SOCKET_IFNAME`` to it in this process's environment unless the
    user set them (``bandwidth.launch.contract.interface``), so that Gloo and NCCL, which read only
    the environment, advertise an address the other hosts reach; processes started from here (the
    ``dist_nccl`` ranks) inherit it. A host that cannot reach the rendezvous raises
    ``RendezvousUnreachable`` in one line naming the host and the address tried.

    Where no launcher hosts the store (``Job.store_on_rank0``: torchrun's variables without its
    agent's store, see ``bandwidth.launch.contract.torchenv``), rank 0 opens it on ``MASTER_PORT``
    and the others retry reaching it until ``timeout_s``, as they may start first."""
    import os

    from bandwidth.launch.contract.interface import export_choice
    from bandwidth.launch.contract.storegate import connect
    from bandwidth.launch.contract.storeopen import open_store

    hosting = role.job.store_on_rank0 and role.rank == 0
    master = open_store(role.master_addr, role.master_port, True, timeout_s, "rank 0") \
        if hosting else None
    choice = _towards(role, timeout_s, patient=role.job.store_on_rank0 and not hosting)
    export_choice(choice, os.environ)
    if master is not None:
        client = master
    elif role.job.secret and role.job.gated:
        client = connect(role.master_addr, role.master_port, role.job.secret, timeout_s)
    else:                           # a store torchrun's agent or rank 0 hosts: no gate
        client = open_store(role.master_addr, role.master_port, False, timeout_s,
                            f"rank {role.rank}")
    store = job_store(client, role.job.secret)
    if role.rank is not None:
        store.set(f"{JOINED_KEY_PREFIX}{role.rank}", role.node_host)
        store.add(JOINED_COUNT_KEY, 1)
        if role.job.cluster in ("torchrun", "env"):
            try:
                check_world_size(store, role.rank, role.world_size, timeout_s)
            except ContractError:
                if hosting:       # keep the store up a moment: the others read the conflict
                    import time
                    time.sleep(1.0)
                raise
        Heartbeat.start(role.master_addr, role.master_port, role.job.secret, role.rank,
                        role.job.heartbeat_s, gated=role.job.gated)
    return store


def check_world_size(store, rank: int, world_size: int, timeout_s: float) -> None:
    """Under torchrun or another launcher each process reads its own WORLD_SIZE (launch.py sets
    one for all, and Role.from_environ checks it). This rank posts its own; the first rank's is
    the job's (compare_set), and a rank that differs posts the conflict and raises; the others
    wait until ranks ``0..world_size-1`` have posted, or a conflict is posted, or ``timeout_s``
    passes (then the process group's own wait names what is missing). ContractError: one line
    naming both values."""
    import time

    mine = str(world_size)
    keys = [f"{WORLD_KEY_PREFIX}{r}" for r in range(world_size)]
    store.set(keys[rank], mine)
    first = store.compare_set(WORLD_FIRST_KEY, "", mine).decode(errors="replace")
    if first != mine:
        message = (f"rank {rank} has WORLD_SIZE={mine} but a rank before it has "
                   f"WORLD_SIZE={first[:20]}: start every process of a job with the same "
                   "WORLD_SIZE")
        store.set(WORLD_CONFLICT_KEY, message)
        raise ContractError(message)
    deadline = time.monotonic() + timeout_s
    while not store.check(keys):
        if store.check([WORLD_CONFLICT_KEY]):
            raise ContractError(store.get(WORLD_CONFLICT_KEY).decode(errors="replace")[:300])
        if time.monotonic() > deadline:
            return
        time.sleep(0.2)
    for other, value in enumerate(store.multi_get(keys)):
        if value.decode(errors="replace") != mine:
            raise ContractError(f"rank {other} has WORLD_SIZE={value.decode(errors='replace')[:20]}"
                                f" but rank {rank} has WORLD_SIZE={mine}: start every process of "
                                "a job with the same WORLD_SIZE")


def _towards(role: Role, timeout_s: float, patient: bool):
    """``interface.towards_rendezvous`` for this role; ``patient``: retry every half second until
    ``timeout_s`` while the store does not answer yet (or its name does not resolve yet, as a
    Kubernetes pod's DNS name before the pod is up)."""
    import time

    from bandwidth.launch.contract.interface import RendezvousUnreachable, towards_rendezvous

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return towards_rendezvous(role.master_addr, role.master_port, host=role.node_host,
                                      probe_timeout_s=min(timeout_s, 10.0))
        except RendezvousUnreachable:
            if not patient or time.monotonic() + 0.5 > deadline:
                raise
            time.sleep(0.5)
