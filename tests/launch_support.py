"""Helpers for the launcher tests: run launch.py as a user would, find leftover processes, and
a real OpenSSH server on loopback (127.0.0.1 and 127.0.0.2 stand for two hosts)."""

from __future__ import annotations

import contextlib
import getpass
import json
import os
import shutil
import signal
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


# --- Listening sockets of a job, and a stranger at each of them (tests/test_job_listeners.py,
# tests/test_netlab.py).

def socket_inodes(pids) -> set[str]:
    """The inodes of every socket the processes ``pids`` hold."""
    inodes = set()
    for pid in pids:
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
        except OSError:
            continue
    return inodes


def listening(inodes: set[str], table_of: int | str = "self") -> list[tuple[str, int]]:
    """(address, port) of every TCP socket in LISTEN (state 0A) among ``inodes``, from the TCP
    tables of the network namespace of process ``table_of``."""
    found = []
    for table, width in ((f"/proc/{table_of}/net/tcp", 8), (f"/proc/{table_of}/net/tcp6", 32)):
        with open(table) as rows:
            next(rows)
            for row in rows:
                fields = row.split()
                if fields[3] != "0A" or fields[9] not in inodes:
                    continue
                address, port = fields[1].split(":")
                found.append((_address(address, width), int(port, 16)))
    return found


def _address(hexed: str, width: int) -> str:
    import ipaddress
    raw = bytes.fromhex(hexed)
    if width == 8:
        return str(ipaddress.IPv4Address(raw[::-1]))
    words = b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4))
    return str(ipaddress.IPv6Address(words))


def is_loopback(address: str) -> bool:
    import ipaddress
    ip = ipaddress.ip_address(address)
    if getattr(ip, "ipv4_mapped", None):
        ip = ip.ipv4_mapped
    return ip.is_loopback


# A stranger: torch's own store client, from a process that is not the job's, at every listener
# at once (threads), each given STRANGER_S to connect and count the keys.
STRANGER_S = 3
STRANGER = """
import sys, threading
from datetime import timedelta
from torch.distributed import TCPStore
print("ready", flush=True)
def try_one(address, port):
    try:
        store = TCPStore(address, port, is_master=False, timeout=timedelta(seconds=%d))
        print(f"SERVED {address}:{port} {store.num_keys()} keys", flush=True)
    except Exception as err:
        print(f"refused {address}:{port}: {type(err).__name__}", flush=True)
threads = [threading.Thread(target=try_one, args=(a, int(p)), daemon=True) for a, p in
           (w.rsplit(":", 1) for w in sys.argv[1:])]
for t in threads: t.start()
for t in threads: t.join()
""" % STRANGER_S


def strangers_served(probes) -> list[str]:
    """What strangers were served: one stranger per probe ``(listeners, netns, refusals)`` (in
    network namespace ``netns``, or this one), all at once. Returns the ``SERVED address:port N
    keys`` lines, none where the job is closed to them. A listener that is not a store may take
    the connection and never answer: each stranger is stopped STRANGER_S + 3 s after it is
    ready (torch imported), and what it was not served by then, it never got. ``refusals``: at
    least one listener must have refused it (the stranger did try)."""
    import threading

    wildcard = {"0.0.0.0": "127.0.0.1", "::": "::1"}
    runs = []
    for listeners, netns, refusals in probes:
        argv = [sys.executable, "-c", STRANGER] + \
            [f"{wildcard.get(address, address)}:{port}" for address, port in listeners]
        if netns is not None:
            argv = ["ip", "netns", "exec", netns] + argv
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                text=True)
        lines: list[str] = []
        ready = threading.Event()
        ready_at: list[float] = []

        def read(proc=proc, lines=lines, ready=ready, ready_at=ready_at):
            for line in proc.stdout:
                lines.append(line.strip())
                if not ready_at:
                    ready_at.append(time.monotonic())
                ready.set()
            ready.set()

        threading.Thread(target=read, daemon=True).start()
        runs.append((proc, lines, ready, ready_at, refusals))
    served = []
    for proc, lines, ready, ready_at, refusals in runs:
        ready.wait(90)
        try:
            proc.wait(max(0.0, (ready_at or [time.monotonic()])[0] + STRANGER_S + 3
                          - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        answers = "\n".join(lines)
        assert "refused" in answers or not refusals, answers
        served += [a for a in lines if a.startswith("SERVED")]
    return served


def stranger_served(listeners, netns: str | None = None, refusals: bool = True) -> list[str]:
    """strangers_served for one stranger."""
    return strangers_served([(listeners, netns, refusals)])


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


def audit_one_host_job(argv, kind: str, running=lambda line: line.startswith("iter "),
                       also=None) -> list[tuple[str, int]]:
    """Start the job ``argv`` (from the repository root, in a session of its own); once a line
    of its output satisfies ``running``, list every listening socket of it and its descendants,
    and assert that each is on loopback and serves a stranger no key; ``also(listeners)`` checks
    more before the job is stopped (SIGTERM to its group, SIGKILL after 30 s). Returns the
    listeners."""
    job = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, start_new_session=True)
    try:
        for line in job.stdout:                 # mid-run: once the first iteration is printed
            if running(line):
                break
        else:
            raise AssertionError(f"{kind}: no iteration printed (exit {job.wait()})")
        listeners = listening(socket_inodes({job.pid} | descendants(job.pid)))
        public = [(address, port) for address, port in listeners if not is_loopback(address)]
        assert not public, f"{kind} listens beyond loopback: {public}"
        served = stranger_served(listeners)
        assert not served, f"{kind} served a stranger: {served}"
        if also is not None:
            also(listeners)
        return listeners
    finally:
        stop_group(job)
        time.sleep(0.1)


def stop_group(proc: subprocess.Popen) -> None:
    """SIGTERM to the process group of ``proc`` (started in a session of its own), SIGKILL if it
    has not ended within 30 s."""
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
