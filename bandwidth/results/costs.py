"""What a step cost (``--compute``): ``StepCosts.of`` turns the measured compute alone, exchange
alone and step (bandwidth.measurement.costs) into the figures of docs/formulas.md; with
``--framework``, ``FrameworkCosts`` sets the framework's own step beside the schedule's and splits
it into compute, network and the framework's own cost."""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field

from bandwidth.formulas import (compute_slowdown, framework_split, median_ci, overlap_of,
                                paired_exposed_s, performance_ratio, samples_per_s)

GPU_RATE_TARGET = 0.70      # the products reach 70 % of a large matmul's rate on a GPU
CPU_RATE_TARGET = 0.80      # within 20 % of it on CPU devices


# Above this share of the step the host's issuing paces it (the GPU waits for the launches).
HOST_PACED = 0.9


@dataclass(frozen=True)
class FrameworkCosts:
    """The framework's step (--framework) in the same run as the compute alone and the
    schedule's step: its median, and its split (formulas.framework_split)."""

    name: str                        # "torch"
    wraps: str                       # "DistributedDataParallel", "FSDP2 fully_shard"
    step_s: float                    # the framework's step, median
    schedule_step_s: float           # the schedule's step (StepCosts.step_s)
    compute_s: float                 # the split: compute alone,
    network_s: float                 # what the ideal schedule exposes,
    own_s: float                     # and the framework's own cost beyond both (may be < 0)
    performance_ratio: float         # compute alone / the framework's step
    error_max: float = -1.0          # its steps, checked (-1: not)
    notes: list = field(default_factory=list)
    host_s: float | None = None      # the host's time to issue it (backward returning), median;
    #                                  on a GPU only (on CPU devices the host is the device)
    step_ci_s: tuple[float, float] | None = None   # its median's 95 % interval (None: too few)

    @classmethod
    def of(cls, measured: dict, compute_s: float, step_s: float, exposed_s: float,
           device_type: str = "cuda") -> "FrameworkCosts":
        samples = measured["samples"]
        framework_s = statistics.median(s["seconds"] for s in samples)
        hosts = [s["host_seconds"] for s in samples if s.get("host_seconds") is not None]
        compute, network, own = framework_split(framework_s, compute_s, exposed_s)
        return cls(name=measured["name"], wraps=measured["wraps"], step_s=framework_s,
                   schedule_step_s=step_s, compute_s=compute, network_s=network, own_s=own,
                   performance_ratio=performance_ratio(framework_s, compute_s),
                   error_max=max((s["error"] for s in samples), default=-1.0),
                   notes=list(measured.get("notes", [])),
                   host_s=statistics.median(hosts) if hosts and device_type == "cuda" else None,
                   step_ci_s=median_ci([s["seconds"] for s in samples]))

    def share(self, seconds: float) -> float:
        return seconds / self.step_s if self.step_s > 0 else 0.0

    def lines(self, schedule: str) -> list[str]:
        ms = 1e3
        error = "not checked" if self.error_max < 0 else f"{self.error_max:.6f}"
        ratio = self.step_s / self.schedule_step_s if self.schedule_step_s > 0 else 0.0
        return [
            f"#   framework {self.name} ({self.wraps}): step {self.step_s * ms:.3f} ms against "
            f"the {schedule} schedule's {self.schedule_step_s * ms:.3f} ms (x{ratio:.3f}), "
            f"performance ratio {self.performance_ratio:.3f}, max error {error}",
            f"#   the framework's step = compute {self.compute_s * ms:.3f} ms "
            f"({100 * self.share(self.compute_s):.1f} %) + network {self.network_s * ms:.3f} ms "
            f"({100 * self.share(self.network_s):.1f} %, what the {schedule} schedule exposes) "
            f"+ the framework's own {self.own_s * ms:.3f} ms "
            f"({100 * self.share(self.own_s):.1f} %)"] + ([] if self.host_s is None else [
            f"#   the host issued the framework's step in {self.host_s * ms:.3f} ms "
            f"({100 * self.share(self.host_s):.1f} % of it"
            + ("; the host paces it)" if self.share(self.host_s) > HOST_PACED else ")")])

    def to_dict(self) -> dict:
        return dict(asdict(self), compute_share=self.share(self.compute_s),
                    network_share=self.share(self.network_s), own_share=self.share(self.own_s))


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
    framework: FrameworkCosts | None = None     # --framework: the framework's own step
    compute_ci_s: tuple[float, float] | None = None   # the medians' 95 % intervals (None: too
    step_ci_s: tuple[float, float] | None = None      # few iterations, below 6)
    iterations: int = 0

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
                   error_max=max((s["error"] for s in measured["step_samples"]), default=-1.0),
                   framework=None if measured.get("framework") is None else FrameworkCosts.of(
                       measured["framework"], compute_s, step_s, exposed,
                       measured["device_type"]),
                   compute_ci_s=median_ci(computes), step_ci_s=median_ci(steps),
                   iterations=len(steps))

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
            "CPU devices stand for a GPU's compute, leaving the host's cores to the exchange)"
        ] + ([] if self.framework is None else self.framework.lines(self.schedule)) + [
            self._spread_line()]

    def _spread_line(self) -> str:
        """The medians' 95 % confidence intervals: the figures' error."""
        def interval(name: str, ci) -> str:
            return f"{name} {1e3 * ci[0]:.3f}-{1e3 * ci[1]:.3f} ms"
        framework = None if self.framework is None else self.framework.step_ci_s
        if self.step_ci_s is None or self.compute_ci_s is None:
            return (f"#   no 95 % interval of the medians from {self.iterations} iterations "
                    "(6 or more give one: --num-batches)")
        parts = [interval("compute alone", self.compute_ci_s), interval("step", self.step_ci_s)]
        if framework is not None:
            parts.append(interval("the framework's step", framework))
        return (f"#   the medians' 95 % intervals ({self.iterations} iterations): "
                + ", ".join(parts))

    @property
    def _error(self) -> str:
        return "not checked" if self.error_max < 0 else f"{self.error_max:.6f}"

    @property
    def _issued(self) -> str:
        return {"graph": "from a CUDA graph per run of slots",
                "graph per GPU": "from a CUDA graph per run of slots (the compute alone: one "
                                 "CUDA graph per GPU)",
                "step graph": "with the exchange, one CUDA graph per step",
                "eager (--host-ms)": "eagerly, the host's time to issue each layer spent before "
                                     "it (--host-ms)"}.get(
                    self.compute_launch, "eagerly")

    def to_dict(self) -> dict:
        return dict(asdict(self), rate_pct=self.rate_pct, last_exchange_s=self.last_exchange_s,
                    framework=None if self.framework is None else self.framework.to_dict())


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
