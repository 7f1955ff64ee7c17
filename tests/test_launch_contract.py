"""The environment contract, the forwarding allowlist, the remote guard and mpirun's tagged
output, tested directly (no launch)."""

import subprocess
import sys
import time

import pytest
from launch_support import ROOT, alive, launch_env, marker, wait_until

from bandwidth.errors import ConfigError
from bandwidth.launch.contract.environment import (SCHEDULER, SERVER, WORKER, ContractError, Job,
                                                   Role)
from bandwidth.launch.contract.forwarding import child_environ, is_forwarded, parse_env_flags
from bandwidth.launch.launchers.mpi import MpiChild

JOB = Job(num_workers=3, num_servers=2, master_addr="10.0.0.1", master_port=29500,
          ps_root_port=29500, cluster="ssh")


def test_roles_are_workers_then_servers_then_the_scheduler():
    assert [JOB.role_at(i) for i in range(6)] == [
        (WORKER, 0), (WORKER, 1), (WORKER, 2), (SERVER, 0), (SERVER, 1), (SCHEDULER, 0)]
    with pytest.raises(ContractError):
        JOB.role_at(6)


@pytest.mark.parametrize("index, local", [(1, (0, 2)), (4, (1, 2)), (5, None)])
def test_a_role_survives_the_trip_through_the_environment(index, local):
    role = JOB.role(index, "node2", local)
    assert Role.from_environ(role.to_environ()) == role


def test_the_variables_have_the_documented_values():
    env = JOB.role(4, "node2", (1, 2)).to_environ()
    assert env == {
        "DMLC_ROLE": "server", "DMLC_TASK_ID": "1", "DMLC_NUM_WORKER": "3",
        "DMLC_NUM_SERVER": "2", "DMLC_PS_ROOT_URI": "10.0.0.1", "DMLC_PS_ROOT_PORT": "29500",
        "DMLC_NODE_HOST": "node2", "DMLC_JOB_CLUSTER": "ssh", "MASTER_ADDR": "10.0.0.1",
        "MASTER_PORT": "29500", "WORLD_SIZE": "5", "RANK": "4", "LOCAL_RANK": "1",
        "LOCAL_WORLD_SIZE": "2", "TORCHELASTIC_USE_AGENT_STORE": "True"}
    scheduler = JOB.role(5, "10.0.0.1").to_environ()
    assert scheduler["DMLC_ROLE"] == "scheduler" and "RANK" not in scheduler
    assert JOB.role(4, "node2", (1, 2)).title == "server 1 (rank 4) on node2"


@pytest.mark.parametrize("change, message", [
    ({"DMLC_ROLE": None}, "DMLC_ROLE is not set: start this program with the launcher"),
    ({"DMLC_ROLE": "boss"}, "DMLC_ROLE='boss': expected one of worker, server, scheduler"),
    ({"RANK": "3"}, "RANK=3 does not match DMLC_ROLE=worker DMLC_TASK_ID=1"),
    ({"WORLD_SIZE": "4"}, "WORLD_SIZE=4 but DMLC_NUM_WORKER + DMLC_NUM_SERVER = 5"),
    ({"MASTER_PORT": "x"}, "MASTER_PORT='x' is not a non-negative integer"),
    ({"LOCAL_RANK": "2"}, "LOCAL_RANK=2 is not below LOCAL_WORLD_SIZE=2"),
])
def test_a_broken_environment_names_the_variable(change, message):
    env = JOB.role(1, "node2", (0, 2)).to_environ()
    for name, value in change.items():
        env.pop(name) if value is None else env.__setitem__(name, value)
    with pytest.raises(ContractError) as err:
        Role.from_environ(env)
    assert message in str(err.value)


