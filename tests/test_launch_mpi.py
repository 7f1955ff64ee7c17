"""The mpi launcher with a real Open MPI mpirun on this host."""

import json
import shutil
import time

import pytest
from launch_support import PYTHON, alive, launch, marker, program, records

from bandwidth.launch.contract.environment import ContractError
from bandwidth.launch.launchers.mpirole import environ_for

pytestmark = pytest.mark.skipif(shutil.which("mpirun") is None,
                                reason="Open MPI's mpirun is not installed (apt-get install "
                                "openmpi-bin; .ci/run does this when run as root)")


@pytest.mark.timeout(60)
def test_every_mpi_process_gets_its_role_from_its_mpi_rank(tmp_path):
    (tmp_path / "hosts").write_text("127.0.0.1 slots=8\n")
    out = tmp_path / "out"
    out.mkdir()
    result = launch("-H", str(tmp_path / "hosts"), "--launcher", "mpi", "-n", "2", "-s", "1",
                    "--scheduler", "--env", "SET_ME=a b", "--report", str(tmp_path / "r.json"),
                    PYTHON, program("role_env.py"), str(out), "two words",
                    env={"SECRET_TOKEN": "hunter2"})
    assert result.returncode == 0, result.stderr
    assert "bandwidth-role:" not in result.stderr          # the wrappers' words are taken out
    ends = [(p["role"], p["rank"], p["status"], p["failed"], type(p["pid"]))
            for p in json.loads((tmp_path / "r.json").read_text())["processes"]]
    assert ends == [("worker", 0, 0, False, int), ("worker", 1, 0, False, int),
                    ("server", 2, 0, False, int), ("scheduler", None, 0, False, int)]
    got = records(out)
    assert sorted(got) == ["scheduler-0", "server-0", "worker-0", "worker-1"]
    for name, rank in (("worker-0", "0"), ("worker-1", "1"), ("server-0", "2")):
        e = got[name]["env"]
        assert e["RANK"] == rank and e["LOCAL_RANK"] == rank and e["LOCAL_WORLD_SIZE"] == "3"
        assert e["OMPI_COMM_WORLD_RANK"] == rank
    scheduler = got["scheduler-0"]["env"]
    assert scheduler["OMPI_COMM_WORLD_RANK"] == "3" and "RANK" not in scheduler
    assert scheduler["DMLC_PS_ROOT_PORT"] != scheduler["MASTER_PORT"]
    for record in got.values():
        e = record["env"]
        assert e["DMLC_JOB_CLUSTER"] == "mpi" and e["WORLD_SIZE"] == "3"
        assert e["DMLC_NODE_HOST"] == "127.0.0.1" and e["SET_ME"] == "a b"
        assert "SECRET_TOKEN" not in e
        assert record["argv"] == ["two words"]


@pytest.mark.timeout(60)
def test_a_failing_rank_ends_the_job_and_is_named():
    mark = marker()
    result = launch("--launcher", "mpi", "-n", "2", "-s", "1", PYTHON, program("fail.py"), mark,
                    "--rank", "1", "--exit", "5")
    assert result.returncode == 5, result.stderr
    report = result.stderr[result.stderr.index("FAIL:"):].splitlines()
    assert report[0].startswith("FAIL: worker 1 (rank 1) on 127.0.0.1: exited with status 5")
    assert f"    rank 1 failing on purpose ({mark})" in report
    assert alive(mark) == []


@pytest.mark.timeout(60)
def test_a_rank_killed_by_a_signal_is_named():
    mark = marker()
    result = launch("--launcher", "mpi", "-n", "1", "-s", "1", PYTHON, program("fail.py"), mark,
                    "--rank", "1", "--signal", "SIGKILL")
    assert result.returncode == 137, result.stderr
    assert "FAIL: server 0 (rank 1) on 127.0.0.1: was killed by SIGKILL" in result.stderr
    assert alive(mark) == []


def test_mpirole_refuses_a_placement_that_differs_from_mpiruns():
    environ = {"DMLC_NUM_WORKER": "2", "DMLC_NUM_SERVER": "0", "MASTER_ADDR": "10.0.0.1",
               "MASTER_PORT": "5000", "DMLC_PS_ROOT_URI": "10.0.0.1",
               "DMLC_PS_ROOT_PORT": "5000", "DMLC_JOB_CLUSTER": "mpi", "WORLD_SIZE": "2"}
    env = environ_for(1, 2, ["a", "b"], environ, (0, 1))
    assert (env["DMLC_ROLE"], env["RANK"], env["DMLC_NODE_HOST"]) == ("worker", "1", "b")
    with pytest.raises(ContractError, match="mpirun placed process 1 as local rank 1 of 2"):
        environ_for(1, 2, ["a", "b"], environ, (1, 2))   # both landed on one machine


def test_a_hosts_file_port_is_refused_in_one_line(tmp_path):
    (tmp_path / "hosts").write_text("127.0.0.1 slots=2\n127.0.0.2:2222\n")
    result = launch("-H", str(tmp_path / "hosts"), "--launcher", "mpi", "-n", "2", "-s", "0",
                    PYTHON, "-c", "pass")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "launch.py: error: --launcher mpi cannot reach 127.0.0.2:2222 of the hosts file: mpirun "
        "takes no per-host ssh port; list the host without it and put 'Port 2222' under "
        "'Host 127.0.0.2' in ~/.ssh/config, or use --launcher ssh"]


