"""Only the job can join its rendezvous: tested from a real second address of this machine.

A network namespace ``bwi11ns`` joined to this host by a veth pair (``bwi11a`` 198.18.11.1 here,
``bwi11b`` 198.18.11.2 inside; 198.18.0.0/15 is the benchmarking range, reachable from nowhere
else) plays "another machine". The namespace and both ends are removed on every exit path of the
fixture. Skips without root or ``ip``.
"""

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NS, HOST_END, NS_END = "bwi11ns", "bwi11a", "bwi11b"
HOST_ADDR, NS_ADDR = "198.18.11.1", "198.18.11.2"
pytestmark = pytest.mark.timeout(120)


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=20)


def _remove() -> None:
    _ip("netns", "del", NS, check=False)          # takes the veth pair with it
    _ip("link", "del", HOST_END, check=False)


@pytest.fixture(scope="module")
def other_address():
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("needs root and iproute2 to make a network namespace")
    _remove()
    try:
        _ip("netns", "add", NS)
        _ip("link", "add", HOST_END, "type", "veth", "peer", "name", NS_END)
        _ip("link", "set", NS_END, "netns", NS)
        _ip("addr", "add", f"{HOST_ADDR}/30", "dev", HOST_END)
        _ip("link", "set", HOST_END, "up")
        _ip("netns", "exec", NS, "ip", "addr", "add", f"{NS_ADDR}/30", "dev", NS_END)
        _ip("netns", "exec", NS, "ip", "link", "set", NS_END, "up")
        _ip("netns", "exec", NS, "ip", "link", "set", "lo", "up")
    except subprocess.CalledProcessError as err:
        _remove()
        pytest.skip(f"cannot make a network namespace here: {err.stderr.strip()}")
    try:
        yield NS
    finally:
        _remove()


def _from_namespace(code: str) -> subprocess.CompletedProcess:
    """Run Python ``code`` inside the namespace (another address, as another machine would)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run(["ip", "netns", "exec", NS, sys.executable, "-c", code], env=env,
                          capture_output=True, text=True, timeout=60)


def _launch(tmp_path: Path, *args: str) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1")
    out = open(tmp_path / "out", "w")
    err = open(tmp_path / "err", "w")
    return subprocess.Popen([sys.executable, str(ROOT / "launch.py"), *args], cwd=tmp_path,
                            env=env, stdout=out, stderr=err, stdin=subprocess.DEVNULL)


def _wait_for_port(tmp_path: Path, proc: subprocess.Popen) -> int:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        text = (tmp_path / "out").read_text()
        if "port=" in text:
            return int(text.split("port=")[1].split()[0])
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    pytest.fail(f"the job never printed its port: {(tmp_path / 'err').read_text()[-2000:]}")


PRINT_PORT_AND_WAIT = ("import os, time; print('port=' + os.environ['MASTER_PORT'], flush=True); "
                       "time.sleep(20)")
CONNECT = ("import socket, sys\n"
           "try:\n"
           "    socket.create_connection(('{addr}', {port}), timeout=5).close()\n"
           "    print('connected')\n"
           "except OSError as err:\n"
           "    print(type(err).__name__)\n")


def test_a_single_host_rendezvous_is_not_reachable_from_another_address(other_address,
                                                                        tmp_path):
    proc = _launch(tmp_path, "-n", "1", "-s", "0", sys.executable, "-c", PRINT_PORT_AND_WAIT)
    try:
        port = _wait_for_port(tmp_path, proc)
        seen = _from_namespace(CONNECT.format(addr=HOST_ADDR, port=port))
        # control: the namespace does reach this host's address (a listener there answers)
        probe = __import__("socket").create_server((HOST_ADDR, 0))
        control = _from_namespace(CONNECT.format(addr=HOST_ADDR, port=probe.getsockname()[1]))
        probe.close()
    finally:
        proc.kill()
        proc.wait()
    assert control.stdout.strip() == "connected", control.stderr
    assert seen.stdout.strip() == "ConnectionRefusedError", seen.stdout + seen.stderr


JOIN_ONE = ("import os, sys, time\n"
            "from bandwidth.launch.contract.environment import Role, join_store\n"
            "role = Role.from_environ(os.environ)\n"
            "print('port=' + os.environ['MASTER_PORT'], flush=True)\n"
            "if role.rank == 0:\n"
            "    join_store(role, 30)\n"
            "time.sleep(45)\n")
FORGE = ("from datetime import timedelta\n"
         "import torch.distributed as dist\n"
         "try:\n"
         "    s = dist.TCPStore('{addr}', {port}, is_master=False, timeout=timedelta(seconds=5))\n"
         "    print('keys', s.list_keys())\n"
         "    s.add('launch/joined', 5)\n"
         "    s.set('launch/joined/1', 'forged')\n"
         "    print('forged')\n"
         "except Exception as err:\n"
         "    print('refused', type(err).__name__)\n")


def test_a_client_without_the_secret_cannot_forge_a_join(other_address, tmp_path):
    """The job listens on --master-addr (this host's veth address); a client in the namespace
    reaches it but, not knowing the job's secret, is served nothing by the store's gate: it
    cannot list the keys (where the secret used to show), nor forge a join; the launcher still
    names rank 1 in one line at its --timeout (on older code the forged counter switched the
    check off, or the forged join ran the job on until a 62 s store timeout)."""
    # --timeout 20: time for the forger to start (it imports torch) before the watch looks
    proc = _launch(tmp_path, "-n", "2", "-s", "0", "--timeout", "20", "--master-addr", HOST_ADDR,
                   sys.executable, "-c", JOIN_ONE)
    try:
        port = _wait_for_port(tmp_path, proc)
        forged = _from_namespace(FORGE.format(addr=HOST_ADDR, port=port))
        code = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    err = (tmp_path / "err").read_text()
    assert forged.stdout.strip().startswith("refused"), forged.stdout + forged.stderr[-2000:]
    assert code == 1, err[-2000:]
    assert "FAIL: rendezvous: rank 1 (worker 1@127.0.0.1) never joined" in err, err[-2000:]


def test_the_secret_reaches_the_processes_only_through_the_environment(tmp_path):
    code = ("import os, sys, time\n"
            "secret = os.environ['BANDWIDTH_JOB_SECRET']\n"
            "assert len(secret) == 32, secret\n"
            "mine = [p for p in os.listdir('/proc') if p.isdigit()]\n"
            "for pid in mine:\n"
            "    try:\n"
            "        line = open(f'/proc/{pid}/cmdline', 'rb').read()\n"
            "    except OSError:\n"
            "        continue\n"
            "    assert secret.encode() not in line, pid\n"
            "print('ok')\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, str(ROOT / "launch.py"), "-n", "2", "-s", "0",
                           sys.executable, "-c", code], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["ok", "ok"]
