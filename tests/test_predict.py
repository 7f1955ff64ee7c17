"""The model of a step (bandwidth/predict, docs/formulas.md "A model of a step"): its formulas on
hand-computed cases, the fit that calibrates it, and its command line's refusals."""

import dataclasses
import json
import os
import re
import subprocess
import sys

import pytest

import networks
from bandwidth.errors import ConfigError
from bandwidth.predict.calibrate import solve
from bandwidth.predict.jobs import make_job, place, server_shares
from bandwidth.predict.model import predict
from bandwidth.predict.params import Params, fanin_efficiency, load_dict
from bandwidth.predict.plan import imbalance, servers_stop_binding

FLAT = networks.get_shapes("flat:2500000")          # 10 MB, one array: split evenly
PLAIN = Params(eff_one=1.0, eff_several=1.0)         # links carry their rate, nothing else costs


def test_fanin_interpolates_in_log2_and_extrapolates_down_to_half():
    p = Params(eff_one=0.9, fanin={2: 0.8, 8: 0.5})
    assert fanin_efficiency(p, 1) == 0.9
    assert fanin_efficiency(p, 2) == pytest.approx(0.8)
    assert fanin_efficiency(p, 4) == pytest.approx(0.65)         # half way from 2 to 8 in log2
    assert fanin_efficiency(p, 16) == pytest.approx(0.35)        # the slope goes on
    assert fanin_efficiency(p, 1024) == pytest.approx(0.25)      # but never below half of 0.5


def test_one_worker_one_server_is_the_link_bound_plus_the_tail():
    job = make_job("dist_sync", FLAT, 1, 1, rate_bits=8e6, placement="separate")  # 1 MB/s
    assert (job.worker_hosts, job.server_hosts) == (("h1",), ("h2",))
    found = predict(job, PLAIN)
    count, last = job.messages[0]
    assert found.resources[found.binding] == pytest.approx(10.0)    # 10 MB out and in at once
    assert found.seconds == pytest.approx(10.0 + last / 1e6)     # + the last answer
    assert count == 13 and last == 256 * 1024        # 256K, 512K, 8 of 1 MB (or less), 512K, 256K


def test_one_message_in_flight_overlaps_a_servers_directions_less():
    many = make_job("dist_sync", FLAT, 2, 1, rate_bits=8e6, placement="separate")
    one = make_job("dist_sync", FLAT, 2, 1, rate_bits=8e6, placement="separate", in_flight=1)
    link = "server link in of h3"
    assert predict(many, PLAIN).resources[link] == pytest.approx(20.0)
    found = predict(one, PLAIN)
    assert found.binding == "server link of h3 (one message in flight)"
    assert found.resources[found.binding] == pytest.approx(40.0)     # uncalibrated: in, then out
    half = dataclasses.replace(PLAIN, one_serial=0.5)
    assert predict(one, half).resources[found.binding] == pytest.approx(30.0)   # 20 + 20 / 2
    assert predict(many, half).resources[link] == pytest.approx(20.0)           # all: unchanged
    # calibrated as the other parameters are: the value that gives the measured step
    assert solve(PLAIN, "one_serial", one, predict(one, half).seconds).one_serial == \
        pytest.approx(0.5, rel=1e-4)



def test_a_server_taking_a_worker_after_another_takes_in_then_answers():
    """--server-takes worker: a server host's link takes every push, then sends every answer
    (in + out, not the larger), the way in at one sender's efficiency, no separate tail; the
    async modes refuse it (their servers answer each push on its own), as measure.py does."""
    by_worker = make_job("dist_sync", FLAT, 2, 1, rate_bits=8e6, placement="separate",
                         server_takes="worker")
    slow_in = dataclasses.replace(PLAIN, eff_one=0.5, fanin={2: 0.25})
    found = predict(by_worker, slow_in)
    assert found.binding == "server link of h3 (in, then out: a worker's share after another)"
    # 20 MB in at 0.5 of 1 MB/s, then 20 MB out to two workers (eff_several: 1.0)
    assert found.resources[found.binding] == pytest.approx(40.0 + 20.0)
    assert found.serial_s == pytest.approx(0.0) and found.incast == {}
    # A worker beside each server: its 5 MB of pushes leave while the other worker's 5 MB come
    # in, and its answers come in while the server's go out, every way at 0.5 of 1 MB/s (one
    # peer each): 10 s + 10 s, not the host's 10 MB in and then its 10 MB out (40 s)
    beside = make_job("dist_sync", FLAT, 2, 2, rate_bits=8e6, hosts=2, server_takes="worker")
    found = predict(beside, slow_in)
    assert found.resources[found.binding] == pytest.approx(10.0 + 10.0)
    for mode, flight in (("dist_async", None), ("dist_sync", 2)):
        with pytest.raises(ConfigError):
            make_job(mode, FLAT, 2, 1, rate_bits=8e6, server_takes="worker", in_flight=flight)


