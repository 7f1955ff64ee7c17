"""How the parameter-server modes cut a push into messages (bandwidth/stores/dist.py)."""

import pytest

from bandwidth.stores.dist import messages, ramped_ranges


def test_ramped_ranges_cover_the_range_growing_and_shrinking():
    pieces = ramped_ranges(10, 10 + 12_750_000, 500_000, 64_000)
    assert pieces[0][0] == 10 and pieces[-1][1] == 10 + 12_750_000
    assert all(a[1] == b[0] for a, b in zip(pieces, pieces[1:]))
    sizes = [e - s for s, e in pieces]
    assert sizes[:3] == [64_000, 128_000, 256_000] and sizes[-3:] == [256_000, 128_000, 64_000]
    assert max(sizes) <= 500_000
    assert ramped_ranges(0, 100, 500_000, 64_000) == [(0, 100)]     # too short: one piece


def test_messages_alternate_between_servers_and_cover_each_share():
    ranges = [(0, 3_000_000), (3_000_000, 5_000_000)]
    plan = messages(ranges, 4)
    assert [server for server, _, _ in plan[:4]] == [0, 1, 0, 1]
    for server, (a, b) in enumerate(ranges):
        mine = [(s, e) for owner, s, e in plan if owner == server]
        assert mine[0][0] == a and mine[-1][1] == b
        assert all(x[1] == y[0] for x, y in zip(mine, mine[1:]))


def test_a_server_holds_at_most_three_shares_whatever_the_workers():
    from bandwidth.stores.psserver import MEMORY_SHARES, server_nbytes, slot_count

    share, largest = 20_000_000, 1_000_000
    for sync, optimizer in [(True, False), (True, True), (False, True)]:
        nbytes = server_nbytes(share, largest, sync=sync, optimizer=optimizer)
        assert share * 2 <= nbytes <= MEMORY_SHARES * share
    assert slot_count(share, largest, held=2) == 20         # sync with an optimizer: 1 share
    assert slot_count(share, largest, held=1) == 40         # 2 shares of slots
    assert slot_count(100, 100, held=2) == 1                # a one-message share: one slot
    assert slot_count(0, 0, held=1) == 1


def test_visit_order_same_or_staggered_keeps_each_servers_messages_in_order():
    from bandwidth.stores.dist import Cluster, visit_order

    plan = messages([(0, 1_000_000), (1_000_000, 1_500_000), (1_500_000, 2_000_000)], 4)
    same = visit_order(plan, Cluster(4, 3, worker=1))
    staggered = visit_order(plan, Cluster(4, 3, worker=1, server_order="staggered"))
    assert same == list(range(len(plan)))
    assert sorted(staggered) == same
    assert [plan[t][0] for t in staggered[:3]] == [1, 2, 0]       # worker 1 starts at server 1
    for server in range(3):
        mine = [t for t in staggered if plan[t][0] == server]
        assert mine == sorted(mine)


def test_one_message_in_flight_per_server_is_exact_and_stated():
    """Real processes: 2 workers, 2 servers, 4 MB in 1 MB messages, one in flight per server,
    staggered: the pulled values are exact and the note says how the messages were sent."""
    from tests.test_dist import launch

    proc = launch(2, 2, "--kv-store", "dist_sync", "--network", "flat:1000000",
                  "--max-in-flight", "1", "--server-order", "staggered", "--num-batches", "2")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "max error 0.000000" in proc.stdout
    assert "at most 1 per server in flight; servers visited staggered" in proc.stdout


