"""Helpers for the launcher tests: run launch.py as a user would, find leftover processes, and
a real OpenSSH server on loopback (127.0.0.1 and 127.0.0.2 stand for two hosts)."""

from __future__ import annotations

import contextlib
import getpass
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PROGRAMS = ROOT / "tests" / "launch_programs"
PYTHON = sys.executable


def program(name: str) -> str:
    return str(PROGRAMS / name)


def launch_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT)
    env.update(extra or {})
    return env


def launch(*args: str, env: dict[str, str] | None = None, cwd: Path = ROOT,
           timeout: float = 60) -> subprocess.CompletedProcess:
    """``python launch.py ARGS`` from ``cwd``; returns the CompletedProcess (text)."""
    return subprocess.run([PYTHON, str(ROOT / "launch.py"), *args], cwd=cwd,
                          env=launch_env(env), capture_output=True, text=True, timeout=timeout)


def start_launch(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    return subprocess.Popen([PYTHON, str(ROOT / "launch.py"), *args], cwd=ROOT,
                            env=launch_env(env), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def marker() -> str:
    return f"launch-test-{uuid.uuid4().hex}"


def alive(mark: str) -> list[int]:
    """Pids of running processes whose command line contains ``mark``."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if mark.encode() in Path("/proc", entry, "cmdline").read_bytes():
                    pids.append(int(entry))
            except OSError:
                pass
    return pids


def descendants(pid: int) -> set[int]:
    """Every process below ``pid`` now (children's children too)."""
    parents = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, frontier = set(), {pid}
    while frontier:
        frontier = {p for p, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def wait_until(predicate, timeout_s: float, interval_s: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval_s)
    return predicate()


def records(outdir: Path) -> dict[str, dict]:
    """role_env.py's outputs by file stem (``worker-0``, ``server-1``, ``scheduler-0``)."""
    return {p.stem: json.loads(p.read_text()) for p in sorted(outdir.glob("*.json"))}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Sshd:
    """A running sshd, the client config that reaches it, and hosts files for it."""

    def __init__(self, directory: Path, port: int, proc: subprocess.Popen):
        self.directory, self.port, self.proc = directory, port, proc
        self.client_config = directory / "ssh_config"

    def hostfile(self, path: Path, *lines: str) -> str:
        path.write_text("".join(line.format(port=self.port) + "\n" for line in lines))
        return str(path)

    def options(self) -> list[str]:
        return ["--ssh-config", str(self.client_config)]


def _sshd_config(directory: Path, port: int) -> str:
    return "\n".join([
        f"ListenAddress 127.0.0.1:{port}", f"ListenAddress 127.0.0.2:{port}",
        f"HostKey {directory / 'host_ed25519'}",
        f"AuthorizedKeysFile {directory / 'authorized_keys'}",
        "PidFile none", "UsePAM no", "StrictModes no", "PasswordAuthentication no",
        "KbdInteractiveAuthentication no", "PubkeyAuthentication yes",
        "PermitRootLogin prohibit-password", "AllowTcpForwarding no", "X11Forwarding no",
        "PrintMotd no", "LogLevel ERROR", ""])


def _client_config(directory: Path) -> str:
    return "\n".join([
        "Host *", f"  User {getpass.getuser()}", f"  IdentityFile {directory / 'id_ed25519'}",
        "  IdentitiesOnly yes", f"  UserKnownHostsFile {directory / 'known_hosts'}",
        "  GlobalKnownHostsFile /dev/null", "  StrictHostKeyChecking yes", "  LogLevel ERROR", ""])


@pytest.fixture(scope="session")
def sshd(tmp_path_factory):
    """sshd on 127.0.0.1:PORT and 127.0.0.2:PORT with its own host key and an authorized key;
    the client config pins that host key in a known_hosts file of its own."""
    daemon = shutil.which("sshd") or "/usr/sbin/sshd"
    if not Path(daemon).exists() or shutil.which("ssh") is None:
        pytest.skip("OpenSSH server or client not installed (apt-get install openssh-server "
                    "openssh-client; .ci/run does this when run as root)")
    directory = tmp_path_factory.mktemp("sshd")
    for key in ("host_ed25519", "id_ed25519"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f",
                        str(directory / key)], check=True)
    shutil.copy(directory / "id_ed25519.pub", directory / "authorized_keys")
    port = free_port()
    host_key = (directory / "host_ed25519.pub").read_text().split()[:2]
    (directory / "known_hosts").write_text(
        f"[127.0.0.1]:{port},[127.0.0.2]:{port} {' '.join(host_key)}\n")
    (directory / "sshd_config").write_text(_sshd_config(directory, port))
    (directory / "ssh_config").write_text(_client_config(directory))
    if os.geteuid() == 0:
        os.makedirs("/run/sshd", exist_ok=True)  # sshd's privilege-separation directory
    log = directory / "sshd.log"
    proc = subprocess.Popen([daemon, "-D", "-e", "-f", str(directory / "sshd_config")],
                            stdout=subprocess.DEVNULL, stderr=log.open("w"))
    server = Sshd(directory, port, proc)
    probe = ["ssh", "-F", str(server.client_config), "-o", "BatchMode=yes", "-p", str(port),
             "127.0.0.2", "true"]
    if not wait_until(lambda: proc.poll() is None and subprocess.run(
            probe, capture_output=True, timeout=10).returncode == 0, timeout_s=10, interval_s=0.2):
        proc.kill()
        pytest.skip(f"sshd did not start or accept the test key: {log.read_text()[-500:]}")
    yield server
    proc.terminate()
    proc.wait(10)


@contextlib.contextmanager
def netlab_for_tests(name: str, *args, skip_reason: str | None = None, **kwargs):
    """A bandwidth.netlab lab for a module's tests (``up(name, *args, **kwargs)``), removed on
    every exit path (and first, after a crash); the tests skip, saying why, where
    the machine cannot make one (``skip_reason``: a reason of the caller's own, checked first)."""
    from bandwidth.netlab import lab as labmod
    from bandwidth.netlab.cli import up
    from bandwidth.netlab.lab import NetlabError

    if not sys.platform.startswith("linux"):
        pytest.skip("the lab needs Linux network namespaces")
    missing = labmod.missing_prerequisites()
    if skip_reason or missing:
        pytest.skip(skip_reason or f"the lab needs {', '.join(missing)}")
    labmod.remove(name)                       # whatever a crashed run left
    try:
        made = up(name, *args, **kwargs)
    except NetlabError as err:
        labmod.remove(name)
        pytest.skip(f"cannot make the lab on this machine: {err}")
    try:
        yield made
    finally:
        labmod.remove(name)
        assert not labmod.namespaces_of(name)


def lab_leftovers(lab, is_daemon=lambda cmd: False) -> list[str]:
    """Processes in a netlab's namespaces other than its sshd daemons (``sshd -D -e -f
    .../sshd_config.I``; a login's session processes do count) and what ``is_daemon`` names."""
    from bandwidth.netlab import lab as labmod

    found = []
    for host in lab.hosts:
        for pid in labmod.pids_in(host.namespace):
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            sshd = " -D " in cmd and "sshd_config." in cmd
            if labmod.alive(pid) and not sshd and not is_daemon(cmd):
                found.append(f"{host.address}: {pid} {cmd[:120]}")
    return found


def host_processes(host, keep) -> list[int]:
    """The processes in a netlab host's namespace whose command line (``/proc/PID/cmdline``, as
    bytes, NUL-separated) ``keep`` takes; one that ends meanwhile is passed over."""
    from bandwidth.netlab import lab as labmod

    found = []
    for pid in labmod.pids_in(host.namespace):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if keep(argv):
            found.append(pid)
    return found


def outputs_of(procs: list[subprocess.Popen], timeout_s: float = 120) -> list[tuple[str, str]]:
    """(stdout, stderr) of every process; any still running after ``timeout_s`` (or when this
    fails) is killed, so that a test leaves none behind."""
    try:
        return [p.communicate(timeout=timeout_s) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


# --- The processes of a job by their marker and role (ps-lite's, the toolkit's).

def pids_with(marker: str, role: str) -> list[int]:
    """The processes whose command line holds ``marker`` and whose environment says
    DMLC_ROLE=``role``."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if marker.encode() not in f.read():
                    continue
            with open(f"/proc/{pid}/environ", "rb") as f:
                if f"DMLC_ROLE={role}".encode() in f.read().split(b"\0"):
                    found.append(int(pid))
        except OSError:
            pass
    return found
