"""A real Slurm cluster on this machine for the tests: munged, slurmctld and slurmd (Debian's
slurm-wlm 22.05 and munge), every file under one temporary folder, ports the kernel picks.

    with SlurmCluster(tmp_path, nodes=[("vm", "127.0.0.1", None)], cpus=8) as cluster:
        subprocess.run(["salloc", "-n", "4", ...], env=cluster.env())

Each node is ``(NodeName, NodeAddr, netns)``: ``netns`` None runs its slurmd here, a name runs
it inside that network namespace (``nsenter --net``), as a host of ``bandwidth.netlab``.
The nodes declare ``cpus`` CPUs whatever the machine has (``SlurmdParameters=config_overrides``
keeps slurmd from draining a node that has fewer): the tests start up to 8 processes on a 2-core
machine, and a Slurm allocation's slots are what the launcher reads; nothing here measures speed.
``ProctrackType=proctrack/linuxproc`` and ``TaskPlugin=task/none``: no cgroups needed (containers
seldom delegate them). Every daemon runs in the foreground as a child of the test process and is
stopped (SIGTERM, then SIGKILL) on every way out of the ``with``; so are jobs still running.
Should the test process itself be killed outright, the kernel's parent-death signal ends them.
"""

from __future__ import annotations

import functools
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

from bandwidth.launch.supervision.lifeline import die_with_parent

PROGRAMS = ("munged", "slurmctld", "slurmd", "salloc", "srun", "scontrol", "scancel", "sinfo")


def missing_reason() -> str | None:
    """Why these tests cannot run here (None when they can)."""
    if os.geteuid() != 0:
        return "a Slurm cluster for the tests needs root (slurmd runs jobs as their user)"
    absent = [p for p in PROGRAMS if shutil.which(p) is None]
    if absent:
        return (f"Slurm is not installed ({', '.join(absent)} missing): apt-get install "
                "slurm-wlm munge")
    return None


def free_ports(count: int) -> list[int]:
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