@pytest.mark.timeout(200)
@pytest.mark.parametrize("mode", ["dist_sync", "dist_async"])
def test_a_server_that_admits_one_push_at_a_time_is_exact_and_stated(mode):
    """Real processes: 3 workers, 2 servers, 4 MB in 1 MB messages, each server posting one
    receive at a time (Gloo moves a push only once its receive is posted): sync pulls are exact;
    async errs only by staleness, as tests/test_dist.py bounds it; the note says so."""
    import re

    from tests.test_dist import launch

    workers = 3
    extra = ("--optimizer", "sgd", "--all-worker-lines") if mode == "dist_async" else ()
    proc = launch(workers, 2, "--kv-store", mode, "--network", "flat:1000000", "--cpus", "1",
                  *extra, "--server-admit", "1", "--num-batches", "3")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "each server accepts at most 1 pushes at once" in proc.stdout
    if mode == "dist_sync":
        assert "max error 0.000000" in proc.stdout
    else:
        lines = re.findall(r"iter (\d+), .* error ([0-9.]+)", proc.stdout)
        assert len(lines) == workers * 3
        assert all(float(e) <= 1.2 * (workers - 1) / (int(i) + 1) for i, e in lines), lines


def test_server_admit_of_zero_is_one_line():
    import subprocess
    import sys

    from conftest import ROOT
    proc = subprocess.run([sys.executable, "bandwidth/measure.py", "--kv-store", "dist_sync",
                           "--server-admit", "0"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].endswith("--server-admit must be 1 or more; got 0")


def test_balanced_keys_give_every_server_the_same_elements():
    """dist.server_pieces: MXNet's rule leaves mobilenet's 5 servers 2.80-4.86 MB; balanced
    gives each the same elements to within one, and every key's elements are held exactly
    once either way."""
    import math

    import networks
    from bandwidth.stores.dist import server_pieces

    shapes = networks.get_shapes("mobilenet")
    for keys in ("mxnet", "balanced"):
        held = server_pieces(shapes, 5, keys)
        for key, (_, shape) in enumerate(shapes):
            runs = sorted((s, n) for pieces in held for k, s, n in pieces if k == key)
            assert [s for s, _ in runs] == [sum(n for _, n in runs[:i]) for i in range(len(runs))]
            assert sum(n for _, n in runs) == math.prod(shape)
        sizes = [sum(n for _, _, n in pieces) for pieces in held]
        if keys == "mxnet":
            assert max(sizes) > 1.4 * sum(sizes) / 5
        else:
            assert max(sizes) - min(sizes) <= 1


@pytest.mark.timeout(200)
@pytest.mark.parametrize("mode, cpus", [("dist_sync", "1"), ("dist_sync_device", "2")])
def test_balanced_keys_are_exact_and_stated(mode, cpus):
    """Real processes: 2 workers, 3 servers, mobilenet with its keys balanced over the servers:
    the pulls are exact, the note gives every server the same load."""
    import re

    from tests.test_dist import launch

    proc = launch(2, 3, "--kv-store", mode, "--network", "mobilenet", "--cpus", cpus,
                  "--server-keys", "balanced", "--num-batches", "2")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "max error 0.000000" in proc.stdout
    loads = re.search(r"per-server load: (.*?) \(keys balanced over the servers\);", proc.stdout)
    assert loads, proc.stdout[-2000:]
    assert len(set(re.findall(r"\d+: ([0-9.]+) MB", loads.group(1)))) == 1, loads.group(1)


def test_receive_order_by_message_or_by_worker_takes_every_push_once():
    """psserver.receive_order: "message" takes every worker's push of a message before the next
    message, worker 0 first and last the last worker; "worker" takes each worker's whole share
    in turn, server s from worker s * W / S. Either way every (message, worker) once, and each
    message's first and last push are the first and last taken."""
    from bandwidth.stores.dist import Cluster
    from bandwidth.stores.psserver import receive_order

    mine = [(3, 0, 10), (7, 10, 30), (11, 30, 35)]
    workers, servers = 5, 2
    for takes in ("message", "worker"):
        for server in range(servers):
            order = receive_order(mine, Cluster(workers, servers, server_takes=takes), server)
            assert sorted((tag, w) for tag, _, _, w, _, _ in order) == \
                sorted((tag, w) for tag, _, _ in mine for w in range(workers))
            for tag, _, _ in mine:
                taken = [(w, first, last) for t, _, _, w, first, last in order if t == tag]
                assert [first for _, first, _ in taken] == [True] + [False] * (workers - 1)
                assert [last for _, _, last in taken] == [False] * (workers - 1) + [True]
    by_message = receive_order(mine, Cluster(workers, servers), 1)
    assert [(tag, w) for tag, _, _, w, _, _ in by_message[:6]] == \
        [(3, 0), (3, 1), (3, 2), (3, 3), (3, 4), (7, 0)]
    by_worker = receive_order(mine, Cluster(workers, servers, server_takes="worker"), 1)
    assert [(tag, w) for tag, _, _, w, _, _ in by_worker[:6]] == \
        [(3, 2), (7, 2), (11, 2), (3, 3), (7, 3), (11, 3)]      # server 1 of 2 starts at 5 // 2
    # A sync server's step i takes turn i: the first worker moves on, first and last with it.
    turned = receive_order(mine, Cluster(workers, servers), 1, turn=3)
    assert [(tag, w, first, last) for tag, _, _, w, first, last in turned[:5]] == \
        [(3, 3, True, False), (3, 4, False, False), (3, 0, False, False), (3, 1, False, False),
         (3, 2, False, True)]
    turned = receive_order(mine, Cluster(workers, servers, server_takes="worker"), 1, turn=4)
    assert [w for _, _, _, w, _, _ in turned[::3]] == [1, 2, 3, 4, 0]       # (2 + 4) % 5 first


@pytest.mark.timeout(200)
def test_servers_taking_a_worker_at_a_time_are_exact_and_stated():
    """Real processes: 4 workers, 2 servers, 4 MB in 1 MB messages and SGD, each server taking
    one worker's share after another: the pulled values are exact, the raw exchange that is
    the run's ceiling (taken in the same order) completes, and the note says how the servers
    took the pushes."""
    from tests.test_dist import launch

    proc = launch(4, 2, "--kv-store", "dist_sync", "--network", "flat:1000000", "--cpus", "1",
                  "--optimizer", "sgd", "--server-takes", "worker", "--num-batches", "2")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "max error 0.000000" in proc.stdout
    assert "each server takes one worker's whole share after another" in proc.stdout
    assert "ceiling:" in proc.stdout


def test_few_workers_take_message_by_message_by_default():
    """Real processes, the default --server-takes auto and --server-keys auto: with two workers a
    server takes message by message over MXNet's key rule, exactly. The rule's threshold
    (WORKER_ORDER_FROM workers and more: a worker's whole share after another, balanced keys) is
    tests/test_predict.py's server_settings test; the roles call that same function with the
    job's counts (execution/roles.py), and a server taking a worker at a time runs for real in
    test_servers_taking_a_worker_at_a_time_are_exact_and_stated (a 33-process run at the
    threshold took 90 s of CI's serial group)."""
    from tests.test_dist import launch

    flags = ("--kv-store", "dist_sync", "--network", "flat:100000", "--cpus", "1",
             "--num-batches", "1", "--warmup", "0", "--no-reference")
    fewer = launch(2, 1, *flags)
    assert fewer.returncode == 0, fewer.stderr[-2000:]
    assert "max error 0.000000" in fewer.stdout
    assert "(MXNet's key rule)" in fewer.stdout
    assert "one worker's whole share" not in fewer.stdout


@pytest.mark.parametrize("flags, said", [
    (["--kv-store", "dist_async", "--server-takes", "worker"],
     "--server-takes worker orders a sync server's pushes; --kv-store dist_async answers every "
     "push on its own"),
    (["--kv-store", "dist_sync", "--server-takes", "worker", "--max-in-flight", "2"],
     "give one of them"),
])
def test_server_takes_worker_where_it_cannot_run_is_one_line(flags, said):
    import subprocess
    import sys

    from conftest import ROOT
    proc = subprocess.run([sys.executable, "bandwidth/measure.py", *flags], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].endswith(said)
