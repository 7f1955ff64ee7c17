"""Rank processes for tests/test_framework_steps.py: every case of the framework's step
(measurement.framework) in one pair of Gloo processes on CPU devices, so that the suite starts two
processes, not a pair per case."""

import os

import torch
import torch.distributed as dist

from bandwidth.backends.registry import store_class
from bandwidth.compute.layers import unit_work
from bandwidth.compute.runner import Runner
from bandwidth.config.options import Config
from bandwidth.measurement import protocol
from bandwidth.measurement.framework import framework_step
from bandwidth.measurement.tasks import open_session
from bandwidth.plan.plan import make_plan
from bandwidth.processes.group import DistGroup


def config(network: str, schedule: str, dtype: str, world: int) -> Config:
    return Config(kv_store="nccl", cpus=world, network=network, schedule=schedule, dtype=dtype,
                  compute="ms", compute_ms=(0.2, 0.4), framework="torch", num_batches=3,
                  bucket_mb=0.01, first_bucket_mb=0.01, seed=5)


def one_case(plan, rank: int, world: int, fault: bool) -> list[float]:
    """Three checked steps of the framework after one warm-up; ``fault``: rank 1 hands the
    backward gradients one too large once (after set-up), which the check must see."""
    session, _ = open_session(plan, [rank], DistGroup(torch.device("cpu")), replicas=world)
    units = unit_work(plan.compute, [(u.name, u.keys) for u in plan.schedule.units],
                      plan.shapes)
    # Milliseconds on CPU devices are timed waits: no calibration needed (it times products).
    runner = Runner(plan.compute, session.replicas[0].device, plan.config.dtype, units)
    step = framework_step(plan, session, runner)
    try:
        if fault and rank == 1:
            prepare = step.prepare

            def wrong_prepare():
                prepare()
                step.flat.add_(1)
            step.prepare = wrong_prepare
        samples, _ = protocol.measure(step, iterations=3, warmup=1, disp_batches=1, check=True,
                                      nbytes=1, bus_factor=1.0)
        return [s.error for s in samples]
    finally:
        step.close()
        runner.close()
        session.close()


def run_cases(rank: int, world: int, port: int, network: str, cases, results) -> None:
    """Each case (schedule, dtype, fault); rank 0 puts (case, errors, notes) into ``results``."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        for schedule, dtype, fault in cases:
            plan = make_plan(config(network, schedule, dtype, world), store_class)
            try:
                errors = one_case(plan, rank, world, fault)
            except Exception as exc:        # the test names the case that failed
                errors = [f"{type(exc).__name__}: {exc}"]
            if rank == 0:
                results.put(((schedule, dtype, fault), errors))
    finally:
        dist.destroy_process_group()
