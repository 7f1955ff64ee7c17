"""The per-rank record of a distributed run and the straggler rule (issue 40, item 1): the rule on
synthetic ranks (a slow one named, nothing on clean ranks, one worker, ties, a slow server), and
real runs through the launcher on loopback: dist_sync's record with each worker's rate with each
server, a worker really slowed (stopped and continued by this test) named, dist_nccl's record."""

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest
from conftest import ROOT
from launch_support import pids_with

from bandwidth.launch.preflight import PREFLIGHT_ENV
from bandwidth.results.ranks import PeerRate, RankRecord
from bandwidth.results.stragglers import K, judge, straggler_json, straggler_line

LAUNCH = ROOT / "launch.py"
MLP = ["--network", "mlp", "--image-shape", "1,28,28", "--num-classes", "10"]


# --- the rule, on synthetic ranks ------------------------------------------------------------

def steps(base: float, n: int = 9, jitter: float = 0.02) -> list[float]:
    """``n`` step times around ``base``, +-jitter (relative), deterministic."""
    return [base * (1 + jitter * ((i * 7) % 5 - 2) / 2) for i in range(n)]


def test_the_slow_rank_is_named_against_the_median():
    figures = {f"worker {w}": steps(0.010) for w in range(8)}
    figures["worker 5"] = steps(0.018)
    verdict = judge(figures)
    assert verdict.named == "worker 5" and verdict.ratio == pytest.approx(1.8, rel=0.02)
    assert verdict.also == ()


def test_clean_ranks_name_nothing():
    figures = {f"worker {w}": steps(0.010 * (1 + 0.03 * (w % 4))) for w in range(16)}
    verdict = judge(figures)
    assert verdict.named is None and verdict.slowest is not None
    assert verdict.slowest_ratio < K


def test_a_rank_above_k_but_within_the_spread_between_rounds_is_not_named():
    """Noisy rounds: the rank is 1.3 x the median, but its rounds spread as widely as that."""
    figures = {f"worker {w}": steps(0.010, jitter=0.8) for w in range(6)}
    figures["worker 2"] = steps(0.013, jitter=0.8)
    assert judge(figures).named is None


def test_one_worker_has_nothing_to_compare_with():
    verdict = judge({"worker 0": steps(0.01)})
    assert verdict.named is None and verdict.alone == "1 rank"
    record = RankRecord(0, "worker", 0, "10.0.0.1", tuple(steps(0.01)), (), 1e6, 1e6)
    assert straggler_line([record]) == "no straggler (1 worker: nothing to compare with)"


def test_ties_name_the_lowest_rank_and_the_other_as_standing_out():
    figures = {f"worker {w}": steps(0.010) for w in range(6)}
    figures["worker 4"] = steps(0.020)
    figures["worker 1"] = steps(0.020)
    verdict = judge(figures)
    assert verdict.named == "worker 1" and verdict.also == ("worker 4",)


def ps_records(push: dict[tuple[int, int], float], workers: int = 4, servers: int = 3,
               nbytes: int = 4_000_000, waits: dict[tuple[int, int], float] | None = None,
               shares: list[int] | None = None) -> list[RankRecord]:
    """Parameter-server ranks: every worker's pushes to every server take 10 ms, except
    ``push[(worker, server)]``; with ``waits``, the servers timed their wait on each worker too:
    2 ms, except ``waits[(worker, server)]``; ``shares``: each server's bytes (else ``nbytes``)."""
    records = []
    shares = shares or [nbytes] * servers
    for w in range(workers):
        peers = tuple(PeerRate("server", s, f"10.0.1.{s}", shares[s],
                               tuple(steps(push.get((w, s), 0.010))), tuple(steps(0.030)))
                      for s in range(servers))
        records.append(RankRecord(w, "worker", w, f"10.0.0.{w}", tuple(steps(0.030)),
                                  tuple(steps(0.001)), 3 * nbytes, 3 * nbytes, peers))
    waited = {s: tuple(zip(*(steps(waits.get((w, s), 0.002)) for w in range(workers))))
              for s in range(servers)} if waits is not None else {}
    records += [RankRecord(workers + s, "server", s, f"10.0.1.{s}", tuple(steps(0.030)), (),
                           workers * nbytes, workers * nbytes, waited_on=waited.get(s, ()))
                for s in range(servers)]
    return records


