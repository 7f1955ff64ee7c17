"""What each layer of a step computes, as plain data: ``compute_plan(config, shapes)``.

``--compute flops``: each layer's forward and backward FLOPs at ``--batch-size``
(networks.costs). ``--compute-ms FWD,BWD``: the step's milliseconds spread over the layers in
proportion to their FLOPs (by parameter elements for a network without geometry, which the plan's
notes say). ``--compute-file``: each layer's own milliseconds, its layers exactly the network's.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from bandwidth.config.options import Config
from bandwidth.errors import ConfigError
from networks.costs import has_costs, layer_costs, layer_name


@dataclass(frozen=True)
class ComputeLayer:
    name: str
    arrays: tuple[str, ...]
    forward_flops: int           # the layer's FLOPs at the batch size (0: no geometry)
    backward_flops: int
    activation_elements: int     # its output at the batch size (0: no geometry)
    forward_ms: float | None = None    # --compute-ms / --compute-file: the time asked for
    backward_ms: float | None = None
    host_forward_ms: float = 0.0       # --host-ms: the host's time to issue its forward
    host_backward_ms: float = 0.0      # and its backward


@dataclass(frozen=True)
class ComputePlan:
    kind: str                    # "flops", "ms" or "file"
    batch_size: int
    layers: tuple[ComputeLayer, ...]
    note: str = ""

    @property
    def timed(self) -> bool:
        """The work is given in milliseconds (calibrated on the device), not in FLOPs."""
        return self.kind != "flops"

    @property
    def forward_flops(self) -> int:
        return sum(layer.forward_flops for layer in self.layers)

    @property
    def backward_flops(self) -> int:
        return sum(layer.backward_flops for layer in self.layers)

    @property
    def host_ms(self) -> tuple[float, float]:
        """The host's milliseconds to issue the forward and the backward (--host-ms)."""
        return (sum(layer.host_forward_ms for layer in self.layers),
                sum(layer.host_backward_ms for layer in self.layers))

    @property
    def forward_ms(self) -> float:
        return sum(layer.forward_ms or 0.0 for layer in self.layers)

    @property
    def backward_ms(self) -> float:
        return sum(layer.backward_ms or 0.0 for layer in self.layers)

    def activation_nbytes(self, dtype_bytes: int) -> int:
        return sum(layer.activation_elements for layer in self.layers) * dtype_bytes


def network_layers(shapes: list[tuple[str, tuple[int, ...]]]) -> dict[str, tuple[str, ...]]:
    """The network's layers (arrays sharing a name up to weight/bias) in forward order."""
    grouped: dict[str, list[str]] = {}
    for array, _ in shapes:
        grouped.setdefault(layer_name(array), []).append(array)
    return {name: tuple(arrays) for name, arrays in grouped.items()}


def compute_plan(config: Config, shapes) -> ComputePlan | None:
    """The compute of ``config`` on ``shapes`` (None: --compute none). Raises ConfigError for a
    network without FLOPs under --compute flops and for a compute file that does not match."""
    if config.compute == "none":
        return None
    plan = _device_work(config, shapes)
    return plan if config.host_ms is None else _with_host(plan, config.host_ms)


def _with_host(plan: ComputePlan, host_ms: tuple[float, float]) -> ComputePlan:
    """``--host-ms FWD,BWD`` spread over the layers by their arrays: the host's time to issue a
    layer grows with the operations it runs (a kernel or two and an autograd node per array),
    not with its FLOPs."""
    arrays = sum(len(layer.arrays) for layer in plan.layers) or 1
    forward, backward = host_ms
    layers = tuple(dataclasses.replace(layer, host_forward_ms=forward * len(layer.arrays) / arrays,
                                       host_backward_ms=backward * len(layer.arrays) / arrays)
                   for layer in plan.layers)
    note = (f"--host-ms: {forward:g} + {backward:g} ms of the host's time to issue the step "
            "spread over the layers by their arrays, spent on the host before each layer's "
            "compute is issued")
    return dataclasses.replace(plan, layers=layers,
                               note=f"{plan.note}; {note}" if plan.note else note)


def _device_work(config: Config, shapes) -> ComputePlan:
    geometry = has_costs(config.network)
    if geometry:
        costs = layer_costs(config.network, config.image_shape, config.num_classes,
                            config.num_layers, config.batch_size, config.seq_len)
        layers = [ComputeLayer(c.name, c.arrays, c.forward_flops, c.backward_flops,
                               c.activation_elements) for c in costs]
    elif config.compute == "flops":
        raise ConfigError(f"--compute flops: {config.network} has no per-layer geometry here "
                          "(FLOPs are built in for the named networks: --list-networks); give "
                          "the step's times with --compute-ms FWD,BWD or --compute-file")
    else:
        layers = [ComputeLayer(name, arrays, 0, 0, 0)
                  for name, arrays in network_layers(shapes).items()]
    if config.compute == "flops":
        return ComputePlan("flops", config.batch_size, tuple(layers))
    if config.compute == "ms":
        return _spread(config, layers, shapes, geometry)
    return _from_file(config, layers)


