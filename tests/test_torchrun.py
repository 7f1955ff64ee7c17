"""measure.py's distributed modes without launch.py: under the real ``torchrun`` (its agent hosts
the store), and under any launcher that only sets RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT (rank 0
hosts the store: what a Kubernetes pod or a bare ``srun`` gives). CPU devices, Gloo, loopback."""

import json
import os
import re
import shutil
import subprocess
import sys

import pytest
from conftest import ROOT
from launch_support import descendants, outputs_of

from bandwidth.launch.contract.environment import ContractError
from bandwidth.launch.contract.torchenv import role_from_environ, torch_role

TORCHRUN = shutil.which("torchrun")
LENET = ["--network", "lenet", "--image-shape", "1,28,28", "--num-classes", "10",
         "--num-batches", "3", "--disp-batches", "1", "--timeout", "60"]
needs_torchrun = pytest.mark.skipif(TORCHRUN is None, reason="torchrun is not on PATH (it ships "
                                    "with torch: pip install torch)")


def torchrun(nproc: int, *measure_args: str, timeout: float = 150):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    for name in ("DMLC_ROLE", "RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    argv = [TORCHRUN, "--standalone", "--nproc-per-node", str(nproc), "-m",
            "bandwidth.measure", *measure_args]
    return subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout)


def errors(stdout: str) -> list[str]:
    # Ranks share torchrun's stdout: a line's newline may come after another rank's line.
    return re.findall(r"GB/sec per gpu, error (-?\d+\.\d{6})", stdout)


@needs_torchrun
@pytest.mark.timeout(200)
@pytest.mark.parametrize("nproc, mode, servers", [(2, "dist_nccl", None), (4, "dist_sync", 2)])
def test_torchrun_runs_the_distributed_modes_exactly(nproc, mode, servers, tmp_path):
    out = tmp_path / "result.json"
    extra = ["--num-servers", str(servers)] if servers is not None else []
    proc = torchrun(nproc, "--kv-store", mode, "--cpus", "1", *extra, "--json", str(out), *LENET)
    assert proc.returncode == 0, proc.stderr[-3000:]
    workers = nproc - (servers or 0)
    printed = errors(proc.stdout)
    assert len(printed) == 3                           # worker 0's lines
    result = json.loads(out.read_text())["results"][0]
    assert printed == ["0.000000"] * 3                 # float32 sums of integers: exact
    assert [e for w in result["workers"] for e in w["errors"]] == [0.0] * (3 * workers)
    assert result["summary"]["error_max"] == 0.0
    assert proc.stdout.count("# summary:") == 1
    assert f"on each of {workers} workers" in proc.stdout
    assert [w["worker"] for w in result["workers"]] == list(range(workers))


@needs_torchrun
@pytest.mark.timeout(120)
@pytest.mark.parametrize("nproc, args, message", [
    (2, ["--kv-store", "dist_sync", "--num-servers", "2"],
     "--num-servers 2 leaves no worker among WORLD_SIZE=2 ranks: give at most 1"),
    (2, ["--kv-store", "dist_sync"],
     "--kv-store dist_sync needs at least one server (--num-servers 1)"),
])
def test_torchrun_bad_combination_is_one_line(nproc, args, message):
    proc = torchrun(nproc, *args, "--cpus", "1", *LENET, timeout=100)
    assert proc.returncode != 0
    # Every rank says the same one line (torchrun then adds its own report of the exit).
    ours = {line for line in proc.stderr.splitlines() if line.startswith("measure.py")}
    assert len(ours) == 1, proc.stderr[-2000:]
    (line,) = ours
    assert line.startswith(f"measure.py: error: {message}")



@pytest.mark.timeout(120)
@pytest.mark.parametrize("case", ["port held by another program", "address that does not resolve"])
def test_a_store_that_cannot_be_hosted_or_reached_is_one_line_per_rank(case):
    """MASTER_PORT held by a program that takes connections and never answers: rank 0 says the
    port is taken, rank 1 that the store gave no answer within --timeout (torch's client would
    wait on forever); a MASTER_ADDR that does not resolve: each rank says so. One line each,
    no C++ stack, exit 2."""
    import socket

    holder = socket.socket()
    holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    holder.bind(("", 0))
    if case.startswith("port"):
        holder.listen(8)                        # else the port is free, only the name is wrong
    with holder:
        address = "127.0.0.1" if case.startswith("port") else "no-such-host.invalid"
        procs = []
        for rank in (0, 1):
            env = dict(os.environ, PYTHONPATH=str(ROOT), RANK=str(rank), WORLD_SIZE="2",
                       MASTER_ADDR=address, MASTER_PORT=str(holder.getsockname()[1]))
            env.pop("DMLC_ROLE", None)
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "bandwidth.measure", "--kv-store", "dist_nccl", "--cpus",
                 "1", *LENET[:-1], "5"], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, text=True))
        outs = outputs_of(procs, timeout_s=90)   # killed past it: not exit 2
    for rank, (proc, (_, err)) in enumerate(zip(procs, outs)):
        lines = err.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1, (rank, err[-2000:])
        assert lines[0].startswith("measure.py: error: "), lines
        if address == "127.0.0.1":
            assert (f"rank {rank} cannot " + ("host" if rank == 0 else "use")) in lines[0]
            assert ("EADDRINUSE" if rank == 0 else "no answer within 5 s") in lines[0]
        else:
            assert "no-such-host.invalid" in lines[0] and "resolve" in lines[0], lines[0]

