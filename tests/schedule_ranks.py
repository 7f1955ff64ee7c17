"""Rank processes for tests/test_schedules_cpu.py: every scheduled case of the process-per-device
modes in one pair of Gloo processes (so that the suite starts two processes, not one pair per
case)."""

import os

import torch
import torch.distributed as dist

from bandwidth.arrays.data import expected_sum
from bandwidth.hardware.devices import DeviceSet
from bandwidth.measurement import protocol
from bandwidth.measurement.session import Session
from bandwidth.processes.group import DistGroup


def run_cases(rank: int, world: int, port: int, shapes, cases, results) -> None:
    """Each case (schedule, dtype, optimizer): three checked steps after one warm-up; rank 0 puts
    (case, errors, outputs equal the closed form) into ``results``."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        for schedule, dtype, optimizer in cases:
            s = Session("nccl", shapes, DeviceSet("cpu", tuple(range(world))), [rank],
                        DistGroup(torch.device("cpu")), dtype=dtype, optimizer=optimizer, seed=5,
                        chunk_mb=None, replicas=world, schedule=schedule)
            samples, _ = protocol.measure(s, iterations=3, warmup=1, disp_batches=1, check=True,
                                          nbytes=1, bus_factor=1.0)
            numel = s.layout.numel
            ref = expected_sum(0, numel, world, 5, "cpu")
            if optimizer != "none":
                ref = ref * -0.04            # 4 steps of sgd (lr 0.01) from zero
            exact = bool(torch.equal(s.replicas[0].outputs.double(), ref)) \
                if dtype == "float32" and optimizer == "none" else None
            s.close()
            if rank == 0:
                results.put(((schedule.name, dtype, optimizer), [x.error for x in samples], exact))
    finally:
        dist.destroy_process_group()
