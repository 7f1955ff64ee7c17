"""Supervision of the per-device worker processes: failures and hangs end with one clear error
and leave no process behind."""

import os
import signal
import threading
import time

import pytest

from bandwidth.config.options import Config
from bandwidth.errors import WorkerError
from bandwidth.processes.spawn import run_ranks


def _alive(pids: list[int]) -> list[int]:
    alive = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as stat:
                if stat.read().split(")")[-1].split()[0] != "Z":
                    alive.append(pid)
        except OSError:
            pass
    return alive


@pytest.fixture
def started(monkeypatch):
    """The pids of every worker process bandwidth.processes.spawn starts during the test."""
    import subprocess

    import bandwidth.processes.spawn

    pids = []
    real = subprocess.Popen

    def recording(*args, **kwargs):
        proc = real(*args, **kwargs)
        pids.append(proc.pid)
        return proc

    monkeypatch.setattr(bandwidth.processes.spawn.subprocess, "Popen", recording)
    return pids


def test_a_failing_rank_is_named_with_its_status_and_message():
    config = Config(network="no-such-net", cpus=2).to_dict()
    with pytest.raises(WorkerError, match=r"rank \d \(pid \d+\) exited with status 2: error: unknown network"):
        run_ranks({"config": config, "tasks": ["measure"]}, 2, timeout_s=60)


def test_a_stopped_rank_is_named_within_the_timeout_and_nothing_is_left(started):
    """--timeout bounds how long a rank waits for another: SIGSTOP rank 1 in a long run, and
    the run ends about --timeout later, naming rank 1 (not rank 0, which gave up waiting)."""
    config = Config(network="mlp", image_shape=(1, 28, 28), num_classes=10, kv_store="nccl",
                    cpus=2, num_batches=100000000, seed=987654321, timeout_s=3).to_dict()

    def stop_rank_1():
        while len(started) < 2:
            time.sleep(0.05)
        time.sleep(6.0)                  # past the imports, inside the measurement
        os.kill(started[1], signal.SIGSTOP)

    threading.Thread(target=stop_rank_1, daemon=True).start()
    start = time.monotonic()
    with pytest.raises(WorkerError, match=r"rank 1 \(pid \d+\) stopped answering: stopped by a "
                                          r"signal.*3 s without progress \(--timeout\)"):
        run_ranks({"config": config, "tasks": ["measure"]}, 2, timeout_s=3)
    assert time.monotonic() - start < 30
    assert len(started) == 2
    assert _alive(started) == []


def test_a_total_cap_stops_a_long_run_and_nothing_is_left(started):
    """The ceiling's --timeout caps the whole child run (total_s), progress or not."""
    config = Config(network="mlp", image_shape=(1, 28, 28), num_classes=10, kv_store="nccl",
                    cpus=2, num_batches=100000000, seed=987654321).to_dict()
    start = time.monotonic()
    with pytest.raises(WorkerError, match="did not finish within 8 s"):
        run_ranks({"config": config, "tasks": ["measure"]}, 2, timeout_s=300, total_s=8)
    assert time.monotonic() - start < 30
    assert len(started) == 2
    assert _alive(started) == []
