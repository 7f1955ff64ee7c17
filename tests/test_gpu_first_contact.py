"""First contact on one GPU (issue 28), run on the GPU machine (benchmarks/gpu_all.sh runs every
``gpu`` test): each run sees only GPU 0 (CUDA_VISIBLE_DEVICES=0), the commonest machine."""

import os
import re

import pytest
from conftest import requires_cuda, run_cli

pytestmark = [pytest.mark.gpu, requires_cuda]
SMALL = ["--network", "mlp", "--num-batches", "3", "--timeout", "120"]


def one_gpu(*args):
    old = os.environ.get("CUDA_VISIBLE_DEVICES")
    os.environ["CUDA_VISIBLE_DEVICES"] = "0"
    try:
        proc = run_cli(*args, timeout=300)
    finally:
        if old is None:
            del os.environ["CUDA_VISIBLE_DEVICES"]
        else:
            os.environ["CUDA_VISIBLE_DEVICES"] = old
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    return proc.stdout


def figures(stdout):
    return [float(x) for x in re.findall(r"^iter \d+, [0-9.]+ sec, ([0-9.]+) GB/sec per gpu",
                                         stdout, re.M)]


def test_the_default_command_on_one_gpu_measures_two_replicas_and_says_so():
    out = one_gpu(*SMALL)
    assert "# note: one GPU visible: measuring 2 replicas on GPU 0 (as --gpus 0,0)" in out
    assert all(f > 0 for f in figures(out)) and len(figures(out)) == 3
    assert "# summary: kvstore device, 2 replicas on 1 GPU," in out
    assert "peer access: all" not in out
    assert "--no-reference" not in out
    assert "reference: not measured (replicas share a GPU" in out


def test_explicit_gpus_0_keeps_mxnets_zero_with_a_hint():
    out = one_gpu("--gpus", "0", *SMALL)
    assert figures(out) == [0.0, 0.0, 0.0]
    assert "GB/sec per gpu is 0 (MXNet's figure); to measure this GPU run --kv-store device " \
           "--gpus 0,0" in out
    assert "peer access: all 0 GPU pairs" not in out


def test_gpus_0_0_says_two_replicas_on_one_gpu_everywhere():
    out = one_gpu("--gpus", "0,0", *SMALL)
    assert "peer access: not used (2 replicas on 1 GPU" in out
    assert "peer access: all 2 GPU pairs" not in out
    assert "# summary: kvstore device, 2 replicas on 1 GPU," in out
    assert "--no-reference" not in out


def test_nccl_on_one_gpu_prints_algbw_na():
    out = one_gpu("--kv-store", "nccl", *SMALL)
    assert "#   algbw n/a (one rank: an all-reduce over one process moves no byte)" in out
    assert "to measure this GPU run --kv-store device --gpus 0,0" in out
