"""The ssh launcher against a real OpenSSH server on loopback: 127.0.0.1 and 127.0.0.2 (one
sshd listening on both) stand for two hosts, reached with the test's own key and known_hosts."""

import shutil
import signal
import socket
import time

import pytest
from launch_support import (PYTHON, ROOT, alive, launch, marker, program, records, sshd,
                            start_launch, wait_until)

__all__ = ["sshd"]   # the fixture, imported for pytest


def two_hosts(sshd, tmp_path):
    return sshd.hostfile(tmp_path / "hosts", "# two hosts, one machine", "127.0.0.1:{port}",
                         "127.0.0.2:{port}")


@pytest.mark.timeout(60)
def test_contract_quoting_and_forwarding_through_ssh(sshd, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    tricky = ["two words", "it's", '"double"', "$HOME", "*", "back\\slash", "semi;colon",
              "new\nline", "--env"]
    env = {"SECRET_TOKEN": "hunter2", "FORWARD_ME": "yes please", "NCCL_NVLS_ENABLE": "0",
           "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "HOME_GROWN": "not forwarded"}
    result = launch("-H", two_hosts(sshd, tmp_path), "-n", "3", "-s", "1", *sshd.options(),
                    "--env", "FORWARD_ME", "--env", "SET_ME=it's $set", PYTHON,
                    program("role_env.py"), str(out), *tricky, env=env)
    assert result.returncode == 0, result.stderr
    got = records(out)
    assert sorted(got) == ["server-0", "worker-0", "worker-1", "worker-2"]
    placement = {name: (r["env"]["DMLC_NODE_HOST"], r["env"]["LOCAL_RANK"],
                        r["env"]["LOCAL_WORLD_SIZE"]) for name, r in got.items()}
    assert placement == {"worker-0": ("127.0.0.1", "0", "2"), "worker-1": ("127.0.0.2", "0", "2"),
                         "worker-2": ("127.0.0.1", "1", "2"), "server-0": ("127.0.0.2", "1", "2")}
    for name, record in got.items():
        e = record["env"]
        assert e["DMLC_JOB_CLUSTER"] == "ssh" and e["MASTER_ADDR"] == "127.0.0.1"
        assert e["RANK"] == {"worker-0": "0", "worker-1": "1", "worker-2": "2",
                             "server-0": "3"}[name]
        assert record["argv"] == tricky
        assert record["cwd"] == str(ROOT)
        assert e["FORWARD_ME"] == "yes please" and e["SET_ME"] == "it's $set"
        assert e["NCCL_NVLS_ENABLE"] == "0" and e["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == "1"
        assert "SECRET_TOKEN" not in e and "HOME_GROWN" not in e
        assert "SSH_CONNECTION" in e   # it really came through sshd


@pytest.mark.timeout(60)
def test_gloo_all_reduce_across_the_two_hosts(sshd, tmp_path):
    result = launch("-H", two_hosts(sshd, tmp_path), "-n", "2", "-s", "0", *sshd.options(),
                    PYTHON, program("allreduce.py"), str(tmp_path),
                    env={"GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1"})
    assert result.returncode == 0, result.stderr
    assert sorted(p.read_text() for p in tmp_path.glob("rank-*.txt")) == ["3", "3"]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("how, status, wording", [
    (["--exit", "7"], 7, "exited with status 7"),
    (["--signal", "SIGKILL"], 137, "was killed by SIGKILL"),
])
def test_a_remote_failure_names_the_host_and_leaves_no_remote_process(sshd, tmp_path, how,
                                                                       status, wording):
    mark = marker()
    result = launch("-H", two_hosts(sshd, tmp_path), "-n", "3", "-s", "1", *sshd.options(),
                    PYTHON, program("fail.py"), mark, "--rank", "1", *how, "--spawn")
    assert result.returncode == status, result.stderr
    report = result.stderr[result.stderr.index("FAIL:"):].splitlines()
    assert report[0].startswith(f"FAIL: worker 1 (rank 1) on 127.0.0.2: {wording}")
    assert f"    rank 1 failing on purpose ({mark})" in report
    assert report[-1] == "  stopped 3 running processes"
    assert wait_until(lambda: alive(mark) == [], timeout_s=10), alive(mark)


@pytest.mark.timeout(60)
def test_a_killed_launcher_leaves_no_remote_process(sshd, tmp_path):
    mark = marker()
    proc = start_launch("-H", two_hosts(sshd, tmp_path), "-n", "2", "-s", "0",
                        *sshd.options(), PYTHON, program("fail.py"), mark, "--rank", "-1",
                        "--spawn")
    try:
        # per process: its ssh client, the guard, fail.py and its helper, + the launcher
        assert wait_until(lambda: len(alive(mark)) == 9, timeout_s=30), alive(mark)
        proc.send_signal(signal.SIGKILL)    # no chance to clean up: the guards must
        proc.wait(10)
    finally:
        proc.kill()
    assert wait_until(lambda: alive(mark) == [], timeout_s=15), alive(mark)


@pytest.mark.timeout(60)
def test_an_unreachable_host_times_out_with_one_line(sshd, tmp_path):
    mark = marker()
    # A listener that accepts but never sends the SSH banner: a real connect timeout, on loopback.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        hosts = sshd.hostfile(tmp_path / "hosts", "127.0.0.2:{port}",
                              f"127.0.0.1:{silent.getsockname()[1]}")
        start = time.monotonic()
        started = tmp_path / "worker-0-started"
        result = launch("-H", hosts, "-n", "2", "-s", "0", "--timeout", "2", *sshd.options(),
                        PYTHON, "-c", "import pathlib, sys, time; "
                        "pathlib.Path(sys.argv[1]).touch(); time.sleep(60)", str(started), mark)
        elapsed = time.monotonic() - start
    assert result.returncode == 255
    assert result.stderr.count("FAIL:") == 1
    report = result.stderr[result.stderr.index("FAIL:"):].splitlines()
    assert report[0] == "FAIL: 127.0.0.1: connection timed out after 2 s"
    assert any(line.startswith("  while starting worker 1@127.0.0.1, after ") for line in report)
    assert "  stopped 1 running process" in report      # worker 0 on the reachable host
    assert elapsed < 15
    assert started.exists()            # the reachable host's process ran, and was stopped:
    assert wait_until(lambda: alive(mark) == [], timeout_s=10), alive(mark)


@pytest.mark.timeout(30)
def test_a_closed_port_is_connection_refused(sshd, tmp_path):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]   # bound, never listening: connections are refused
        hosts = sshd.hostfile(tmp_path / "hosts", f"127.0.0.1:{closed}")
        result = launch("-H", hosts, "-n", "1", "-s", "0", "--timeout", "5", *sshd.options(),
                        PYTHON, "-c", "pass")
    assert result.returncode == 255
    assert f"FAIL: 127.0.0.1: connection refused (is sshd listening on port {closed}?)" \
        in result.stderr


@pytest.mark.timeout(60)
@pytest.mark.skipif(shutil.which("rsync") is None, reason="rsync is not installed")
def test_sync_dst_dir_with_fewer_hosts_than_processes(sshd, tmp_path):
    # MXNet #17470: launch.py hung after rsync when there were fewer hosts than workers.
    src, dst, out = tmp_path / "src", tmp_path / "dst", tmp_path / "out"
    src.mkdir()
    out.mkdir()
    (src / "job.py").write_text("import os, pathlib, sys\n"
                                "pathlib.Path(sys.argv[1], os.environ['RANK']).write_text("
                                "os.getcwd() + ' ' + open('data.txt').read())\n")
    (src / "data.txt").write_text("copied")
    hosts = sshd.hostfile(tmp_path / "hosts", "127.0.0.2:{port}")
    result = launch("-H", hosts, "-n", "3", "-s", "1", "--sync-dst-dir", str(dst),
                    *sshd.options(), PYTHON, "job.py", str(out), cwd=src)
    assert result.returncode == 0, result.stderr
    assert (dst / "job.py").exists()
    assert {p.name: p.read_text() for p in out.iterdir()} == {
        str(r): f"{dst} copied" for r in range(4)}


def test_host_key_checking_cannot_be_turned_off(sshd, tmp_path):
    result = launch("-H", two_hosts(sshd, tmp_path), "-n", "1", "--ssh-option",
                    "StrictHostKeyChecking=no", "true")
    assert result.returncode == 2
    assert "the launcher keeps host-key checking on" in result.stderr


@pytest.mark.timeout(30)
def test_an_unknown_host_key_fails_instead_of_being_accepted(sshd, tmp_path):
    (tmp_path / "empty_known_hosts").write_text("")
    result = launch("-H", two_hosts(sshd, tmp_path), "-n", "1", "-s", "0", *sshd.options(),
                    "--ssh-option", f"UserKnownHostsFile={tmp_path / 'empty_known_hosts'}",
                    PYTHON, "-c", "pass")
    assert result.returncode == 255
    assert "FAIL: 127.0.0.1: host key verification failed" in result.stderr


@pytest.mark.timeout(30)
def test_a_remote_start_failure_is_not_mistaken_for_a_connection_failure(sshd, tmp_path):
    result = launch("-H", two_hosts(sshd, tmp_path), "-n", "1", "-s", "0", *sshd.options(),
                    "--env", "PATH=/nonexistent", "python3", "-c", "pass")
    assert result.returncode == 127
    # The guard (started by the login's python3) reports that the command's python3 is not on
    # the forwarded PATH; the environment comes on stdin, so no `env` runs on the remote side.
    assert ("FAIL: worker 0 (rank 0) on 127.0.0.1: did not start: cannot run 'python3': No such "
            "file or directory") in result.stderr
    assert "python3" in result.stderr.splitlines()[-1]
