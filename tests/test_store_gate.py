"""The job's stores refuse strangers (bandwidth.launch.contract.storegate), tested from a stranger's
side with real sockets. The gate is hosted here, in the test process; each stranger is a process of
its own that is no descendant of this one (started with ``setsid -f``, so it is re-parented away),
as another user's program on this host would be."""

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bandwidth.launch.rendezvous import open_store
from bandwidth.launch.contract.storegate import HANDSHAKE_S, MAGIC, connect

ROOT = Path(__file__).resolve().parent.parent
SECRET = "0123456789abcdef" * 2
pytestmark = [pytest.mark.timeout(240),
              pytest.mark.skipif(shutil.which("setsid") is None, reason="needs setsid")]


def _stranger(code: str, tmp_path: Path, timeout_s: float = 150) -> str:
    """Run ``code`` as a process that is not below this one; its output."""
    out = tmp_path / f"stranger-{time.monotonic_ns()}"
    script = f"{code}\nimport pathlib\npathlib.Path({str(out)!r} + '.done').touch()\n"
    with open(out, "w") as sink:
        subprocess.run(["setsid", "-f", sys.executable, "-c", script], stdout=sink,
                       stderr=subprocess.STDOUT, env=dict(os.environ, PYTHONPATH=str(ROOT)),
                       check=True, timeout=30)
    deadline = time.monotonic() + timeout_s
    while not Path(f"{out}.done").exists():
        assert time.monotonic() < deadline, out.read_text()[-2000:]
        time.sleep(0.1)
    return out.read_text()


@pytest.fixture
def hosted():
    store = open_store(0, 30, "127.0.0.1", SECRET)
    store.store.set("job/key", "private")
    try:
        yield store
    finally:
        store.close()


TORCH_CLIENT = ("from datetime import timedelta\n"
                "import torch.distributed as dist\n"
                "try:\n"
                "    s = dist.TCPStore('127.0.0.1', {port}, is_master=False,\n"
                "                      timeout=timedelta(seconds=3))\n"
                "except Exception as err:\n"
                "    print('refused', type(err).__name__)\n"
                "else:\n"
                "    for op in (s.list_keys, lambda: s.get('job/key'), lambda: s.set('x', '1'),\n"
                "               lambda: s.delete_key('job/key')):\n"
                "        try:\n"
                "            print('served', op())\n"
                "        except Exception as err:\n"
                "            print('refused', type(err).__name__)\n")


def test_a_stranger_cannot_list_read_write_or_delete_keys(hosted, tmp_path):
    seen = _stranger(TORCH_CLIENT.format(port=hosted.port), tmp_path)
    assert "served" not in seen and "refused" in seen, seen
    assert hosted.store.list_keys() == ["job/key"]
    assert hosted.store.get("job/key") == b"private"


WRONG_ANSWER = ("import socket\n"
                "s = socket.create_connection(('127.0.0.1', {port}), timeout=10)\n"
                "s.sendall({magic!r})\n"
                "challenge = s.recv(16)\n"
                "s.sendall(b'\\0' * 32)\n"
                "s.sendall(bytes([1]) + b'\\0' * 64)   # whatever a request would be\n"
                "print('answer', s.recv(100))\n")


def test_a_wrong_answer_to_the_challenge_is_closed_before_any_request(hosted, tmp_path):
    seen = _stranger(WRONG_ANSWER.format(port=hosted.port, magic=MAGIC), tmp_path)
    assert seen.strip() == "answer b''", seen
    assert hosted.store.list_keys() == ["job/key"]


def test_the_secret_is_what_opens_the_gate(hosted, tmp_path):
    """The control: a stranger process that knows the secret is served."""
    code = ("from bandwidth.launch.contract.storegate import connect\n"
            f"s = connect('127.0.0.1', {hosted.port}, {SECRET!r}, 10)\n"
            "print('got', s.get('job/key'))\n")
    assert _stranger(code, tmp_path).strip() == "got b'private'"


