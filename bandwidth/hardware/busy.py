"""Is a GPU busy before we measure it? Another process holding it, or clocks held down.

A figure measured on a GPU that another job is using, or whose clocks are held down by a thermal
or power slowdown or by an application-clock setting far below the maximum, says nothing about
the interconnect: a CI gate must name that before it measures, and refuse (unless forced), not
report a regression afterwards. The facts come from NVML (``pynvml``, imported only here):

    states, why_not = read_states([0, 1], bus_ids)    # None and a reason without NVML
    busy_reasons(states, own_pids={os.getpid()})      # ["GPU 1: used by another process ..."]

The current SM clock of an idle GPU reads low by design, so it is not the test: the application
clock (what the GPU runs kernels at) against the maximum, and the throttle reasons that hold the
clock down whatever the load (hardware slowdown, thermal slowdowns, power brake), are.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from bandwidth.hardware.topology import with_nvml

# nvmlClocksThrottleReasons (also nvmlClocksEventReasons): the ones that hold clocks down
# whatever the work, with the words a person reads.
HOLDING_REASONS = {0x8: "hardware slowdown", 0x20: "software thermal slowdown",
                   0x40: "hardware thermal slowdown", 0x80: "hardware power brake"}
LOW_CLOCK_FRACTION = 0.5     # an application clock below half the maximum is "far below"


@dataclass(frozen=True)
class GpuState:
    gpu: int
    processes: tuple[tuple[int, int | None], ...] = ()    # (pid, bytes used or None)
    app_clock_mhz: int | None = None                      # the SM application clock
    max_clock_mhz: int | None = None                      # the SM maximum
    throttle_mask: int | None = None
    errors: dict = field(default_factory=dict)


def busy_reasons(states: list[GpuState], own_pids: set[int]) -> list[str]:
    """One phrase per busy GPU, naming it and why; [] where every GPU is free."""
    out = []
    for s in states:
        why = []
        others = [(pid, used) for pid, used in s.processes if pid not in own_pids]
        if others:
            shown = ", ".join(f"pid {pid}" + ("" if used is None else f" ({used / 2**30:.1f} GiB)")
                              for pid, used in others[:3])
            more = f" and {len(others) - 3} more" if len(others) > 3 else ""
            why.append(f"used by {len(others)} other process{'es' if len(others) > 1 else ''} "
                       f"({shown}{more})")
        if s.app_clock_mhz and s.max_clock_mhz and \
                s.app_clock_mhz < LOW_CLOCK_FRACTION * s.max_clock_mhz:
            why.append(f"application clock {s.app_clock_mhz} MHz of a maximum "
                       f"{s.max_clock_mhz} MHz")
        if s.throttle_mask:
            held = [text for bit, text in HOLDING_REASONS.items() if s.throttle_mask & bit]
            if held:
                why.append("clocks held down: " + ", ".join(held))
        if why:
            out.append(f"GPU {s.gpu}: " + "; ".join(why))
    return out


def read_states(gpus: list[int], bus_ids: list[str | None] | None = None
                ) -> tuple[list[GpuState] | None, str | None]:
    """(states, None), or (None, why NVML could not tell)."""
    return with_nvml(gpus, lambda nvml: [_state(nvml, gpu, bus_id) for gpu, bus_id
                                         in zip(gpus, bus_ids or [None] * len(gpus))])


def _call(nvml, errors: dict, name: str, *args):
    fn = getattr(nvml, name, None)
    if fn is None:
        errors[name] = "not in this pynvml"
        return None
    try:
        return fn(*args)
    except nvml.NVMLError as exc:
        errors[name] = str(exc)
        return None


def _state(nvml, gpu: int, bus_id: str | None) -> GpuState:
    errors: dict = {}
    handle = _call(nvml, errors, "nvmlDeviceGetHandleByPciBusId", bus_id.encode()) if bus_id \
        else _call(nvml, errors, "nvmlDeviceGetHandleByIndex", gpu)
    if handle is None:
        return GpuState(gpu, errors=errors)
    procs = _call(nvml, errors, "nvmlDeviceGetComputeRunningProcesses", handle) or []
    sm = getattr(nvml, "NVML_CLOCK_SM", 1)
    mask = _call(nvml, errors, "nvmlDeviceGetCurrentClocksEventReasons", handle)
    if mask is None:
        mask = _call(nvml, errors, "nvmlDeviceGetCurrentClocksThrottleReasons", handle)
    return GpuState(
        gpu, tuple((int(p.pid), getattr(p, "usedGpuMemory", None)) for p in procs),
        _call(nvml, errors, "nvmlDeviceGetApplicationsClock", handle, sm),
        _call(nvml, errors, "nvmlDeviceGetMaxClockInfo", handle, sm), mask, errors)
