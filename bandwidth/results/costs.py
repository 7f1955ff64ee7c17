"""What a step cost (``--compute``): ``StepCosts.of`` turns the measured compute alone, exchange
alone and step (bandwidth.measurement.costs) into the figures of docs/formulas.md."""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field

from bandwidth.formulas import (compute_slowdown, overlap_of, paired_exposed_s,
                                performance_ratio, samples_per_s)

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
    # "graph": each run of compute slots one CUDA graph replay per GPU; "step graph": the whole
    # step (compute and exchange) one replay, and the compute alone another
    compute_launch: str = "eager"
    timeline: list = field(default_factory=list)
    error_max: float = -1.0          # the steps with compute, checked as the exchange's (-1: not)

    @property
    def rate_pct(self) -> float:
        return 100 * self.compute_rate_flops / self.large_matmul_rate_flops

    @property
    def last_exchange_s(self) -> float:
        """The traced step's last unit's exchange (the one that starts last; on several devices,
        the longest of theirs): what no schedule can hide, since the forward that follows needs
        it (issue 26's overlap target: exposed at most this + 10 % of the exchange alone)."""
        last: dict[str, tuple[float, float]] = {}
        for e in self.timeline:
            if e["lane"] == "exchange" and e["start_s"] >= last.get(e["device"], (-1.0,))[0]:
                last[e["device"]] = (e["start_s"], e["end_s"] - e["start_s"])
        return max((seconds for _, seconds in last.values()), default=0.0)

    @property
    def rate_target_pct(self) -> float:
        return 100 * (GPU_RATE_TARGET if self.device_type == "cuda" else CPU_RATE_TARGET)

    @classmethod
    def of(cls, measured: dict, exchange_s: float, batch_size: int, devices: int) -> "StepCosts":
        computes = [s["seconds"] for s in measured["compute_samples"]]
        steps = [s["seconds"] for s in measured["step_samples"]]
        compute_s, step_s = statistics.median(computes), statistics.median(steps)
        compute_in_step = busy_s(measured["timeline"]) or compute_s
        exposed = paired_exposed_s(steps, computes)
        return cls(batch_size=batch_size, devices=devices, compute_s=compute_s,
                   exchange_s=exchange_s, step_s=step_s, exposed_s=exposed,
                   overlap=overlap_of(exposed, exchange_s),
                   compute_slowdown=compute_slowdown(compute_in_step, compute_s),
                   samples_per_s=samples_per_s(batch_size, devices, step_s),
                   performance_ratio=performance_ratio(step_s, compute_s),
                   compute_rate_flops=measured["compute_rate_flops"],
                   large_matmul_rate_flops=measured["large_matmul_rate_flops"],
                   calibrated_rate_flops=measured["calibrated_rate_flops"],
                   step_flops=measured["step_flops"], device_type=measured["device_type"],
                   schedule=measured.get("schedule", "flat"),
                   compute_launch=measured.get("compute_launch", "eager"),
                   timeline=measured["timeline"],
                   error_max=max((s["error"] for s in measured["step_samples"]), default=-1.0))

    def lines(self) -> list[str]:
        """The summary's lines on what the step cost."""
        ms = 1e3
        return [
            f"#   step at batch {self.batch_size} x {self.devices} devices: compute alone "
            f"{self.compute_s * ms:.3f} ms, exchange alone {self.exchange_s * ms:.3f} ms, step "
            f"{self.step_s * ms:.3f} ms; exposed {self.exposed_s * ms:.3f} ms (the last "
            f"unit's exchange {self.last_exchange_s * ms:.3f} ms), overlap "
            f"{100 * self.overlap:.1f} %, compute slowdown x{self.compute_slowdown:.3f}",
            f"#   {self.samples_per_s:.1f} samples/s, performance ratio "
            f"{self.performance_ratio:.3f} (compute alone / step; 1: the network costs "
            f"nothing), max error {self._error} in the steps with compute",
            f"#   compute rate {self.compute_rate_flops / 1e12:.3f} TFLOP/s against a large "
            f"matmul's {self.large_matmul_rate_flops / 1e12:.3f} TFLOP/s in the same run: "
            f"{self.rate_pct:.1f} % (target {self.rate_target_pct:.0f} % on "
            f"{'a GPU' if self.device_type == 'cuda' else 'CPU devices'}"
            f"{'; products issued ' + self._issued if self.device_type == 'cuda' else ''})"
            if self.step_flops else
            "#   compute: timed waits of the milliseconds asked (--compute-ms / --compute-file on "
            "CPU devices stand for a GPU's compute, leaving the host's cores to the exchange)"]

    @property
    def _error(self) -> str:
        return "not checked" if self.error_max < 0 else f"{self.error_max:.6f}"

    @property
    def _issued(self) -> str:
        return {"graph": "from a CUDA graph per run of slots",
                "graph per GPU": "from a CUDA graph per run of slots (the compute alone: one "
                                 "CUDA graph per GPU)",
                "step graph": "with the exchange, one CUDA graph per step"}.get(
                    self.compute_launch, "eagerly")

    def to_dict(self) -> dict:
        return dict(asdict(self), rate_pct=self.rate_pct, last_exchange_s=self.last_exchange_s)


def busy_s(timeline: list[dict]) -> float:
    """The compute time inside the traced step of the busiest physical device: the union of its
    replicas' compute spans (replicas sharing a GPU run one after another on its stream, so
    their spans add up; CPU replicas may run at once, counted once)."""
    spans: dict[str, list[tuple[float, float]]] = {}
    for e in timeline:
        if e["lane"] == "compute":
            spans.setdefault(e.get("on", e["device"]), []).append((e["start_s"], e["end_s"]))
    busiest = 0.0
    for intervals in spans.values():
        total, reach = 0.0, float("-inf")
        for start, end in sorted(intervals):
            if end > reach:
                total += end - max(start, reach)
                reach = end
        busiest = max(busiest, total)
    return busiest


def step_costs(measured: dict, exchange_s: float, batch_size: int,
               devices: int) -> StepCosts | None:
    """The StepCosts of a measure_task dict (None: measured without --compute)."""
    if measured.get("costs") is None:
        return None
    return StepCosts.of(measured["costs"], exchange_s, batch_size, devices)