def test_the_servers_wait_names_a_worker_whose_push_times_look_alike():
    """The servers pace every push, so the workers' push times are alike; the servers' wait on
    worker 1 (summed over them: 2+2+14.5 ms against 6 ms, a lead of 12.5 ms, above a quarter of
    the workers' 30 ms step) names it, and no push rate is said; a lead of 6.5 ms does not."""
    records = ps_records({}, waits={(1, 2): 0.0145})
    line = straggler_line(records)
    assert line == "straggler: worker 1 on 10.0.0.1, server wait 3.08 x the median"
    below = straggler_line(ps_records({}, waits={(1, 2): 0.0085}))
    assert below.startswith("no straggler (") and "slowest worker 1 on 10.0.0.1, 2.08 x" in below
    doc = straggler_json(records)
    assert doc["figure"] == "server wait" and doc["workers"]["named"] == "worker 1"
    assert doc["rule"].startswith("a worker's median server wait at least 1.25 x")
    clean = straggler_line(ps_records({}, waits={}))
    assert clean.startswith("no straggler (rule: a worker's median server wait at least ")


def test_the_line_names_the_worker_and_its_slow_path_to_one_server():
    records = ps_records({(2, 1): 0.025})
    line = straggler_line(records)
    assert line == ("straggler: worker 2 on 10.0.0.2, push time 2.50 x the median; its pushes "
                    "to server 1 at 40 % of the others'")
    doc = straggler_json(records)
    assert doc["workers"]["named"] == "worker 2" and doc["workers"]["host"] == "10.0.0.2"
    assert doc["line"] == line and "1.25 x" in doc["rule"]


def test_a_slow_server_is_named_when_every_worker_waits_for_it():
    records = ps_records({(w, 0): 0.021 for w in range(4)})
    assert straggler_line(records) == (
        "straggler: server 0 on 10.0.1.0, the workers' pushes to it 2.10 x the median "
        "server's time per byte (48 % of the rate)")


def test_a_small_share_slow_per_byte_is_not_a_slow_server():
    """Seconds per byte are compared only between shares of a like size: as MXNet's key rule
    split mobilenet over 4 lab servers (7.0, 2.2, 5.5, 2.1 MB), every push taking 10 ms, the
    small shares read 1.4-1.5 x the median per byte (a rule of half the median share kept 2.1
    MB, and named it): costs that do not grow with bytes, not a slow link. A like share that is
    slow is named."""
    small = ps_records({}, servers=4, shares=[7_000_000, 2_200_000, 5_500_000, 2_100_000])
    assert straggler_json(small)["servers"]["named"] is None
    assert straggler_line(small).startswith("no straggler (")
    slow = ps_records({(w, 2): 0.027 for w in range(4)})
    assert straggler_json(slow)["servers"]["named"] == "server 2"


def test_clean_parameter_servers_say_no_straggler_with_the_rule():
    line = straggler_line(ps_records({}))
    assert line.startswith("no straggler (rule: a worker's median push time at least 1.25 x "
                           "the median of the ranks' medians and above it by more than 3 x "
                           "their spread between rounds; slowest worker ")


# --- real runs on loopback ---------------------------------------------------------------------

def launch(workers: int, servers: int, *measure_args: str, marker: str = "0"):
    argv = [sys.executable, str(LAUNCH), "--launcher", "local", "-n", str(workers), "-s",
            str(servers), "--timeout", "60", sys.executable, "bandwidth/measure.py",
            "--cpus", "1", "--seed", marker, *measure_args]
    return subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def run_to_end(tmp_path, workers: int, servers: int, *measure_args: str,
               timeout_s: float = 50) -> tuple[str, dict]:
    """A run that must succeed: its stdout and the first result of its --json document."""
    out = tmp_path / "r.json"
    proc = launch(workers, servers, *measure_args, "--json", str(out))
    stdout, stderr = proc.communicate(timeout=timeout_s)
    assert proc.returncode == 0, stderr[-3000:]
    return stdout, json.loads(out.read_text())["results"][0]


@pytest.mark.timeout(60)
def test_dist_sync_keeps_every_ranks_record(tmp_path):
    stdout, result = run_to_end(tmp_path, 3, 2, "--kv-store", "dist_sync", *MLP,
                                "--num-batches", "4")
    ranks = result["ranks"]
    assert [(r["rank"], r["role"], r["index"]) for r in ranks] == [
        (0, "worker", 0), (1, "worker", 1), (2, "worker", 2), (3, "server", 0), (4, "server", 1)]
    assert all(r["host"] == "127.0.0.1" for r in ranks)
    shares = result["workers"][0]["server_nbytes"]
    for r in ranks:
        assert len(r["step_seconds"]) == 4 and all(t > 0 for t in r["step_seconds"])
        assert r["step_seconds_median"] > 0
    for r in ranks[:3]:
        assert len(r["wait_seconds"]) == 4
        assert r["nbytes_sent"] == r["nbytes_received"] == result["network"]["bytes"]
        assert [(p["role"], p["index"], p["host"], p["nbytes"]) for p in r["peers"]] == [
            ("server", 0, "127.0.0.1", shares[0]), ("server", 1, "127.0.0.1", shares[1])]
        for p in r["peers"]:
            assert len(p["push_seconds"]) == len(p["pull_seconds"]) == 4
            assert all(0 < t for t in p["push_seconds"] + p["pull_seconds"])
            assert p["push_gbps"] > 0 and p["pull_gbps"] > 0
    for s, r in enumerate(ranks[3:]):
        assert r["peers"] == [] and r["nbytes_sent"] == 3 * shares[s]
    # The workers' document keeps its keys; the line is the document's.
    assert set(result["workers"][0]) == {"worker", "seconds_median", "busbw_median",
                                         "network_nbytes", "server_nbytes", "own_seconds",
                                         "errors"}
    assert f"#   {result['straggler']['line']}" in stdout.splitlines()
    assert "straggler" in result["straggler"]["line"]


