"""Pure parts of issue 11's hardening: size sweeps that end, dist_nccl's GPU shares."""

import pytest

from bandwidth.config import MAX_SWEEP_SIZES, parse_size, size_sweep
from bandwidth.distributed import gpu_shares
from bandwidth.errors import ConfigError


def test_a_factor_that_rounds_back_still_grows_every_size():
    sizes = size_sweep(1, 1 << 30, 1.5)
    assert sizes[:6] == [1, 2, 3, 4, 6, 9]
    assert all(b > a for a, b in zip(sizes, sizes[1:]))
    assert sizes[-1] <= 1 << 30 and len(sizes) < MAX_SWEEP_SIZES


def test_a_sweep_of_too_many_sizes_is_refused():
    with pytest.raises(ConfigError, match="more than 1000 sizes"):
        size_sweep(1, 1 << 30, 1.001)


@pytest.mark.parametrize("factor", [float("nan"), float("inf"), 1.0, 0.5, -2.0])
def test_a_factor_that_cannot_sweep_is_refused(factor):
    with pytest.raises(ConfigError, match="-f must be a number greater than 1"):
        size_sweep(1, 1 << 20, factor)


@pytest.mark.parametrize("text", ["1e400", "inf", "nan", "-1", "0", "1e30", "2000000G", "x"])
def test_sizes_out_of_range_are_refused(text):
    with pytest.raises(ConfigError):
        parse_size(text)


GPUS = ("GPU-a", "GPU-b", "GPU-c", "GPU-d")


def test_workers_on_separate_machines_keep_every_gpu():
    assert gpu_shares([("n1", "m1", GPUS[:2]), ("n2", "m2", GPUS[:2])]) == [(0, 1), (0, 1)]


def test_workers_sharing_a_machines_gpus_split_them_in_worker_order():
    workers = [("h", "m1", GPUS), ("h", "m1", GPUS), ("g", "m2", GPUS[:2])]
    assert gpu_shares(workers) == [(0, 1), (2, 3), (0, 1)]


def test_the_same_machine_under_two_names_is_one_machine():
    assert gpu_shares([("127.0.0.1", "m", GPUS[:2]), ("localhost", "m", GPUS[:2])]) == [(0,), (1,)]


def test_disjoint_gpus_on_one_machine_are_kept():
    assert gpu_shares([("h", "m", GPUS[:2]), ("h", "m", GPUS[2:])]) == [(0, 1), (0, 1)]


def test_an_uneven_split_is_refused_naming_the_workers():
    with pytest.raises(ConfigError, match=r"worker 0, worker 1 on h share the same 3 GPUs, "
                                          r"which do not split evenly into 2 workers"):
        gpu_shares([("h", "m", GPUS[:3]), ("h", "m", GPUS[:3])])


def test_overlapping_different_sets_are_refused_naming_the_overlap():
    with pytest.raises(ConfigError, match=r"overlapping but different GPU sets \(shared: GPU-b\)"):
        gpu_shares([("h", "m", GPUS[:2]), ("h", "m", GPUS[1:3])])


def test_shares_of_different_sizes_over_the_job_are_refused():
    with pytest.raises(ConfigError, match="drive 1 to 2 GPUs each"):
        gpu_shares([("h", "m", GPUS[:2]), ("h", "m", GPUS[:2]), ("g", "m2", GPUS[:2])])