@pytest.mark.timeout(60)
def test_an_unreachable_host_is_named_from_ssh_s_error(tmp_path):
    # mpirun starts its daemon on the host over ssh, which cannot resolve the name; the
    # report names the whole name (orte_keep_fqdn_hostnames: not shortened to 'nohost').
    mark = marker()
    (tmp_path / "hosts").write_text("nohost.invalid\n")
    start = time.monotonic()
    result = launch("-H", str(tmp_path / "hosts"), "--launcher", "mpi", "-n", "1", "-s", "0",
                    "--timeout", "5", PYTHON, "-c", "import time; time.sleep(60)", mark,
                    timeout=45)
    assert time.monotonic() - start < 40
    assert alive(mark) == []
    if "All nodes which are allocated for this job are already filled" in result.stderr:
        # Seen on the GPU machine's mpirun: it refuses the unresolvable host itself, before any
        # ssh runs, so there is no ssh error to name the host from. Still one report, no hang.
        assert result.returncode != 0 and "FAIL: mpirun: exited with status" in result.stderr
        pytest.skip("this mpirun rejects an unresolvable host before starting ssh")
    assert result.returncode == 255, result.stderr
    report = result.stderr[result.stderr.index("FAIL:"):].splitlines()
    assert report[0] == "FAIL: nohost.invalid: cannot resolve the host name"
    assert report[1].startswith("  while mpirun was starting its daemons over ssh, after ")
    assert any(line.startswith("    ssh: Could not resolve hostname nohost.invalid:")
               for line in report)
    assert alive(mark) == []


LENET = ["--network", "lenet", "--image-shape", "1,28,28", "--num-classes", "10"]


def fail_report(stderr: str) -> list[str]:
    return stderr[stderr.index("FAIL:"):].splitlines()


@pytest.mark.timeout(90)
def test_a_worker_that_exits_mid_run_is_named_and_every_rank_reported(tmp_path):
    # Each rank's wrapper says how its command ended; the launcher dates it as it arrives.
    report = tmp_path / "report.json"
    result = launch("--launcher", "mpi", "-n", "2", "-s", "1", "--report", str(report),
                    PYTHON, program("worker_exits.py"), str(tmp_path), PYTHON, "-m",
                    "bandwidth.measure", "--kv-store", "dist_sync", "--cpus", "1",
                    "--num-batches", "100000", "--timeout", "30", "--all-worker-lines", *LENET,
                    timeout=80)
    assert result.returncode == 1, result.stderr[-3000:]
    lines = fail_report(result.stderr)
    assert lines[0].startswith("FAIL: worker 1 (rank 1) on 127.0.0.1: exited with status 1 "
                               "after "), lines
    # the others failed because worker 1 was gone, or mpirun stopped them first
    then = lines[1]
    assert then.startswith("  then, as a consequence: ") or \
        then == "  then: no other process failed"
    tail = lines[lines.index("  last stderr lines of worker 1@127.0.0.1:") + 1:]
    assert tail[0] == "    worker 1 exiting with status 1 on purpose, mid-run"
    assert not any("peer process is gone" in line for line in tail)   # others' lines stay theirs
    doc = json.loads(report.read_text())
    got = {p["subject"]: p for p in doc["processes"]}
    assert sorted(got) == ["server 0 (rank 2) on 127.0.0.1", "worker 0 (rank 0) on 127.0.0.1",
                           "worker 1 (rank 1) on 127.0.0.1"]
    culprit = got["worker 1 (rank 1) on 127.0.0.1"]
    assert (culprit["role"], culprit["rank"], culprit["status"], culprit["root_cause"]) == \
        ("worker", 1, 1, True)
    assert doc["root_cause"]["subject"] == culprit["subject"] and doc["exit_code"] == 1
    assert isinstance(culprit["pid"], int) and culprit["started_s"] < culprit["ended_s"]
    for subject, other in got.items():
        assert (other["role"], other["rank"]) == (subject.split()[0], int(subject.split()[3][:-1]))
        if other is not culprit:
            assert other["consequence"] or other["stopped_by_launcher"], other
            assert other["ended_s"] is None or other["ended_s"] >= culprit["ended_s"] - 0.5
            assert f"{subject} " in then or other["stopped_by_launcher"]
    assert alive(str(tmp_path)) == []


@pytest.mark.timeout(60)
def test_a_rank_killed_with_sigterm_is_named_from_its_own_word(tmp_path):
    mark = marker()
    report = tmp_path / "report.json"
    result = launch("--launcher", "mpi", "-n", "2", "-s", "0", "--report", str(report),
                    PYTHON, program("fail.py"), mark, "--rank", "1", "--signal", "SIGTERM")
    assert result.returncode == 143, result.stderr[-3000:]
    lines = fail_report(result.stderr)
    assert lines[0].startswith("FAIL: worker 1 (rank 1) on 127.0.0.1: was killed by SIGTERM "
                               "after ")
    assert lines[1] == "  then: no other process failed" and lines[-1] == \
        "  stopped 1 running process"          # worker 0: mpirun's SIGTERM, not a failure
    doc = json.loads(report.read_text())
    (zero, one) = doc["processes"]
    assert (one["signal"], one["status"], one["root_cause"], one["failed"]) == \
        ("SIGTERM", None, True, True)
    assert (zero["rank"], zero["failed"], zero["stopped_by_launcher"]) == (0, False, True)
    assert alive(mark) == []