@pytest.mark.parametrize("name, same_host, forwarded", [
    ("PATH", False, True), ("PYTHONPATH", False, True), ("CUDA_VISIBLE_DEVICES", False, True),
    ("NCCL_IB_DISABLE", False, True), ("NCCL_NVLS_ENABLE", False, True),
    ("TORCH_SYMM_MEM_DISABLE_MULTICAST", False, True), ("GLOO_SOCKET_IFNAME", False, True),
    ("OMP_NUM_THREADS", False, True), ("MKL_NUM_THREADS", False, True),
    ("HOME", False, False), ("HOME", True, True), ("LC_ALL", True, True),
    ("SECRET_TOKEN", True, False), ("AWS_SECRET_ACCESS_KEY", True, False),
    ("GITHUB_TOKEN", True, False), ("NCCL_SOME_API_KEY", False, False),
    ("SSH_AUTH_SOCK", True, False), ("DATABASE_URL", True, False),
])
def test_only_allowlisted_variables_are_forwarded(name, same_host, forwarded):
    assert is_forwarded(name, same_host) is forwarded


def test_env_flags_forward_or_set_and_win_over_the_allowlist():
    pairs = parse_env_flags(["MY_TOKEN", "OMP_NUM_THREADS=2", "EMPTY="],
                            {"MY_TOKEN": "t", "OMP_NUM_THREADS": "8"})
    assert pairs == (("MY_TOKEN", "t"), ("OMP_NUM_THREADS", "2"), ("EMPTY", ""))
    env = child_environ({"OMP_NUM_THREADS": "8", "MY_TOKEN": "t", "OTHER": "o"}, pairs,
                        same_host=False)
    assert env == {"OMP_NUM_THREADS": "2", "MY_TOKEN": "t", "EMPTY": ""}
    with pytest.raises(ConfigError, match="'1BAD' is not a variable name"):
        parse_env_flags(["1BAD=x"], {})


def test_the_guard_stops_the_whole_group_when_its_stdin_closes():
    mark = marker()
    sleeper = f"{sys.executable} -c 'import time; time.sleep(600)' {mark}"
    guard = subprocess.Popen(
        [sys.executable, "-m", "bandwidth.launch.supervision.guard", "--grace", "1", "--", "sh",
         "-c", f"{sleeper} & exec {sleeper}"], stdin=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, cwd=ROOT, env=launch_env())
    assert guard.stderr.readline().startswith("bandwidth-guard: started ")
    # the guard (the marker is in its argv), the background sleeper and the one sh became
    assert wait_until(lambda: len(alive(mark)) == 3, timeout_s=10)
    guard.stdin.close()                     # what a dead launcher or ssh connection looks like
    assert guard.wait(10) == 128 + 15
    assert guard.stderr.read().strip() == "bandwidth-guard: signal SIGTERM"
    assert alive(mark) == []                # the background sleep too


@pytest.mark.parametrize("ending", ["end-of-file", "silence"])
def test_the_guard_ends_what_left_the_group_too(ending):
    """A command that forks into the background and into a session of its own (setsid): both
    end with the guard, whether its stdin closes (a dead launcher, a dropped connection) or only
    falls silent for --quiet seconds (a host cut off: no end-of-file ever comes)."""
    mark = marker()
    sleeper = f"{sys.executable} -c 'import time; time.sleep(600)' {mark}"
    guard = subprocess.Popen(
        [sys.executable, "-m", "bandwidth.launch.supervision.guard", "--grace", "1", "--quiet", "2",
         "--", "sh", "-c", f"{sleeper} & setsid {sleeper} & exec {sleeper}"],
        stdin=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, cwd=ROOT, env=launch_env())
    try:
        assert guard.stderr.readline().startswith("bandwidth-guard: started ")
        assert wait_until(lambda: len(alive(mark)) == 4, timeout_s=10)     # the guard + 3
        began = time.monotonic()
        if ending == "end-of-file":
            guard.stdin.close()
        else:
            for _ in range(4):           # the launcher's beats keep it going...
                time.sleep(1)
                guard.stdin.write("\n")
                guard.stdin.flush()
            began = time.monotonic()     # ...until they stop
            assert guard.poll() is None
        assert guard.wait(15) == 128 + 15
        said = guard.stderr.read()
        if ending == "silence":
            assert "bandwidth-guard: launcher silent 2 s" in said and time.monotonic() - began >= 2
        assert wait_until(lambda: alive(mark) == [], timeout_s=5), alive(mark)
    finally:
        guard.kill()
        guard.wait()