def test_a_silent_stranger_stalls_nobody(hosted):
    silent = socket.create_connection(("127.0.0.1", hosted.port))
    try:
        client = connect("127.0.0.1", hosted.port, SECRET, 10)
        assert client.get("job/key") == b"private"
        silent.settimeout(HANDSHAKE_S + 10)
        assert silent.recv(10) == b""            # closed by the gate after its deadline
    finally:
        silent.close()


@pytest.mark.parametrize("open_store", [False, True])
def test_a_program_opening_the_store_from_elsewhere_needs_open_store(open_store):
    """A process that opens the store itself (init_method env://) and is no process the launcher
    started on its host (as on another host): refused behind the gate, with one hint from the
    launcher; served with --open-store. (A refused client tries to connect for all of its
    timeout: 8 s, where the served one may take 30 on a loaded machine.)"""
    argv = [sys.executable, str(ROOT / "launch.py"), "-n", "1", "-s", "0", "--timeout", "120",
            *(["--open-store"] if open_store else []), sys.executable,
            str(ROOT / "tests" / "launch_programs" / "env_stranger.py"),
            "30" if open_store else "8"]
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=200)
    assert proc.returncode == 0, proc.stderr[-2000:]
    hints = [line for line in proc.stderr.splitlines() if "does not answer the gate's" in line]
    if open_store:
        assert proc.stdout.strip() == "served 1" and not hints, proc.stdout + proc.stderr
    else:
        assert proc.stdout.strip().startswith("refused"), proc.stdout + proc.stderr
        assert len(hints) == 1 and "--open-store" in hints[0], proc.stderr


def test_a_connection_is_told_apart_from_an_older_one_of_the_same_port():
    """Where connections come and go (a 55-process job beside this one), a port's earlier
    connection lingers in TIME_WAIT (inode 0) beside the new one: the relay judged the peer by
    that entry and refused its own process. Now both ends of the entry must match."""
    from bandwidth.launch.contract.storegate import from_this_process

    listeners = []
    for _ in range(2):
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(4)
        listeners.append(listener)
    client = socket.socket()
    client.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    client.bind(("127.0.0.1", 0))
    port = client.getsockname()[1]
    client.connect(listeners[0].getsockname())
    first, _ = listeners[0].accept()
    client.close()                      # this side closes first: its end lingers in TIME_WAIT
    first.close()
    time.sleep(0.2)
    again = socket.socket()
    again.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    again.bind(("127.0.0.1", port))     # the same port, to the other listener
    again.connect(listeners[1].getsockname())
    second, _ = listeners[1].accept()
    try:
        table = Path("/proc/net/tcp").read_text()
        assert f"0100007F:{port:04X}" in table and " 06 " in table      # the TIME_WAIT entry
        assert from_this_process(second)
    finally:
        for sock in (again, second, *listeners):
            sock.close()


@pytest.mark.timeout(120)
def test_the_launchers_own_open_file_limit_is_named_not_a_worker():
    """A program holding hundreds of connections to the job's store port of a launcher whose
    open-file limit is 256: one FAIL line names the launcher's limit (was: a worker blamed,
    "Exception raised from recvBytes", and hundreds of stderr lines)."""
    import resource

    from launch_support import PYTHON, ROOT, launch_env, program

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]

    def low_limit():
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, resource.getrlimit(
            resource.RLIMIT_NOFILE)[1]))

    proc = subprocess.Popen([PYTHON, str(ROOT / "launch.py"), "-n", "2", "-s", "0", "--port",
                             str(port), "--launcher", "local", PYTHON, program("beat.py"), "600"],
                            cwd=ROOT, env=launch_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=low_limit)
    held = []
    try:
        joined = 0
        while joined < 2:                   # the job runs; then the stranger comes
            line = proc.stderr.readline()
            assert line, "the job ended before it ran"
            joined += " joined " in line
        for _ in range(400):
            with contextlib.suppress(OSError):
                held.append(socket.create_connection(("127.0.0.1", port), timeout=2))
        _, err = proc.communicate(timeout=60)
    finally:
        for sock in held:
            sock.close()
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, err
    fail = next(line for line in err.splitlines() if line.startswith("FAIL:"))
    assert fail.startswith("FAIL: launcher: the launcher ran out of open files (its limit, "
                           "ulimit -n, is 256)"), err[-2000:]
    assert "Traceback" not in err
