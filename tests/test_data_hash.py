"""The test data's hash, computed in wrapping int32 (bandwidth.arrays.data), against the same hash
written out in Python integers, at small indices and past 2**31 and 2**32 (llama-8b's arrays hold
8 G elements); and the one-thread rule for the untimed passes over the data."""

import pytest
import torch

from bandwidth.arrays import data
from bandwidth.hardware import cputhreads


def python_base_delta(index: int, seed: int) -> tuple[int, int]:
    h = ((index + seed * 0x9E3779B1 + 1) * 2654435761) & 0xFFFFFFFF
    h ^= h >> 15
    return ((h & 0xFFFF) * 65 >> 16) - 32, ((h >> 16) * 3 >> 16) - 1


@pytest.mark.parametrize("start,seed", [(0, 0), (12345, 7), (2**31 - 5, 1), (2**32 - 3, 2),
                                        (10**10 + 11, 99)])
def test_hash_matches_its_python_form(start, seed):
    count = 4099
    base, delta = data._base_delta(start, start + count, seed, torch.device("cpu"))
    want = [python_base_delta(start + i, seed) for i in range(count)]
    assert base.tolist() == [b for b, _ in want]
    assert delta.tolist() == [d for _, d in want]
    assert set(delta.tolist()) == {-1, 0, 1}
    assert min(base.tolist()) >= -32 and max(base.tolist()) <= 32


def test_fill_and_expected_sum_agree():
    numel, replicas, seed = 3 * data.CHUNK_ELEMENTS // 2, 5, 3
    total = torch.zeros(numel, dtype=torch.float64)
    for rank in range(replicas):
        g = torch.empty(numel)
        data.fill_gradient(g, rank, seed)
        total += g.double()
    assert torch.equal(total, data.expected_sum(0, numel, replicas, seed, "cpu"))


def test_data_threads_rule_and_context():
    assert cputhreads.data_threads(False, None, True) == 1
    assert cputhreads.data_threads(False, 4, True) is None         # --cpu-threads keeps its N
    assert cputhreads.data_threads(False, None, False) is None     # the trial chose them
    assert cputhreads.data_threads(True, None, True) is None       # GPUs: no CPU passes
    before = torch.get_num_threads()
    with cputhreads.threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
    with cputhreads.threads(None):
        assert torch.get_num_threads() == before


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_the_gpu_computes_the_same_data():
    # int32 products and additions wrap on the GPU as on the CPU
    for start, seed in [(0, 0), (2**31 - 5, 1), (10**10 + 11, 99)]:
        cpu = data._base_delta(start, start + (1 << 16), seed, torch.device("cpu"))
        gpu = data._base_delta(start, start + (1 << 16), seed, torch.device("cuda"))
        assert all(torch.equal(a, b.cpu()) for a, b in zip(cpu, gpu))
