"""Schedules on GPUs through their CUDA code paths (benchmarks/gpu_all.sh runs them; skipped
without CUDA): ``backward`` on ``device`` with two replicas sharing GPU 0 and on ``local``, and,
with two GPUs, ``ddp`` and ``fsdp`` on ``nccl``. Scheduled steps are issued eagerly (no CUDA
graph)."""

import pytest
import torch
from conftest import requires_cuda

from bandwidth.config.options import Config
from bandwidth.run import run

pytestmark = [pytest.mark.gpu, requires_cuda]

GPUS = tuple(range(torch.cuda.device_count())) if torch.cuda.is_available() else ()
RESNET50 = dict(network="resnet", num_layers=50, num_batches=3)


@pytest.mark.parametrize("kv, gpus", [("device", (0, 0)), ("local", (0,)), ("local", GPUS)])
@pytest.mark.parametrize("dtype, bound", [("float32", 0.0), ("bfloat16", 5e-2)])
def test_backward_on_one_gpu_is_exact(kv, gpus, dtype, bound):
    result = run(Config(kv_store=kv, gpus=gpus, schedule="backward", dtype=dtype, **RESNET50))
    assert all(0 <= s.error <= bound for s in result.samples), result.samples
    assert result.launch == "eager" and result.summary.busbw_median >= 0
    assert any("schedule backward" in note for note in result.notes)


@pytest.mark.skipif(len(GPUS) < 2, reason="needs two GPUs")
@pytest.mark.parametrize("schedule", ["backward", "ddp", "fsdp"])
def test_nccl_schedules_on_gpus_are_exact(schedule):
    result = run(Config(kv_store="nccl", gpus=GPUS, schedule=schedule, **RESNET50))
    assert [s.error for s in result.samples] == [0.0, 0.0, 0.0]
