"""Supervision of the per-device worker processes: failures and hangs end with one clear error
and leave no process behind."""

import os
import time

import pytest

from bandwidth.config import Config
from bandwidth.errors import WorkerError
from bandwidth.spawn import run_ranks


def _alive_workers(marker: str) -> list[int]:
    pids = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if marker.encode() in f.read():
                        pids.append(int(pid))
            except OSError:
                pass
    return pids


def test_a_failing_rank_is_named_with_its_status_and_message():
    config = Config(network="no-such-net", cpus=2).to_dict()
    with pytest.raises(WorkerError, match=r"rank \d exited with status 2: error: unknown network"):
        run_ranks({"config": config, "tasks": ["measure"]}, 2, timeout_s=60)


def test_a_hung_run_is_stopped_at_the_deadline_and_nothing_is_left():
    config = Config(network="resnet", num_layers=50, kv_store="nccl", cpus=2, num_batches=1000,
                    seed=987654321).to_dict()
    start = time.monotonic()
    with pytest.raises(WorkerError, match="did not finish within 3 s"):
        run_ranks({"config": config, "tasks": ["measure"]}, 2, timeout_s=3)
    assert time.monotonic() - start < 20
    time.sleep(0.5)
    assert _alive_workers("bandwidth.worker") == []
