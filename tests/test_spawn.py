"""Supervision of the per-device worker processes: failures and hangs end with one clear error
and leave no process behind."""

import time

import pytest

from bandwidth.config import Config
from bandwidth.errors import WorkerError
from bandwidth.spawn import run_ranks


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
    """The pids of every worker process bandwidth.spawn starts during the test."""
    import subprocess

    import bandwidth.spawn

    pids = []
    real = subprocess.Popen

    def recording(*args, **kwargs):
        proc = real(*args, **kwargs)
        pids.append(proc.pid)
        return proc

    monkeypatch.setattr(bandwidth.spawn.subprocess, "Popen", recording)
    return pids


def test_a_failing_rank_is_named_with_its_status_and_message():
    config = Config(network="no-such-net", cpus=2).to_dict()
    with pytest.raises(WorkerError, match=r"rank \d exited with status 2: error: unknown network"):
        run_ranks({"config": config, "tasks": ["measure"]}, 2, timeout_s=60)


def test_a_hung_run_is_stopped_at_the_deadline_and_nothing_is_left(started):
    config = Config(network="resnet", num_layers=50, kv_store="nccl", cpus=2, num_batches=1000,
                    seed=987654321).to_dict()
    start = time.monotonic()
    with pytest.raises(WorkerError, match="did not finish within 3 s"):
        run_ranks({"config": config, "tasks": ["measure"]}, 2, timeout_s=3)
    assert time.monotonic() - start < 20
    assert len(started) == 2
    assert _alive(started) == []
