"""The mpi launcher with a real Open MPI mpirun on this host."""

import shutil
import time

import pytest
from launch_support import PYTHON, alive, launch, marker, program, records

from bandwidth.launch.contract import ContractError
from bandwidth.launch.mpirole import environ_for

pytestmark = pytest.mark.skipif(shutil.which("mpirun") is None,
                                reason="Open MPI's mpirun is not installed (apt-get install "
                                "openmpi-bin; .ci/run does this when run as root)")


@pytest.mark.timeout(60)
def test_every_mpi_process_gets_its_role_from_its_mpi_rank(tmp_path):
    (tmp_path / "hosts").write_text("127.0.0.1 slots=8\n")
    out = tmp_path / "out"
    out.mkdir()
    result = launch("-H", str(tmp_path / "hosts"), "--launcher", "mpi", "-n", "2", "-s", "1",
                    "--scheduler", "--env", "SET_ME=a b", PYTHON, program("role_env.py"),
                    str(out), "two words", env={"SECRET_TOKEN": "hunter2"})
    assert result.returncode == 0, result.stderr
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
