"""Each run of a step's compute slots as one CUDA graph per GPU (``SlotGraphs``), so that the host
does not pace the products.

Issued eagerly, a product costs the host about 11 us on the H100 machine (torch's dispatch and
cuBLAS's choice, every time), while a unit of resnet-50 at batch 32 in bfloat16 takes the GPU a
few microseconds: 216 launches a step (54 units, forward and backward, 2 replicas) held the
products at 34 % of a large matmul's rate. Captured once at set-up, a slot's products on one GPU
(those of every replica that GPU holds) are one replay, a single launch for the host.

Captured products are not always faster: on the H100, float32 products (where the GPU, not the
host, binds) took 41.3 ms a step from graphs against 38.5 ms eagerly in one comparison, and the
eager bfloat16 figure moved by a third between calls. So under
``--launch auto`` ``faster`` times the step's compute alone both ways (untimed, before the
measurement) and the faster is kept; ``--launch graph`` keeps the graphs, ``eager`` takes none.

A run is the slots that follow one another in the step's events with no exchange or wait between
them: every unit's backward, then every unit's forward, under ``flat``; a bucket's backward slots
under ``ddp``; a single slot under ``backward``. A run's graph replays at its first slot and its
other slots add nothing, in the step and in the compute alone alike (which keeps the step's runs,
so both pay the same launches). On an H200, resnet-50's 108 slots at batch 32 in bfloat16 ran at
66 % of a large product's rate as a graph each and at 76 % as one graph: a replay's launch
costs about as much as a small unit's products. On one GPU, where the parts' exchanges are graphs
too, a scheduled step and its compute alone may instead each be one graph (compute.stepgraph).

A graph replays on its GPU's current stream, as the eager products run, so the schedule's events
(bandwidth.schedules.graphs) order it against the exchange exactly as they order eager work. The
products write the runners' own work buffers, as eagerly; nothing is allocated per replay.
"""

from __future__ import annotations

import statistics
import time

import torch

from bandwidth.compute.runner import Runner
from bandwidth.schedules.base import BACKWARD, FORWARD, Event

Slot = tuple[int, bool]            # (unit, backward)


def slot_runs(events: list[Event]) -> list[list[Slot]]:
    """The step's compute slots in runs: consecutive in ``events`` with nothing between them."""
    runs: list[list[Slot]] = []
    previous_was_compute = False
    for event in events:
        compute = event.kind in (FORWARD, BACKWARD)
        if compute:
            slot = (event.unit, event.kind == BACKWARD)
            if previous_was_compute:
                runs[-1].append(slot)
            else:
                runs.append([slot])
        previous_was_compute = compute
    return runs


class SlotGraphs:
    def __init__(self, runners: list[Runner], events: list[Event]):
        """``runners``: on GPUs, computing FLOPs (not timed waits), calibrated already (a plan
        in milliseconds sets each unit's work in ``calibrate``); ``events``: the step's."""
        self.groups: dict[torch.device, list[Runner]] = {}
        for runner in runners:
            self.groups.setdefault(runner.device, []).append(runner)
        self.runs = {run[0]: run for run in slot_runs(events)}
        self.graphs: dict[Slot, list[tuple[torch.device, torch.cuda.CUDAGraph]]] = {}
        for device, group in self.groups.items():
            with torch.cuda.device(device):
                # A capture stream and a pool of this GPU's own: torch.cuda.graph's default
                # capture stream is made once, on whichever GPU was current at the first capture,
                # and a second GPU's products captured there ran outside the graph (an empty graph,
                # that GPU computing nothing in the timed steps).
                pool = torch.cuda.graph_pool_handle()
                stream = torch.cuda.Stream(device=device)
                stream.wait_stream(torch.cuda.current_stream(device))
                for first, run in self.runs.items():
                    if not any(_work(r, index, backward) for r in group
                               for index, backward in run):
                        continue
                    graph = torch.cuda.CUDAGraph()
                    with torch.cuda.graph(graph, pool=pool, stream=stream):
                        for index, backward in run:
                            for runner in group:
                                runner.layer(index, backward)
                    self.graphs.setdefault(first, []).append((device, graph))
        for device in self.groups:
            torch.cuda.synchronize(device)

    def faster(self, alone, slots, steps: int = 3) -> bool:
        """Whether a step's compute alone (``alone``, a measurement.costs.ComputeAlone over
        ``slots``) runs faster from these graphs than issued eagerly: the median of ``steps``
        steps each way, after one of each."""
        def median_s(graphs) -> float:
            slots.graphs = graphs
            times = []
            for _ in range(steps + 1):
                alone.synchronize()
                start = time.perf_counter()
                alone.step()
                alone.synchronize()
                times.append(time.perf_counter() - start)
            return statistics.median(times[1:])
        try:
            return median_s(self) < median_s(None)
        finally:
            slots.graphs = None

    def run(self, index: int, backward: bool, trace: bool) -> None:
        """The work of the run that unit ``index``'s forward (or backward) slot begins, on every
        GPU: one replay each (nothing for a run's later slots, its first replayed them).
        ``trace``: every replica's span is the replay's (replicas sharing a GPU share its span),
        named after the run's first and last units."""
        run = self.runs.get((index, backward))
        for device, graph in self.graphs.get((index, backward), []):
            group = self.groups[device]
            starts = [runner.mark() for runner in group] if trace else None
            with torch.cuda.device(device):
                graph.replay()
            if trace:
                units = group[0].units
                name = f"{'bwd' if backward else 'fwd'} {units[index].name}"
                if len(run) > 1:
                    name += f" .. {units[run[-1][0]].name} ({len(run)} units)"
                for runner, start in zip(group, starts):
                    runner.marks.append((name, start, runner.mark(), "compute"))


def _work(runner: Runner, index: int, backward: bool) -> int:
    return (runner.backward_work if backward else runner.forward_work)[index]