def _spread(config: Config, layers: list[ComputeLayer], shapes, geometry: bool) -> ComputePlan:
    forward_ms, backward_ms = config.compute_ms
    if geometry:
        weights = [(layer.forward_flops, layer.backward_flops) for layer in layers]
        note = "the step's milliseconds spread over the layers by their FLOPs"
    else:
        sizes = dict(shapes)
        weights = [(n, n) for n in (sum(math.prod(sizes[a]) for a in layer.arrays)
                                    for layer in layers)]
        note = (f"{config.network} has no per-layer geometry: the step's milliseconds spread "
                "over the layers by their parameter elements")
    total_f = sum(w for w, _ in weights) or 1
    total_b = sum(w for _, w in weights) or 1
    spread = tuple(ComputeLayer(layer.name, layer.arrays, layer.forward_flops,
                                layer.backward_flops, layer.activation_elements,
                                forward_ms * f / total_f, backward_ms * b / total_b)
                   for layer, (f, b) in zip(layers, weights))
    return ComputePlan("ms", config.batch_size, spread, note)


def _from_file(config: Config, layers: list[ComputeLayer]) -> ComputePlan:
    given = {name: (f, b) for name, f, b in config.compute_layers_ms}
    names = [layer.name for layer in layers]
    missing = [n for n in names if n not in given]
    unknown = [n for n in given if n not in names]
    if missing or unknown:
        parts = []
        if missing:
            parts.append(f"{len(missing)} of the network's layers missing ({', '.join(missing[:3])}"
                         f"{', ...' if len(missing) > 3 else ''})")
        if unknown:
            parts.append(f"{len(unknown)} not in {config.network} ({', '.join(unknown[:3])}"
                         f"{', ...' if len(unknown) > 3 else ''})")
        raise ConfigError(f"--compute-file: its layers do not match {config.network}'s "
                          f"{len(names)}: {'; '.join(parts)} (--dry-run --compute-ms 1,2 lists "
                          "them)")
    return ComputePlan("file", config.batch_size, tuple(
        ComputeLayer(layer.name, layer.arrays, layer.forward_flops, layer.backward_flops,
                     layer.activation_elements, *given[layer.name]) for layer in layers))


def describe(plan: ComputePlan | None, dtype_bytes: int) -> list[str]:
    """The dry run's lines on compute: the step's FLOPs (or milliseconds) beside the bytes."""
    if plan is None:
        return []
    lines = [f"{'layer':<40} {'fwd GFLOP':>11} {'bwd GFLOP':>11} {'fwd ms':>9} {'bwd ms':>9} "
             f"{'activation MB':>14}"]
    for layer in plan.layers:
        ms = (f"{layer.forward_ms:>9.3f} {layer.backward_ms:>9.3f}" if plan.timed
              else f"{'-':>9} {'-':>9}")
        lines.append(f"{layer.name[:40]:<40} {layer.forward_flops / 1e9:>11.3f} "
                     f"{layer.backward_flops / 1e9:>11.3f} {ms} "
                     f"{layer.activation_elements * dtype_bytes / 1e6:>14.3f}")
    lines.append(f"compute per step and device at batch {plan.batch_size}: "
                 f"{plan.forward_flops / 1e9:.3f} GFLOP forward + "
                 f"{plan.backward_flops / 1e9:.3f} GFLOP backward in {len(plan.layers)} layers; "
                 f"activations kept {plan.activation_nbytes(dtype_bytes) / 1e6:.1f} MB"
                 + (f"; {plan.forward_ms:.3f} + {plan.backward_ms:.3f} ms asked" if plan.timed
                    else "")
                 + ("; the host {:.3f} + {:.3f} ms to issue it (--host-ms)".format(*plan.host_ms)
                    if any(plan.host_ms) else ""))
    if plan.note:
        lines.append(f"# note: {plan.note}")
    return lines


@dataclass(frozen=True)
class UnitWork:
    """What one unit of a schedule (a layer, or a block of layers) computes in a step."""

    name: str
    forward_flops: int
    backward_flops: int
    forward_ms: float = 0.0
    backward_ms: float = 0.0
    host_forward_ms: float = 0.0      # --host-ms: the host's time to issue its forward
    host_backward_ms: float = 0.0


def unit_work(plan: ComputePlan, units: list[tuple[str, tuple[int, ...]]],
              shapes) -> list[UnitWork]:
    """Each unit's work: ``units`` are (name, keys) of a schedule, in forward order; a layer's
    work goes to the unit that holds its first array (a schedule's units are layers or blocks of
    consecutive layers, so every layer lies in one unit)."""
    unit_of = {}
    for index, (_, keys) in enumerate(units):
        for key in keys:
            unit_of[shapes[key][0]] = index
    totals = [[0, 0, 0.0, 0.0, 0.0, 0.0] for _ in units]
    for layer in plan.layers:
        total = totals[unit_of[layer.arrays[0]]]
        total[0] += layer.forward_flops
        total[1] += layer.backward_flops
        total[2] += layer.forward_ms or 0.0
        total[3] += layer.backward_ms or 0.0
        total[4] += layer.host_forward_ms
        total[5] += layer.host_backward_ms
    return [UnitWork(name, *total) for (name, _), total in zip(units, totals)]


def layer_units(plan: ComputePlan) -> list[UnitWork]:
    """Each layer as its own unit (the compute alone, and schedules of one unit per layer)."""
    return [UnitWork(layer.name, layer.forward_flops, layer.backward_flops,
                     layer.forward_ms or 0.0, layer.backward_ms or 0.0, layer.host_forward_ms,
                     layer.host_backward_ms) for layer in plan.layers]
