"""What a step cost (``--compute``): ``StepCosts.of`` turns the measured compute alone, exchange
alone and step (bandwidth.measurement.costs) into the figures of docs/formulas.md."""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field

from bandwidth.formulas import (compute_slowdown, exposed_s, overlap, performance_ratio,
                                samples_per_s)

GPU_RATE_TARGET = 0.70      # the products reach 70 % of a large matmul's rate on a GPU
CPU_RATE_TARGET = 0.80      # within 20 % of it on CPU devices


@dataclass(frozen=True)
class StepCosts:
    batch_size: int
    devices: int                     # devices that each take a batch per step
    compute_s: float                 # medians of the run's iterations
    exchange_s: float
    step_s: float
    exposed_s: float
    overlap: float
    compute_slowdown: float          # compute inside the traced step against alone
    samples_per_s: float
    performance_ratio: float
    compute_rate_flops: float        # FLOPs of a step over its compute alone
    large_matmul_rate_flops: float   # one large product on this device, same run
    calibrated_rate_flops: float
    step_flops: int
    device_type: str
    schedule: str = "flat"
    timeline: list = field(default_factory=list)

    @property
    def rate_pct(self) -> float:
        return 100 * self.compute_rate_flops / self.large_matmul_rate_flops

    @property
    def rate_target_pct(self) -> float:
        return 100 * (GPU_RATE_TARGET if self.device_type == "cuda" else CPU_RATE_TARGET)

    @classmethod
    def of(cls, measured: dict, exchange_s: float, batch_size: int, devices: int) -> "StepCosts":
        compute_s = statistics.median(s["seconds"] for s in measured["compute_samples"])
        step_s = statistics.median(s["seconds"] for s in measured["step_samples"])
        busy: dict[str, float] = {}       # each device's compute time inside the traced step
        for e in measured["timeline"]:
            if e["lane"] == "compute":
                busy[e["device"]] = busy.get(e["device"], 0.0) + e["end_s"] - e["start_s"]
        compute_in_step = max(busy.values()) if busy else compute_s
        return cls(batch_size=batch_size, devices=devices, compute_s=compute_s,
                   exchange_s=exchange_s, step_s=step_s,
                   exposed_s=exposed_s(step_s, compute_s),
                   overlap=overlap(step_s, compute_s, exchange_s),
                   compute_slowdown=compute_slowdown(compute_in_step, compute_s),
                   samples_per_s=samples_per_s(batch_size, devices, step_s),
                   performance_ratio=performance_ratio(step_s, compute_s),
                   compute_rate_flops=measured["compute_rate_flops"],
                   large_matmul_rate_flops=measured["large_matmul_rate_flops"],
                   calibrated_rate_flops=measured["calibrated_rate_flops"],
                   step_flops=measured["step_flops"], device_type=measured["device_type"],
                   schedule=measured.get("schedule", "flat"),
                   timeline=measured["timeline"])

    def lines(self) -> list[str]:
        """The summary's lines on what the step cost."""
        ms = 1e3
        return [
            f"#   step at batch {self.batch_size} x {self.devices} devices: compute alone "
            f"{self.compute_s * ms:.3f} ms, exchange alone {self.exchange_s * ms:.3f} ms, step "
            f"{self.step_s * ms:.3f} ms; exposed {self.exposed_s * ms:.3f} ms, overlap "
            f"{100 * self.overlap:.1f} %, compute slowdown x{self.compute_slowdown:.3f}",
            f"#   {self.samples_per_s:.1f} samples/s, performance ratio "
            f"{self.performance_ratio:.3f} (compute alone / step; 1: the network costs nothing)",
            f"#   compute rate {self.compute_rate_flops / 1e12:.3f} TFLOP/s against a large "
            f"matmul's {self.large_matmul_rate_flops / 1e12:.3f} TFLOP/s in the same run: "
            f"{self.rate_pct:.1f} % (target {self.rate_target_pct:.0f} % on "
            f"{'a GPU' if self.device_type == 'cuda' else 'CPU devices'})"
            if self.step_flops else
            "#   compute: timed waits of the milliseconds asked (--compute-ms / --compute-file on "
            "CPU devices stand for a GPU's compute, leaving the host's cores to the exchange)"]

    def to_dict(self) -> dict:
        return dict(asdict(self), rate_pct=self.rate_pct)


def step_costs(measured: dict, exchange_s: float, batch_size: int,
               devices: int) -> StepCosts | None:
    """The StepCosts of a measure_task dict (None: measured without --compute)."""
    if measured.get("costs") is None:
        return None
    return StepCosts.of(measured["costs"], exchange_s, batch_size, devices)