def test_auto_server_settings_as_measure_py_resolves_them():
    """--server-takes auto and --server-keys auto: a worker at a time with balanced keys from
    WORKER_ORDER_FROM workers on (sync, nothing in flight capped), message by message with
    MXNet's key rule otherwise; what is given is kept."""
    from bandwidth.config.job import WORKER_ORDER_FROM, server_settings

    many = WORKER_ORDER_FROM
    assert server_settings("auto", "auto", sync=True, workers=many, servers=5) == \
        ("worker", "balanced")
    assert server_settings("auto", "auto", sync=True, workers=many - 1, servers=1) == \
        ("message", "mxnet")
    assert server_settings("auto", "auto", sync=False, workers=many, servers=2) == \
        ("message", "mxnet")
    assert server_settings("auto", "auto", sync=True, workers=many, servers=2,
                           max_in_flight=4) == ("message", "mxnet")
    assert server_settings("auto", "mxnet", sync=True, workers=many, servers=2) == \
        ("worker", "mxnet")
    assert server_settings("message", "auto", sync=True, workers=many, servers=2) == \
        ("message", "mxnet")
    assert server_settings("worker", "balanced", sync=True, workers=2, servers=2) == \
        ("worker", "balanced")
    # the model resolves them the same way: 50 x 5 takes a worker at a time, 20 x 2 does not
    seed = make_job("dist_sync", FLAT, 50, 5, rate_bits=1e9, hosts=25)
    assert (seed.server_takes, seed.server_keys) == ("worker", "balanced")
    smaller = make_job("dist_sync", FLAT, 20, 2, rate_bits=1e9, hosts=22)
    assert (smaller.server_takes, smaller.server_keys) == ("message", "mxnet")

def test_ring_of_four_hosts():
    job = make_job("dist_nccl", FLAT, 4, 0, rate_bits=8e6)
    found = predict(job, PLAIN)
    assert found.resources["ring link of h1"] == pytest.approx(2 * 3 / 4 * 10.0)


def test_cpu_binds_when_summing_is_slow():
    job = make_job("dist_sync", FLAT, 4, 1, rate_bits=8e9, placement="separate")
    found = predict(job, Params(eff_one=1.0, eff_several=1.0, sum_bytes_per_s=1e6))
    assert found.binding == "server cpu of server 0"
    assert found.resources[found.binding] == pytest.approx(40.0)     # 4 pushes of 10 MB


def test_placements():
    assert place(3, 2, "round-robin") == (("h1", "h2", "h3"), ("h1", "h2"))
    assert place(3, 2, "round-robin", hosts=2) == (("h1", "h2", "h1"), ("h2", "h1"))
    assert place(3, 2, "separate") == (("h1", "h2", "h3"), ("h4", "h5"))
    with pytest.raises(ConfigError):
        place(1, 1, "scattered")


def test_shares_follow_mxnets_key_rule():
    shapes = networks.get_shapes("mobilenet")
    held = server_shares(shapes, 5, 4)
    assert sum(nbytes for nbytes, _ in held) == networks.num_elements(shapes) * 4
    assert imbalance([nbytes for nbytes, _ in held]) > 1.05   # small keys land unevenly
    assert imbalance([5.0, 5.0]) == 1.0


def test_servers_stop_binding_where_their_links_carry_no_more_than_a_workers():
    # servers apart: each carries W x S / n each way, a worker S: n = W with even links
    assert servers_stop_binding("dist_sync", FLAT, 4, params=PLAIN, rate_bits=8e6) == 4
    slower = Params(eff_one=1.0, eff_several=1.0, fanin={2: 0.5, 4: 0.5})
    assert servers_stop_binding("dist_sync", FLAT, 4, params=slower, rate_bits=8e6) == 8


def test_solve_recovers_a_parameter():
    truth = Params(eff_one=0.9, eff_several=0.85, fanin={2: 0.7}, step_s=0.01, message_s=0.0025)
    job = make_job("dist_sync", FLAT, 2, 1, rate_bits=8e6, placement="separate")
    measured = predict(job, truth).seconds
    start = Params(eff_one=0.9, eff_several=0.85, step_s=0.01, message_s=0.0025)
    assert solve(start, "fanin", job, measured, key=2).fanin[2] == pytest.approx(0.7, rel=1e-4)


def test_params_round_trip_and_refusals():
    p = Params(fanin={2: 0.8}, step_s=0.01)
    assert load_dict(json.loads(json.dumps(p.to_dict()))) == p
    with pytest.raises(ConfigError):
        load_dict({**p.to_dict(), "eff_one": 1.5})
    with pytest.raises(ConfigError):
        make_job("local", FLAT, 2, 1, rate_bits=1e9)
    with pytest.raises(ConfigError):
        make_job("dist_sync", FLAT, 2, 0, rate_bits=1e9)


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "bandwidth.predict", *args],
                          capture_output=True, text=True, timeout=120)