class SlurmCluster:
    def __init__(self, root: Path, nodes: list[tuple[str, str, str | None]], cpus: int = 8,
                 controller: tuple[str, str] | None = None):
        # slurmctld runs only where SlurmctldHost names this machine's host name
        controller = controller or (socket.gethostname(), "127.0.0.1")
        self.root = Path(root)
        self.nodes, self.cpus, self.controller = nodes, cpus, controller
        self.daemons: list[tuple[str, subprocess.Popen]] = []
        self.conf = self.root / "slurm.conf"
        self.munge_socket = self.root / "munge" / "munge.socket"

    # -- set-up ---------------------------------------------------------------------------
    def __enter__(self) -> SlurmCluster:
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
        env["SLURM_CONF"] = str(self.conf)
        env.update(extra)
        return env

    def _start(self) -> None:
        munge = self.root / "munge"
        munge.mkdir(parents=True, mode=0o700)
        key = munge / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o600)
        for sub in ("state", "log", "run"):
            (self.root / sub).mkdir(mode=0o755)
        self._daemon("munged", ["munged", "--foreground", "--force", f"--socket={self.munge_socket}",
                                f"--key-file={key}", f"--pid-file={munge / 'munged.pid'}",
                                f"--log-file={munge / 'munged.log'}",
                                f"--seed-file={munge / 'munged.seed'}"])
        self._wait(lambda: self.munge_socket.exists(), "munged's socket", 20)
        ctld_port, slurmd_port = free_ports(2)
        self.conf.write_text(self._conf_text(ctld_port, slurmd_port))
        for node, _, _ in self.nodes:
            (self.root / "spool" / node).mkdir(parents=True)
        self._daemon("slurmctld", ["slurmctld", "-D", "-i", "-f", str(self.conf)])
        for node, _, netns in self.nodes:
            argv = ["slurmd", "-D", "-f", str(self.conf), "-N", node]
            if netns is not None:
                # nsenter, not "ip netns exec", which remounts /sys (and so hides
                # /sys/fs/cgroup, without which slurmd 22.05 does not start)
                argv = ["nsenter", f"--net=/run/netns/{netns}"] + argv
            self._daemon(f"slurmd {node}", argv)
        self._wait(self._all_idle, "every node idle (sinfo)", 60)

    def _conf_text(self, ctld_port: int, slurmd_port: int) -> str:
        r = self.root
        name, addr = self.controller
        nodes = "\n".join(f"NodeName={n} NodeAddr={a} NodeHostname={n} CPUs={self.cpus} "
                          "State=UNKNOWN" for n, a, _ in self.nodes)
        return f"""\
ClusterName=bw12
SlurmctldHost={name}({addr})
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={self.munge_socket}
StateSaveLocation={r}/state
SlurmdSpoolDir={r}/spool/%n
SlurmctldPidFile={r}/run/slurmctld.pid
SlurmdPidFile={r}/run/slurmd-%n.pid
SlurmctldLogFile={r}/log/slurmctld.log
SlurmdLogFile={r}/log/slurmd-%n.log
ProctrackType=proctrack/pgid
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
ReturnToService=2
KillWait=3
MinJobAge=5
InactiveLimit=0
SlurmctldTimeout=30
SlurmdTimeout=30
{nodes}
PartitionName=bw12 Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
"""

    def _daemon(self, name: str, argv: list[str]) -> None:
        log = open(self.root / "log" / f"{name.replace(' ', '-')}.out", "wb")
        with log:
            # A test process killed outright (SIGKILL, a crashed interpreter) takes the daemons
            # with it: the kernel's parent-death signal (bandwidth.launch.supervision.lifeline).
            proc = subprocess.Popen(argv, env=self.env(), stdin=subprocess.DEVNULL, stdout=log,
                                    stderr=subprocess.STDOUT, start_new_session=True,
                                    preexec_fn=functools.partial(die_with_parent, os.getpid()))
        self.daemons.append((name, proc))

    def _wait(self, ready, what: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for name, proc in self.daemons:
                if proc.poll() is not None:
                    raise RuntimeError(f"{name} exited with status {proc.returncode} while "
                                       f"waiting for {what}:\n{self.logs()}")
            if ready():
                return
            time.sleep(0.3)
        raise RuntimeError(f"timed out after {timeout_s} s waiting for {what}:\n{self.logs()}")

    def _all_idle(self) -> bool:
        out = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %t"], env=self.env(),
                             capture_output=True, text=True, timeout=20).stdout.split()
        states = dict(zip(out[::2], out[1::2]))
        return all(states.get(node) == "idle" for node, _, _ in self.nodes)

    def logs(self) -> str:
        texts = []
        for path in sorted((self.root / "log").glob("*")):
            lines = path.read_text(errors="replace").splitlines()[-15:]
            texts.append(f"--- {path.name}\n" + "\n".join(lines))
        return "\n".join(texts)

    # -- tear-down ------------------------------------------------------------------------
    def stop(self) -> None:
        """Cancel every job, then stop the daemons: slurmd first, munged last."""
        if any(name == "slurmctld" and proc.poll() is None for name, proc in self.daemons):
            subprocess.run(["scancel", "--full", "--partition", "bw12"], env=self.env(),
                           capture_output=True, timeout=20)
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline and self.jobs():
                time.sleep(0.3)
        for name, proc in sorted(self.daemons, key=lambda d: ("slurmd" not in d[0],
                                                              d[0] == "munged")):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(timeout=10)
            try:
                os.killpg(proc.pid, signal.SIGKILL)      # whatever it left in its group
            except ProcessLookupError:
                pass
        self.daemons.clear()

    def jobs(self) -> list[str]:
        try:
            out = subprocess.run(["squeue", "-h", "-o", "%i"], env=self.env(),
                                 capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return []
        return out.stdout.split() if out.returncode == 0 else []
