import pytest

from bandwidth.formulas import algbw_gbps, allreduce_factor, busbw_gbps, mxnet_size_mb


def test_allreduce_factor():
    assert allreduce_factor(1) == 0.0
    assert allreduce_factor(2) == 1.0
    assert allreduce_factor(8) == pytest.approx(1.75)


def test_mxnet_readme_figures_follow_from_the_formula():
    # MXNet README: 257.991328 MB, 2 GPUs, 0.023242 s -> 11.100222 GB/sec per gpu; 8 GPUs 0.102321 s.
    nbytes = 257_991_328
    assert busbw_gbps(nbytes, 0.023242, allreduce_factor(2)) == pytest.approx(11.100222, abs=1e-5)
    assert busbw_gbps(nbytes, 0.102321, allreduce_factor(8)) == pytest.approx(4.412429, abs=1e-5)


def test_algbw_and_size():
    assert algbw_gbps(2e9, 0.5) == 4.0
    assert algbw_gbps(1, 0) == 0.0
    assert mxnet_size_mb(257_991_328) == 257.991328


def test_one_gpu_device_bound():
    from bandwidth.formulas import one_gpu_device_bound_gbps
    # Memory that moves at most 2800 GB/s of traffic: 7(n-1)S per step, busbw 2M/(7n).
    assert one_gpu_device_bound_gbps(2, 2800.0) == pytest.approx(400.0)
    assert one_gpu_device_bound_gbps(4, 2800.0) == pytest.approx(200.0)
    assert one_gpu_device_bound_gbps(8, 4200.0) == pytest.approx(150.0)
    assert one_gpu_device_bound_gbps(1, 2800.0) == 0.0


def test_step_costs():
    from bandwidth.formulas import (compute_slowdown, overlap_of, paired_exposed_s,
                                    performance_ratio, samples_per_s, serial_step_s)

    def exposed_s(step, compute):          # one round
        return paired_exposed_s([step], [compute])

    def overlap(step, compute, exchange):
        return overlap_of(exposed_s(step, compute), exchange)
    # compute 30 ms, exchange 20 ms alone, the step 35 ms: 5 ms exposed, 3/4 of it hidden.
    assert exposed_s(0.035, 0.030) == pytest.approx(0.005)
    assert overlap(0.035, 0.030, 0.020) == pytest.approx(0.75)
    assert performance_ratio(0.035, 0.030) == pytest.approx(30 / 35)
    assert samples_per_s(32, 4, 0.035) == pytest.approx(128 / 0.035)
    assert compute_slowdown(0.033, 0.030) == pytest.approx(1.1)
    # no overlap: the serial step exposes the whole exchange
    assert overlap(serial_step_s(0.03, 0.02), 0.03, 0.02) == pytest.approx(0.0)
    assert performance_ratio(serial_step_s(0.03, 0.02), 0.03) == pytest.approx(0.6)
    # a step a hair faster than compute alone is noise: nothing exposed, all hidden, ratio 1
    assert exposed_s(0.0299, 0.03) == 0.0
    assert overlap(0.0299, 0.03, 0.02) == 1.0 and performance_ratio(0.0299, 0.03) == 1.0
    # a step longer than compute + exchange hides nothing (overlap floors at 0)
    assert overlap(0.06, 0.03, 0.02) == 0.0


def test_exposed_is_the_median_of_each_rounds_difference():
    from bandwidth.formulas import overlap_of, paired_exposed_s
    # Rounds of 18-22 ms of compute; each round's step is 0.2 ms longer than its own compute
    # alone, except one round disturbed by 5 ms. The medians' difference (21.2 - 19.5 ms) reads
    # 1.7 ms exposed; the median of each round's difference reads 0.2 ms.
    compute = [0.019, 0.021, 0.0195, 0.022, 0.018]
    step = [c + 0.0002 for c in compute]
    step[2] += 0.005
    assert paired_exposed_s(step, compute) == pytest.approx(0.0002)
    assert paired_exposed_s([0.01, 0.01], [0.011, 0.012]) == 0.0      # floored
    assert paired_exposed_s([], []) == 0.0
    assert overlap_of(0.0002, 0.0008) == pytest.approx(0.75)
    assert overlap_of(0.001, 0.0008) == 0.0 and overlap_of(0.0, 0.0) == 1.0


def test_fsdp_factor_is_two_all_gathers_and_a_reduce_scatter():
    from bandwidth.formulas import fsdp_factor
    assert fsdp_factor(1) == 0.0
    assert fsdp_factor(2) == 1.5 and fsdp_factor(4) == 2.25
    assert fsdp_factor(8) == 1.5 * allreduce_factor(8)


def test_the_last_units_exchange_is_the_one_that_starts_last_on_each_device():
    from bandwidth.results.costs import StepCosts

    def event(device, lane, start, end):
        return {"device": device, "lane": lane, "label": "x", "start_s": start, "end_s": end}

    timeline = [event("replica 0", "exchange", 0.000, 0.030),    # the first, longest
                event("replica 0", "compute", 0.000, 0.020),
                event("replica 0", "exchange", 0.021, 0.024),    # replica 0's last: 3 ms
                event("replica 1", "exchange", 0.001, 0.010),
                event("replica 1", "exchange", 0.015, 0.020)]    # replica 1's last: 5 ms
    costs = StepCosts(32, 2, 0.03, 0.02, 0.035, 0.005, 0.75, 1.0, 1.0, 0.9, 0.0, 1.0, 1.0, 0,
                      "cpu", timeline=timeline)
    assert costs.last_exchange_s == pytest.approx(0.005)
    assert costs.to_dict()["last_exchange_s"] == pytest.approx(0.005)
    assert "exposed 5.000 ms (the last unit's exchange 5.000 ms)" in costs.lines()[0]
    assert StepCosts(32, 2, 0.03, 0.02, 0.035, 0.005, 0.75, 1.0, 1.0, 0.9, 0.0, 1.0, 1.0, 0,
                     "cpu").last_exchange_s == 0.0
