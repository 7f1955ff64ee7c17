"""--network-ceiling: the host-to-host matrix of ``python -m bandwidth.ceiling --network`` as the
ceiling of the distributed modes; the cell choice on fabricated matrices, bad files, and the
whole path through the real launcher on loopback."""

import json
import re
import subprocess
import sys

import pytest
from conftest import ROOT

from bandwidth.errors import ConfigError
from bandwidth.execution.commandline import build_parser, job_from_args
from bandwidth.links.hostmatrix import (HostMatrix, host_ceiling, load_matrix, needed_pairs,
                                        slowest_cell)

LAUNCH = ROOT / "launch.py"
LENET = ["--network", "lenet", "--image-shape", "1,28,28", "--num-classes", "10"]


def two_hosts() -> HostMatrix:
    # hostA -> hostB is 1.5 GB/s, the way back 0.5: a worker on A and a server on B uses A->B.
    return HostMatrix("m.json", ("0@hostA", "1@hostB"), ((None, 1.5), (0.5, None)))


def test_worker_to_server_picks_the_worker_host_to_the_server_host():
    ceiling = host_ceiling(two_hosts(), ["hostA"], ["hostB"], worker_gbps=[0.75])
    assert ceiling.gbps == 1.5 and ceiling.pair == ("0@hostA", "1@hostB")
    assert ceiling.pct == pytest.approx(50.0)


def test_other_ranks_match_by_host_and_take_the_slowest_cell():
    matrix = HostMatrix("m.json", ("0@a", "1@b", "2@b"),
                        ((None, 3.0, 2.0), (1.0, None, 9.0), (1.0, 9.0, None)))
    # A job whose ranks differ from the matrix's (worker 0 on b, server rank 1 on a).
    assert needed_pairs(["b"], ["a"]) == [("0@b", "1@a")]
    assert slowest_cell(matrix, needed_pairs(["b"], ["a"]))[:2] == (1.0, ("1@b", "0@a"))
    # dist_nccl: both directions between the workers, slowest wins.
    assert slowest_cell(matrix, needed_pairs(["a", "b"], []))[:2] == (1.0, ("1@b", "0@a"))


def test_a_missing_host_pair_or_one_worker_is_not_applicable():
    ceiling = host_ceiling(two_hosts(), ["hostA"], ["hostC"], worker_gbps=[1.0])
    assert ceiling.gbps is None and ceiling.pct is None
    assert "no cell from hostA to hostC" in ceiling.reason
    assert "sends nothing" in host_ceiling(two_hosts(), ["hostA"], [], [1.0]).reason


@pytest.mark.parametrize("content, words", [
    (None, "cannot read it"),
    ("{not json", "not JSON"),
    ('{"network": {"hosts": ["0@a"], "gbps": [[null]]}}', "not a host-to-host matrix"),
    ('{"network": {"hosts": ["0@a", "1@b"], "gbps": [[null, "x"], [1, null]]}}',
     "not a host-to-host matrix"),
    pytest.param("[" * 100_000 + "]" * 100_000, "nested too deeply", id="deep"),
    pytest.param('{"network": {"hosts": ["0@a", "1@b"], "gbps": [[null, ' + "9" * 5000
                 + '], [1, null]]}}', "not a host-to-host matrix", id="huge-number"),
])
def test_bad_matrix_files_are_one_config_error(tmp_path, content, words):
    path = tmp_path / "m.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ConfigError, match=words):
        load_matrix(str(path))
    proc = subprocess.run([sys.executable, "bandwidth/measure.py", "--kv-store", "dist_sync",
                           "--network-ceiling", str(path)], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.count("\n") == 1 and words in proc.stderr


def test_the_flag_belongs_to_the_distributed_modes(tmp_path):
    path = tmp_path / "m.json"
    path.write_text(json.dumps({"network": {"hosts": ["0@a", "1@b"],
                                            "gbps": [[None, 1.0], [1.0, None]]}}))
    with pytest.raises(ConfigError, match="distributed modes"):
        job_from_args(build_parser().parse_args(["--kv-store", "local",
                                                 "--network-ceiling", str(path)]))
    job = job_from_args(build_parser().parse_args(["--kv-store", "dist_sync",
                                                   "--network-ceiling", str(path)]))
    assert job.network_ceiling.labels == ("0@a", "1@b")


@pytest.mark.timeout(200)
@pytest.mark.skipif(not LAUNCH.exists(), reason="launch.py is not there yet")
def test_matrix_then_dist_sync_through_the_launcher(tmp_path):
    matrix = tmp_path / "M.json"
    proc = subprocess.run([sys.executable, str(LAUNCH), "-n", "1", "-s", "1", "--timeout", "60",
                           sys.executable, "-m", "bandwidth.ceiling", "--network", "--mb", "4",
                           "--repeats", "3", "--json", str(matrix)],
                          cwd=ROOT, capture_output=True, text=True, timeout=150)
    assert proc.returncode == 0, proc.stderr[-3000:]
    cell = json.loads(matrix.read_text())["network"]["gbps"][0][1]      # rank 0 -> rank 1
    out = tmp_path / "R.json"
    proc = subprocess.run([sys.executable, str(LAUNCH), "-n", "1", "-s", "1", "--timeout", "60",
                           sys.executable, "bandwidth/measure.py", "--kv-store", "dist_sync",
                           "--cpus", "1", "--num-batches", "3", *LENET,
                           "--network-ceiling", str(matrix), "--json", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=150)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "bandwidth.ceiling --network" not in proc.stdout          # the hint is replaced
    line = re.search(r"host-to-host ceiling \((.+)\): ([0-9.]+) GB/s, the slowest worker->server "
                     r"pair of the matrix \(0@127\.0\.0\.1 -> 1@127\.0\.0\.1\); this run reaches "
                     r"([0-9.]+) %", proc.stdout)
    assert line, proc.stdout[-2000:]
    assert line.group(1) == str(matrix) and float(line.group(2)) == pytest.approx(cell, abs=0.006)
    figures = json.loads(out.read_text())["results"][0]["host_ceiling"]
    assert figures["file"] == str(matrix) and figures["gbps"] == cell
    assert figures["pair"] == ["0@127.0.0.1", "1@127.0.0.1"] and figures["pct"] > 0
    worker = json.loads(out.read_text())["results"][0]["workers"][0]
    rate = worker["network_nbytes"] / worker["seconds_median"] / 1e9
    assert figures["pct"] == pytest.approx(100 * rate / cell)
