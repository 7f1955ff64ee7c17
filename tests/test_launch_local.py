"""The local launcher, end to end: the contract every child sees, a Gloo all-reduce through the
launcher's rendezvous, many processes, and the failure paths (a failing or killed child, a taken
port, Ctrl-C, a rank that never joins), each bounded in time and leaving no process behind."""

import os
import signal
import socket
import subprocess
import time

import pytest
from launch_support import (PYTHON, ROOT, alive, launch, launch_env, marker, program, records,
                            start_launch, wait_until)

from bandwidth.launch.planning.config import LaunchConfig
from bandwidth.launch.driver import run
from bandwidth.launch.supervision.supervisor import LaunchFailed

SECRETS = {"SECRET_TOKEN": "hunter2", "AWS_SECRET_ACCESS_KEY": "x", "MY_PRIVATE_THING": "y",
           "NCCL_API_TOKEN": "z"}


@pytest.mark.timeout(60)
def test_every_child_sees_the_contract_and_only_forwarded_variables(tmp_path):
    env = dict(SECRETS, FORWARD_ME="from launcher", NCCL_NVLS_ENABLE="0",
               TORCH_SYMM_MEM_DISABLE_MULTICAST="1", GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1")
    result = launch("-n", "3", "-s", "2", "--env", "FORWARD_ME", "--env", "SET_ME=a b=c",
                    "--env", "MY_PRIVATE_THING", PYTHON, program("role_env.py"), str(tmp_path),
                    "--env", "X", "-n", "9", env=env)
    assert result.returncode == 0, result.stderr
    got = records(tmp_path)
    assert sorted(got) == ["server-0", "server-1", "worker-0", "worker-1", "worker-2"]
    ports = {r["env"]["MASTER_PORT"] for r in got.values()}
    assert len(ports) == 1
    for name, record in got.items():
        role, task = name.split("-")
        e = record["env"]
        rank = int(task) + (3 if role == "server" else 0)
        assert (e["DMLC_ROLE"], e["DMLC_TASK_ID"], e["RANK"]) == (role, task, str(rank))
        assert (e["DMLC_NUM_WORKER"], e["DMLC_NUM_SERVER"], e["WORLD_SIZE"]) == ("3", "2", "5")
        assert (e["LOCAL_RANK"], e["LOCAL_WORLD_SIZE"]) == (str(rank), "5")
        assert e["MASTER_ADDR"] == e["DMLC_PS_ROOT_URI"] == e["DMLC_NODE_HOST"] == "127.0.0.1"
        assert e["DMLC_PS_ROOT_PORT"] == e["MASTER_PORT"]
        assert e["DMLC_JOB_CLUSTER"] == "local"
        # the user's flags after the command are the command's, never the launcher's
        assert record["argv"] == ["--env", "X", "-n", "9"]
        assert record["cwd"] == str(ROOT)
        # forwarded: the allowlist, --env NAME and --env NAME=VALUE (even a credential-like
        # name, because the user named it); never anything else
        assert e["FORWARD_ME"] == "from launcher" and e["SET_ME"] == "a b=c"
        assert e["MY_PRIVATE_THING"] == "y"
        assert e["NCCL_NVLS_ENABLE"] == "0" and e["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == "1"
        assert e["PYTHONPATH"] == str(ROOT) and e["OMP_NUM_THREADS"] == "1"
        assert not {"SECRET_TOKEN", "AWS_SECRET_ACCESS_KEY", "NCCL_API_TOKEN"} & set(e)



@pytest.mark.timeout(60)
def test_processes_sharing_a_host_get_one_thread_unless_told(tmp_path):
    """Several processes on one host each get OMP_NUM_THREADS = the cores over the processes on
    the most crowded host, at least 1, when neither the launcher's environment nor --env sets
    it; a value the user gives is kept."""
    import os
    from bandwidth.launch.planning.plan import one_thread_where_crowded

    env = {k: v for k, v in launch_env().items() if k != "OMP_NUM_THREADS"}
    result = launch("-n", "2", "-s", "1", PYTHON, program("role_env.py"), str(tmp_path), env=env)
    assert result.returncode == 0, result.stderr
    got = records(tmp_path)
    want = str(max(1, os.cpu_count() // 3))
    assert len(got) == 3 and all(r["env"]["OMP_NUM_THREADS"] == want for r in got.values())
    given = tmp_path / "given"
    given.mkdir()
    result = launch("-n", "2", "-s", "0", "--env", "OMP_NUM_THREADS=3", PYTHON,
                    program("role_env.py"), str(given), env=env)
    assert result.returncode == 0, result.stderr
    assert [r["env"]["OMP_NUM_THREADS"] for r in records(given).values()] == ["3", "3"]
    # one process per host: nothing is set
    assert one_thread_where_crowded({}, (), ["a", "b"]) == {}
    assert one_thread_where_crowded({}, (), ["a"] * 3 + ["b"], cores=16) == \
        {"OMP_NUM_THREADS": "5"}
    assert one_thread_where_crowded({}, (), ["a"] * 3, cores=2) == {"OMP_NUM_THREADS": "1"}
    assert one_thread_where_crowded({"OMP_NUM_THREADS": "8"}, (), ["a", "a"]) == \
        {"OMP_NUM_THREADS": "8"}

@pytest.mark.timeout(90)
def test_gloo_all_reduce_over_4_workers_and_2_servers_through_the_rendezvous(tmp_path):
    result = launch("-n", "4", "-s", "2", PYTHON, program("allreduce.py"), str(tmp_path),
                    env={"GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1"}, timeout=80)
    assert result.returncode == 0, result.stderr
    sums = {p.name: p.read_text() for p in tmp_path.glob("rank-*.txt")}
    assert sums == {f"rank-{r}.txt": "21" for r in range(6)}   # 1 + 2 + ... + 6


@pytest.mark.timeout(60)
def test_env_init_method_joins_the_launchers_store(tmp_path):
    # TORCHELASTIC_USE_AGENT_STORE=True: rank 0 must not try to host a store on MASTER_PORT
    result = launch("-n", "1", "-s", "1", PYTHON, program("allreduce.py"), str(tmp_path), "env",
                    env={"GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1"})
    assert result.returncode == 0, result.stderr
    assert sorted(p.read_text() for p in tmp_path.glob("rank-*.txt")) == ["3", "3"]


@pytest.mark.timeout(60)
def test_16_workers_and_4_servers_finish(tmp_path):
    result = launch("-n", "16", "-s", "4", PYTHON, program("role_env.py"), str(tmp_path))
    assert result.returncode == 0, result.stderr
    ranks = sorted(int(r["env"]["RANK"]) for r in records(tmp_path).values())
    assert ranks == list(range(20))


@pytest.mark.timeout(60)
def test_zero_servers_and_a_scheduler_on_its_own_port(tmp_path):
    result = launch("-n", "2", "-s", "0", "--scheduler", PYTHON, program("role_env.py"),
                    str(tmp_path))
    assert result.returncode == 0, result.stderr
    got = records(tmp_path)
    assert sorted(got) == ["scheduler-0", "worker-0", "worker-1"]
    scheduler = got["scheduler-0"]["env"]
    assert scheduler["DMLC_ROLE"] == "scheduler" and scheduler["WORLD_SIZE"] == "2"
    assert "RANK" not in scheduler and "LOCAL_RANK" not in scheduler
    assert scheduler["DMLC_PS_ROOT_PORT"] != scheduler["MASTER_PORT"]
    assert got["worker-1"]["env"]["DMLC_PS_ROOT_PORT"] == scheduler["DMLC_PS_ROOT_PORT"]


@pytest.mark.timeout(60)
def test_a_failing_worker_stops_the_rest_with_one_report_and_no_orphans():
    mark = marker()
    start = time.monotonic()
    result = launch("-n", "3", "-s", "2", PYTHON, program("fail.py"), mark, "--rank", "1",
                    "--exit", "3", "--spawn")
    assert result.returncode == 3
    assert time.monotonic() - start < 20
    report = result.stderr[result.stderr.index("FAIL:"):].splitlines()
    assert report[0].startswith("FAIL: worker 1 (rank 1) on 127.0.0.1: exited with status 3")
    assert report[1] == "  then: no other process failed"
    assert report[2] == "  last stderr lines of worker 1@127.0.0.1:"
    assert report[3:5] == ["    about to fail: first line",
                           f"    rank 1 failing on purpose ({mark})"]
    assert report[-1] == "  stopped 4 running processes"
    assert result.stderr.count("FAIL:") == 1
    assert f"[worker 1@127.0.0.1] rank 1 failing on purpose ({mark})" in result.stderr
    assert alive(mark) == []     # the sleepers and every helper they spawned


@pytest.mark.timeout(60)
def test_a_child_killed_by_a_signal_is_named_with_the_signal():
    mark = marker()
    result = launch("-n", "2", "-s", "1", PYTHON, program("fail.py"), mark, "--rank", "2",
                    "--signal", "SIGKILL")
    assert result.returncode == 128 + 9
    assert "FAIL: server 0 (rank 2) on 127.0.0.1: was killed by SIGKILL" in result.stderr
    assert alive(mark) == []


@pytest.mark.timeout(30)
@pytest.mark.parametrize("chatty", ["sh", "measure.py"])
def test_into_a_closed_pipe_the_launcher_ends_quietly_with_141(tmp_path, chatty):
    """launch.py ... | head -1 with its reader gone: the process that met the closed pipe (a
    shell killed by SIGPIPE, measure.py's 141) is no fault to report; the rest of the job is
    stopped, nothing is printed and the status is 141, as measure.py's (was: a FAIL report)."""
    mark = marker()
    command = {"sh": ["sh", "-c", f"while :; do echo {mark}; sleep 0.1; done"],
               "measure.py": [PYTHON, "bandwidth/measure.py", "--kv-store", "dist_sync",
                              "--cpus", "1", "--network", "mlp", "--num-batches", "1000"]}[chatty]
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        proc = subprocess.run([PYTHON, str(ROOT / "launch.py"), "-n", "2", "-s", "1",
                               "--launcher", "local", *command], cwd=ROOT, env=launch_env(),
                              stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(write_end)
    assert (proc.returncode, proc.stderr) == (141, "")
    assert wait_until(lambda: alive(mark) == [], timeout_s=10)


def test_a_port_in_use_is_one_clear_line_and_status_2():
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = launch("-n", "1", "--port", str(port), PYTHON, "-c", "pass")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"launch.py: error: --port {port}: the port is already in use on this host; choose "
        "another --port, or leave it out to take a free one"]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_or_sigterm_to_the_launcher_stops_everything(sig):
    mark = marker()
    proc = start_launch("-n", "2", "-s", "2", PYTHON, program("fail.py"), mark, "--rank", "-1",
                        "--spawn")
    try:
        # the launcher, 4 children and their 4 helpers carry the marker
        assert wait_until(lambda: len(alive(mark)) == 9, timeout_s=30), "children did not start"
        proc.send_signal(sig)
        _, stderr = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 128 + sig
    assert f"FAIL: launcher: interrupted by {sig.name}" in stderr
    assert "stopped 4 running processes" in stderr
    assert alive(mark) == []


@pytest.mark.timeout(60)
def test_a_rank_that_never_joins_the_rendezvous_is_named_at_the_timeout(tmp_path):
    start = time.monotonic()
    result = launch("-n", "2", "-s", "0", "--timeout", "6", PYTHON, program("allreduce.py"),
                    str(tmp_path), "--skip-rank", "1", env={"GLOO_SOCKET_IFNAME": "lo"})
    assert result.returncode == 1
    assert time.monotonic() - start < 30
    assert ("FAIL: rendezvous: rank 1 (worker 1@127.0.0.1) never joined the TCPStore at "
            "127.0.0.1:") in result.stderr
    assert "within 6 s (1 of 2 did): raise launch.py --timeout" in result.stderr


@pytest.mark.parametrize("args, message", [
    (["-n", "2", "--env", "NOT_SET_ANYWHERE_42", "true"],
     "--env NOT_SET_ANYWHERE_42: NOT_SET_ANYWHERE_42 is not set in the launcher's environment"),
    (["-n", "2", "--env", "RANK=3", "true"], "RANK is set by the launcher"),
    (["-n", "2", "--launcher", "ssh", "true"], "--launcher ssh needs a hosts file"),
    (["-n", "2", "--sync-dst-dir", "/tmp/x", "true"], "--sync-dst-dir copies files over ssh"),
    (["-n", "2", "-s", "-1", "true"], "-s -1: the number of servers cannot be negative"),
    (["-n", "2"], "no command given"),
    (["-n", "two", "true"], "argument -n/--num-workers: invalid int value: 'two'"),
    (["-n", "1", "--launcher", "yarn", "true"], "argument --launcher: invalid choice: 'yarn'"),
])
def test_bad_input_is_one_line_and_status_2(args, message):
    result = launch(*args)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], result.stderr


def test_local_launcher_refuses_a_hosts_file(tmp_path):
    (tmp_path / "hosts").write_text("127.0.0.1\n")
    result = launch("-H", str(tmp_path / "hosts"), "--launcher", "local", "-n", "1", "true")
    assert result.returncode == 2
    assert "--launcher local runs every process on this host: drop -H" in result.stderr


@pytest.mark.timeout(60)
def test_run_works_without_the_command_line(tmp_path):
    run(LaunchConfig(command=(PYTHON, program("role_env.py"), str(tmp_path)), num_workers=2),
        launch_env())
    assert sorted(records(tmp_path)) == ["server-0", "server-1", "worker-0", "worker-1"]
    mark = marker()
    with pytest.raises(LaunchFailed) as err:
        run(LaunchConfig(command=(PYTHON, program("fail.py"), mark, "--rank", "0", "--exit", "4",
                                  "--after", "0"), num_workers=1, num_servers=0), launch_env())
    assert err.value.exit_code == 4
    assert str(err.value).startswith("FAIL: worker 0 (rank 0) on 127.0.0.1: exited with status 4")