@pytest.mark.timeout(150)
def test_rank0_hosts_the_store_without_torchrun(tmp_path):
    """RANK/WORLD_SIZE/MASTER_* alone (no torchrun agent): rank 0 opens the store; rank 1,
    started first, waits for it."""
    import socket

    with socket.socket() as s:                # a free port; rank 0 binds it a moment later
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for rank in (1, 0):
        env = dict(os.environ, PYTHONPATH=str(ROOT), RANK=str(rank), WORLD_SIZE="2",
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        env.pop("DMLC_ROLE", None)
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "bandwidth.measure", "--kv-store", "dist_nccl", "--cpus", "1",
             *LENET], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True))
    outs = outputs_of(procs)
    assert [p.returncode for p in procs] == [0, 0], outs[0][1][-2000:] + outs[1][1][-2000:]
    rank0 = outs[1][0]
    assert rank0.count("# summary:") == 1 and "on each of 2 workers" in rank0
    assert errors(outs[0][0]) == []           # only worker 0 prints its iterations by default
    assert errors(rank0) == ["0.000000"] * 3


def test_roles_from_torchrun_variables():
    env = {"RANK": "3", "WORLD_SIZE": "4", "MASTER_ADDR": "node0", "MASTER_PORT": "29500",
           "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "TORCHELASTIC_USE_AGENT_STORE": "True",
           "TORCHELASTIC_RUN_ID": "abc", "TORCHELASTIC_RESTART_COUNT": "0"}
    role = role_from_environ(env, 2, "node1")
    assert (role.name, role.task_id, role.rank, role.world_size) == ("server", 1, 3, 4)
    assert (role.job.num_workers, role.job.cluster, role.job.store_on_rank0) == (2, "torchrun",
                                                                                 False)
    assert role.job.secret == "bandwidth/abc/0" and role.title == "server 1 (rank 3) on node1"
    worker = torch_role(dict(env, RANK="1"), 2, "node0")
    assert (worker.name, worker.task_id, worker.local_rank) == ("worker", 1, 1)
    plain = torch_role({"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "a", "MASTER_PORT": "1"},
                       0, "a")
    assert plain.job.store_on_rank0 and plain.job.cluster == "env"
    assert (plain.local_rank, plain.local_world_size) == (0, 1)
    assert role_from_environ({}, None, "h") is None
    with pytest.raises(ContractError, match="applies under torchrun"):
        role_from_environ({}, 1, "h")
    with pytest.raises(ContractError, match="RANK=4 is not below WORLD_SIZE=4"):
        torch_role(dict(env, RANK="4"), 0, "h")
    with pytest.raises(ContractError, match="under launch.py the number of servers is"):
        role_from_environ({"DMLC_ROLE": "worker"}, 1, "h")


@needs_torchrun
@pytest.mark.timeout(150)
@pytest.mark.parametrize("cpus", [1, 2])
def test_a_rank_killed_mid_run_ends_the_job_and_leaves_nothing(cpus):
    """SIGKILL to one rank's measure.py under torchrun: torchrun stops the other rank, and every
    process of the job (the ranks' own per-device processes too) is gone. A worker of one CPU
    device is its own rank: it starts no per-device process."""
    import signal
    import time
    from pathlib import Path

    env = dict(os.environ, PYTHONPATH=str(ROOT))
    for name in ("DMLC_ROLE", "RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    proc = subprocess.Popen(
        [TORCHRUN, "--standalone", "--nproc-per-node", "2", "-m", "bandwidth.measure",
         "--kv-store", "dist_nccl", "--cpus", str(cpus), "--network", "lenet", "--image-shape",
         "1,28,28", "--num-classes", "10", "--num-batches", "100000", "--timeout", "60"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 90
        line = ""
        while "iter 2," not in line and time.monotonic() < deadline:   # measuring by now
            line = proc.stdout.readline()
            assert line or proc.poll() is None, proc.stderr.read()[-2000:]
        everyone = descendants(proc.pid)
        ranks = [p for p in everyone if b"bandwidth.measure" in
                 Path(f"/proc/{p}/cmdline").read_bytes()]
        workers = [p for p in everyone if b"bandwidth.execution.rank" in
                   Path(f"/proc/{p}/cmdline").read_bytes()]
        assert len(ranks) == 2 and len(workers) == (0 if cpus == 1 else 4), (ranks, workers)
        os.kill(max(ranks), signal.SIGKILL)
        proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode != 0

    def gone() -> bool:
        return not any(Path(f"/proc/{p}").exists() for p in everyone)

    deadline = time.monotonic() + 15
    while not gone() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert gone(), [p for p in everyone if Path(f"/proc/{p}").exists()]