def test_a_plan_into_a_closed_pipe_ends_quietly():
    """predict --plan | head -3, with the reader gone before the first write: exit 141 and
    nothing on stderr, as measure.py (was: "error: [Errno 32] Broken pipe", exit 2)."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        proc = subprocess.run([sys.executable, "-m", "bandwidth.predict", "--network",
                               "flat:2500000", "-n", "8", "-s", "8", "--link-rate", "1gbit",
                               "--plan"], stdout=write_end, stderr=subprocess.PIPE, text=True,
                              timeout=120)
    finally:
        os.close(write_end)
    assert (proc.returncode, proc.stderr) == (141, "")


def test_cli_predicts_plans_and_refuses():
    done = run_cli("--network", "flat:2500000", "-n", "8", "-s", "8", "--link-rate", "1gbit",
                   "--plan")
    assert done.returncode == 0, done.stderr
    assert "busiest link: h1" in done.stdout and "# better placement: " in done.stdout
    # MXNet's key rule leaves mobilenet's 5 servers uneven: the plan names what balanced keys
    # would give, and the model with them holds every server's share equal
    done = run_cli("--network", "mobilenet", "-n", "50", "-s", "5", "--hosts", "25",
                   "--link-rate", "1gbit", "--plan", "--server-keys", "mxnet")
    assert "imbalance 1.44 x the mean" in done.stdout, done.stdout
    even = re.search(r"# with --server-keys balanced: 3\.37 MB on every server, ([0-9.]+) s per "
                     r"step predicted against ([0-9.]+) s", done.stdout)
    assert even and float(even.group(1)) < float(even.group(2)), done.stdout
    done = run_cli("--network", "mobilenet", "-n", "50", "-s", "5", "--hosts", "25",
                   "--link-rate", "1gbit", "--plan", "--server-keys", "balanced")
    assert "(keys balanced over the servers): 3.37, 3.37, 3.37, 3.37, 3.37 MB" in done.stdout
    assert "# with --server-keys" not in done.stdout
    # By default the 5 servers of 50 workers take one worker's share after another
    done = run_cli("--network", "mobilenet", "-n", "50", "-s", "5", "--hosts", "25",
                   "--link-rate", "1gbit")
    assert "each server taking one worker's share after another" in done.stdout, done.stdout
    assert "incast" not in done.stdout
    # Message by message, a server host's link in binds with 48 workers on other hosts pushing
    # into it: incast
    done = run_cli("--network", "mobilenet", "-n", "50", "-s", "5", "--hosts", "25",
                   "--link-rate", "1gbit", "--server-takes", "message")
    assert re.search(r"binds: server link in of h\d+: .*\n  \(incast: 48 remote senders into it "
                     r"at once, carried at 0\.\d{3} of the rate, beyond the \d+ measured\)",
                     done.stdout), done.stdout
    done = run_cli("--network", "mobilenet", "-n", "1", "-s", "1", "--link-rate", "1gbit")
    assert done.returncode == 0 and "incast" not in done.stdout, done.stdout
    done = run_cli("--kv-store", "nccl", "--network", "mlp")
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "does not cover --kv-store nccl" in done.stderr
    done = run_cli("-n", "0")
    assert done.returncode == 2 and "-n 0" in done.stderr


def test_predict_names_the_timeouts_it_leaves_out():
    """measure.py --predict: where the model falls more than 10 % short of the run and the run's
    hosts waited out retransmission timeouts, the note says the model has no term for them."""
    from types import SimpleNamespace

    from bandwidth.predict.runline import _left_out

    run = SimpleNamespace(link_counters={"h1": {"timeouts": 2.5, "rto_min_ms": 200},
                                         "h2": {"timeouts": 0.5, "rto_min_ms": 20},
                                         "h3": {"drops": 3}})
    assert _left_out(run, -30.2) == (
        " (the model has no term for the retransmission timeouts this run's hosts waited out: "
        "3.0 per step in all, 20 ms or more each)")
    assert _left_out(run, -9.0) == ""               # within the model's stated error
    assert _left_out(SimpleNamespace(link_counters={"h1": {"timeouts": 0.0}}), -30.0) == ""
    assert _left_out(SimpleNamespace(link_counters=None), -30.0) == ""


def test_host_matrix_gives_each_host_its_slowest_cell(tmp_path):
    from bandwidth.predict.cli import matrix_rates

    path = tmp_path / "hosts.json"
    path.write_text(json.dumps({"network": {"hosts": ["0@a", "1@b", "2@c"], "gbps": [
        [None, 0.1, 0.2], [0.1, None, 0.05], [0.2, 0.06, None]]}}))
    hosts, rates = matrix_rates(str(path))
    assert hosts == 3
    assert rates == pytest.approx({"h1": 0.8e9, "h2": 0.4e9, "h3": 0.4e9})
    done = run_cli("--network", "flat:2500000", "-n", "2", "-s", "1", "--host-matrix", str(path),
                   "--plan")
    assert "busiest link: h3, 20.00 MB per step, 0.4000 s at 0.4 Gbit/s" in done.stdout