def env_of(pid: int) -> dict[bytes, bytes]:
    with open(f"/proc/{pid}/environ", "rb") as f:
        return dict(v.split(b"=", 1) for v in f.read().split(b"\0") if b"=" in v)


def worker_pid(marker: str, task: int, timeout_s: float = 30) -> int:
    """Worker ``task``'s process (not launch.py's preflight check of the command line, which
    runs the same command with the same role and ends at once)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for pid in pids_with(marker, "worker"):
            try:
                env = env_of(pid)
                if env.get(b"DMLC_TASK_ID") == str(task).encode() and \
                        env.get(PREFLIGHT_ENV.encode()) != b"1":
                    return pid
            except OSError:
                pass
        time.sleep(0.05)
    raise AssertionError(f"worker {task} never started")


@pytest.mark.timeout(90)
def test_a_worker_stopped_three_quarters_of_the_time_leads_the_server_wait(tmp_path):
    """Worker 1's process is stopped 30 ms and continued 10 ms in turn (SIGSTOP, SIGCONT) while
    it measures; nothing in the product knows. The server then waits on its pushes far longer
    than on the others' (509-578 x the median, theirs about 40 us, on a quiet machine), and the
    line names it, or, where that wait is under a quarter of the workers' step (on CI's loaded
    cores the stops land mostly outside the pushes: 6 ms of a 110 ms step), still reads it as the
    slowest. (Its own push times, the figure before the servers timed their wait, read 1.38-1.56
    x the median on CI: the server paces every push.)"""
    marker = "40401"
    out = tmp_path / "r.json"
    proc = launch(3, 1, "--kv-store", "dist_sync", "--network", "flat:2000000",
                  "--num-batches", "30", "--json", str(out), marker=marker)
    slow = worker_pid(marker, 1)
    seen = []                              # worker 0's lines, up to its first iteration's
    for line in proc.stdout:               # (stopping it while torch loads only costs time)
        seen.append(line)
        if line.startswith("iter 1,"):
            break
    done = threading.Event()
    stopped = [0]

    def stop_and_continue():
        while not done.is_set():
            try:
                os.kill(slow, signal.SIGSTOP)
                stopped[0] += 1
                time.sleep(0.03)
                os.kill(slow, signal.SIGCONT)
                time.sleep(0.01)
            except ProcessLookupError:
                return

    thread = threading.Thread(target=stop_and_continue)
    thread.start()
    try:
        stdout, stderr = proc.communicate(timeout=80)
        stdout = "".join(seen) + stdout
    finally:
        done.set()
        thread.join()
        try:
            os.kill(slow, signal.SIGCONT)
        except ProcessLookupError:
            pass
    assert proc.returncode == 0, stderr[-3000:]
    result = json.loads(out.read_text())["results"][0]
    line = result["straggler"]["line"]
    assert stopped[0] > 10, f"worker 1 was stopped {stopped[0]} times"
    verdict = result["straggler"]["workers"]
    assert result["straggler"]["figure"] == "server wait"
    assert verdict["slowest"] == "worker 1" and verdict["slowest_ratio"] >= 10, verdict
    assert line.startswith("straggler: worker 1 on 127.0.0.1, server wait ") or (
        line.startswith("no straggler (") and "slowest worker 1 on 127.0.0.1" in line), line
    waits = [r["waited_on"] for r in result["ranks"] if r["role"] == "server"]
    assert len(waits) == 1 and len(waits[0]) == 30 and all(len(w) == 3 for w in waits[0]), waits
    assert f"#   {line}" in stdout, stdout[-3000:]


@pytest.mark.timeout(60)
def test_dist_nccl_keeps_every_ranks_record_and_its_probe(tmp_path):
    """4 workers: each rank's record holds its probe with each of its 3 neighbours (distance
    1, -1 and 2), both directions, every exchange; the summary says how long the probe took."""
    stdout, result = run_to_end(tmp_path, 4, 0, "--kv-store", "dist_nccl", *MLP,
                                "--num-batches", "4")
    ranks = result["ranks"]
    assert [(r["rank"], r["role"], r["index"], r["host"]) for r in ranks] == [
        (w, "worker", w, "127.0.0.1") for w in range(4)]
    per_worker = result["workers"][0]["network_nbytes"]
    probe = result["probe"]
    assert probe["shifts"] == [1, -1, 2] and probe["backend"] == "gloo"
    assert (probe["workers"], probe["ranks_per_worker"], probe["repeats"]) == (4, 1, 3)
    assert probe["nbytes"] == 2 << 20 and 0 < probe["seconds"] < 20
    for r in ranks:
        assert len(r["step_seconds"]) == len(r["wait_seconds"]) == 4
        assert r["nbytes_sent"] == r["nbytes_received"] == per_worker > 0
        assert [p["index"] for p in r["peers"]] == [w for w in range(4) if w != r["index"]]
        for p in r["peers"]:
            assert (p["role"], p["host"], p["nbytes"]) == ("worker", "127.0.0.1", 2 << 20)
            assert len(p["send_seconds"]) == len(p["recv_seconds"]) == 3
            assert all(t > 0 for t in p["send_seconds"] + p["recv_seconds"])
            assert p["send_gbps"] > 0 and p["recv_gbps"] > 0
    # A path is timed once, by its receiver: a's send to b is b's receive from a.
    by = {(r["index"], p["index"]): p for r in ranks for p in r["peers"]}
    assert all(by[(a, b)]["send_seconds"] == by[(b, a)]["recv_seconds"] for a, b in by)
    straggler = result["straggler"]
    assert straggler["figure"] == "step" and straggler["probe"]["alone"] is None
    assert "a probe path stands out" in straggler["probe"]["rule"]
    lines = stdout.splitlines()
    assert f"#   {straggler['line']}" in lines
    assert any(line.startswith("#   probe: 3 rounds (worker distance 1, -1, 2) of 3 x 2 MiB "
                               "each way between neighbours, gloo send/recv, ") for line in lines)


@pytest.mark.timeout(60)
def test_dist_nccl_probe_of_workers_of_two_devices(tmp_path):
    """2 workers of 2 CPU devices each (one process per device): device i of one worker
    exchanges with device i of the other, and the worker's rate counts both devices' bytes."""
    stdout, result = run_to_end(tmp_path, 2, 0, "--kv-store", "dist_nccl", *MLP,
                                "--num-batches", "2", "--cpus", "2", "--no-reference",
                                timeout_s=55)
    assert (result["probe"]["workers"], result["probe"]["ranks_per_worker"]) == (2, 2)
    assert result["probe"]["shifts"] == [1]
    for r in result["ranks"]:
        (peer,) = r["peers"]
        assert peer["index"] == 1 - r["index"] and peer["nbytes"] == 2 * (2 << 20)
        assert len(peer["recv_seconds"]) == 3 and peer["recv_gbps"] > 0
    # Two workers: no third to tell a slow link from a slow path; the steps are judged.
    assert result["straggler"]["probe"]["alone"] == "2 workers"


@pytest.mark.timeout(45)
def test_no_probe_leaves_it_out(tmp_path):
    stdout, result = run_to_end(tmp_path, 2, 0, "--kv-store", "dist_nccl", *MLP,
                                "--num-batches", "2", "--no-reference", "--no-probe",
                                timeout_s=40)
    assert "probe" not in result and "probe" not in result["straggler"]
    assert all(r["peers"] == [] for r in result["ranks"])
    assert "#   probe:" not in stdout


# --- the gate reports name the straggler (issue 40, item 5) -----------------------------------

def test_compare_gate_reports_name_the_straggler(tmp_path):
    from resultdocs import make_document, make_result, write_document

    line = ("straggler: worker 2 on 10.0.0.2, push time 2.50 x the median; its pushes to "
            "server 1 at 40 % of the others'")
    result = make_result("dist_sync", "mlp", n=4, busbw=1.0, kind="cpu")
    result["straggler"] = {"line": line, "rule": "test"}
    doc = write_document(tmp_path / "run.json", make_document([result]))
    junit, md = tmp_path / "gate.xml", tmp_path / "summary.md"
    proc = subprocess.run([sys.executable, "-m", "bandwidth.compare", str(doc), "--min-gbps",
                           "0.5", "--junit", str(junit), "--summary-md", str(md)], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert line in md.read_text()
    assert "straggler: worker 2 on 10.0.0.2, push time 2.50 x the median" in junit.read_text()
    result["straggler"]["line"] = "no straggler (rule: ...)"
    doc = write_document(tmp_path / "clean.json", make_document([result]))
    subprocess.run([sys.executable, "-m", "bandwidth.compare", str(doc), "--min-gbps", "0.5",
                    "--summary-md", str(tmp_path / "clean.md")], cwd=ROOT, check=True,
                   capture_output=True, timeout=60)
    assert "straggler" not in (tmp_path / "clean.md").read_text()