def test_the_guard_passes_the_exit_status_on():
    guard = subprocess.run([sys.executable, "-m", "bandwidth.launch.supervision.guard", "--", "sh",
                            "-c", "echo out; exit 3"], input="", capture_output=True, text=True,
                           cwd=ROOT, env=launch_env(), timeout=30)
    # stdin at end-of-file from the start: the guard may stop the command before it exits
    assert guard.returncode in (3, 128 + 15)


def test_mpirun_tagged_output_is_split_back_per_rank(capsys):
    job = Job(2, 0, "10.0.0.1", 29500, 29500, "mpi")
    child = MpiChild(["mpirun"], {}, [job.role(0, "a", (0, 1)), job.role(1, "b", (0, 1))])
    child.on_line("stderr", "[1,1]<stderr>:err[1,1]<stderr>: [1,1]<stderr>:1[1,1]<stderr>:")
    child.on_line("stderr", "[1,0]<stderr>:zero says hi")
    child.on_line("stderr", "  Process name: [[4562,1],1]")
    child.on_line("stdout", "[1,0]<stdout>:result line")
    assert [list(rank.tail) for rank in child.ranks] == [["zero says hi"], ["err 1"]]
    assert list(child.own) == ["  Process name: [[4562,1],1]"]
    out, err = capsys.readouterr()
    assert out == "result line\n"
    assert "[worker 1@b] err 1\n" in err and "[mpirun]   Process name" in err


def test_the_default_rendezvous_timeout_waits_on_while_ranks_still_join():
    """JoinWatch on a real TCPStore: with the user's --timeout it fails at the timeout; with the
    launcher's default (patient) it waits on while ranks keep joining, and fails once none has
    joined for STALL_S, naming the missing rank and how long it waited."""
    from datetime import timedelta

    from torch.distributed import TCPStore

    from bandwidth.launch.rendezvous import JOINED_COUNT_KEY, JOINED_KEY_PREFIX, JoinWatch
    store = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                     timeout=timedelta(seconds=10))
    labels = [f"worker {r}@h{r}" for r in range(3)]

    def join(rank):
        store.set(f"{JOINED_KEY_PREFIX}{rank}", f"h{rank}")
        store.add(JOINED_COUNT_KEY, 1)

    strict = JoinWatch(store, labels, 10.0, "here")
    patient = JoinWatch(store, labels, 10.0, "here", advice="give --timeout", patient=True)
    join(0)
    assert strict(5.0) is None and patient(5.0) is None
    join(1)                                   # a rank joins at 9 s: still starting up
    assert patient(9.0) is None
    failed = strict(10.0)
    assert failed is not None and "rank 2 (worker 2@h2) never joined" in failed.what
    assert "within 10 s (2 of 3 did)" in failed.what
    assert patient(10.0) is None and patient(9.0 + JoinWatch.STALL_S - 0.5) is None
    stalled = patient(9.0 + JoinWatch.STALL_S)
    assert stalled is not None and "rank 2 (worker 2@h2) never joined" in stalled.what
    assert f"within 29 s, none in the last {JoinWatch.STALL_S:.0f} (2 of 3 did): give --timeout" \
        in stalled.what
    # joining on and on is still bounded: PATIENCE x the timeout
    steady = JoinWatch(store, labels + ["worker 3@h3"], 10.0, "here", patient=True)
    assert steady(1.0) is None
    join(2)
    assert steady(29.0) is None and steady(JoinWatch.PATIENCE * 10.0) is not None


def test_the_scheduler_port_is_free_and_outside_the_ephemeral_range(tmp_path):
    # CI saw ps-lite's scheduler fail "bind failed": its port, picked free seconds before it
    # bound it, came from the range the kernel hands out as source ports of connections.
    import socket

    from bandwidth.launch.rendezvous import _ephemeral_low, free_port
    low = _ephemeral_low()
    ports = {free_port() for _ in range(20)}
    assert all(1024 <= port < low for port in ports), (low, ports)
    assert len(ports) > 1                     # not one fixed port two launches would race for
    with socket.socket() as sock:
        sock.bind(("", ports.pop()))          # free to bind
    ranges = tmp_path / "ip_local_port_range"
    ranges.write_text("40000\t60999\n")
    assert _ephemeral_low(str(ranges)) == 40000
    assert _ephemeral_low(str(tmp_path / "absent")) == 32768
