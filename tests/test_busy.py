"""A busy GPU is named before measuring (issue 20, item 4): recorded NVML facts of busy and free
GPUs, read through a stand-in for pynvml with NVML's own call names, and the refusal in
measure.py's check."""

import sys
import types

import pytest

from bandwidth.errors import ConfigError
from bandwidth.hardware.busy import GpuState, busy_reasons, read_states

# An H100 SXM's SM clocks: 1980 MHz maximum (NVML's max clock and default application clock).
FREE = GpuState(0, processes=(), app_clock_mhz=1980, max_clock_mhz=1980, throttle_mask=0x1)


def test_a_free_gpu_is_not_busy():
    assert busy_reasons([FREE], own_pids={100}) == []
    # our own process holding it is not "another" process
    assert busy_reasons([GpuState(0, ((100, 512 << 20),), 1980, 1980, 0)], {100}) == []


def test_another_process_is_named_with_its_memory():
    state = GpuState(1, ((4242, 20 << 30), (100, 1 << 30)), 1980, 1980, 0)
    assert busy_reasons([FREE, state], {100}) == [
        "GPU 1: used by 1 other process (pid 4242 (20.0 GiB))"]
    many = GpuState(0, tuple((p, None) for p in range(1, 6)), 1980, 1980, 0)
    assert busy_reasons([many], set()) == [
        "GPU 0: used by 5 other processes (pid 1, pid 2, pid 3 and 2 more)"]


def test_clocks_held_down_are_named():
    slow_app = GpuState(0, (), 600, 1980, 0x2)
    thermal = GpuState(1, (), 1980, 1980, 0x40 | 0x1)
    power_cap_only = GpuState(2, (), 1980, 1980, 0x4)       # at the power limit under load: fine
    assert busy_reasons([slow_app, thermal, power_cap_only], set()) == [
        "GPU 0: application clock 600 MHz of a maximum 1980 MHz",
        "GPU 1: clocks held down: hardware thermal slowdown"]


class _Proc:
    def __init__(self, pid, used):
        self.pid, self.usedGpuMemory = pid, used


def _fake_nvml(per_gpu: dict) -> types.ModuleType:
    """A stand-in for pynvml answering from recorded facts, with NVML's call names."""
    nvml = types.ModuleType("pynvml")

    class NVMLError(Exception):
        pass
    nvml.NVMLError = NVMLError
    nvml.NVML_CLOCK_SM = 1
    nvml.nvmlInit = lambda: None
    nvml.nvmlShutdown = lambda: None
    nvml.nvmlDeviceGetHandleByIndex = lambda i: i
    nvml.nvmlDeviceGetComputeRunningProcesses = lambda h: [_Proc(*p) for p in per_gpu[h]["procs"]]
    nvml.nvmlDeviceGetApplicationsClock = lambda h, clock: per_gpu[h]["app"]
    nvml.nvmlDeviceGetMaxClockInfo = lambda h, clock: 1980

    def reasons(h):
        if per_gpu[h].get("no_events"):
            raise NVMLError("Not Supported")
        return per_gpu[h]["mask"]
    nvml.nvmlDeviceGetCurrentClocksEventReasons = reasons
    nvml.nvmlDeviceGetCurrentClocksThrottleReasons = lambda h: per_gpu[h]["mask"]
    return nvml


def test_states_are_read_through_nvml(monkeypatch):
    facts = {0: {"procs": [], "app": 1980, "mask": 0x1},
             1: {"procs": [(77, 3 << 30)], "app": 1980, "mask": 0x8, "no_events": True}}
    monkeypatch.setitem(sys.modules, "pynvml", _fake_nvml(facts))
    states, why = read_states([0, 1])
    assert why is None
    assert states[1].processes == ((77, 3 << 30),) and states[1].throttle_mask == 0x8
    assert busy_reasons(states, set()) == [
        "GPU 1: used by 1 other process (pid 77 (3.0 GiB)); clocks held down: hardware slowdown"]


def test_a_gate_refuses_a_busy_gpu_unless_forced(monkeypatch):
    from bandwidth.execution import job as measure
    from bandwidth.hardware.devices import DeviceSet

    facts = {0: {"procs": [(77, 3 << 30)], "app": 1980, "mask": 0}}
    monkeypatch.setitem(sys.modules, "pynvml", _fake_nvml(facts))
    monkeypatch.setattr("bandwidth.hardware.rawcopy.pci_bus_id", lambda gpu: None)
    gpus = DeviceSet("cuda", (0,))
    with pytest.raises(ConfigError, match=r"^busy GPU before measuring: GPU 0: used by 1 other "
                                          r"process \(pid 77 \(3.0 GiB\)\); .* use --force$"):
        measure.check_busy(gpus, force=False, gating=True)
    assert measure.check_busy(gpus, force=True, gating=True) == [
        "# warning: busy GPU: GPU 0: used by 1 other process (pid 77 (3.0 GiB)); measured anyway "
        "(--force)"]
    assert measure.check_busy(gpus, force=False, gating=False)[0].startswith("# warning: busy")
    assert measure.check_busy(DeviceSet("cpu", (0, 1)), force=False, gating=True) == []
