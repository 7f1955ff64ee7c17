"""Each compute slot of a step as one CUDA graph per GPU (``SlotGraphs``), so that the host does
not pace the products.

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

A graph replays on its GPU's current stream, as the eager products run, so the schedule's events
(bandwidth.schedules.graphs) order it against the exchange exactly as they order eager work. The
products write the runners' own work buffers, as eagerly; nothing is allocated per replay.
"""

from __future__ import annotations

import statistics
import time

import torch

from bandwidth.compute.runner import Runner


class SlotGraphs:
    def __init__(self, runners: list[Runner]):
        """``runners``: on GPUs, computing FLOPs (not timed waits), calibrated already (a plan
        in milliseconds sets each unit's work in ``calibrate``)."""
        self.groups: dict[torch.device, list[Runner]] = {}
        for runner in runners:
            self.groups.setdefault(runner.device, []).append(runner)
        self.graphs: dict[tuple[int, bool], list[tuple[torch.device, torch.cuda.CUDAGraph]]] = {}
        units = len(runners[0].units)
        for device, group in self.groups.items():
            with torch.cuda.device(device):
                # A capture stream and a pool of this GPU's own: torch.cuda.graph's default
                # capture stream is made once, on whichever GPU was current at the first capture,
                # and a second GPU's products captured there ran outside the graph (an empty graph,
                # that GPU computing nothing in the timed steps).
                pool = torch.cuda.graph_pool_handle()
                stream = torch.cuda.Stream(device=device)
                stream.wait_stream(torch.cuda.current_stream(device))
                for index in range(units):
                    for backward in (False, True):
                        if not any(_work(r, index, backward) for r in group):
                            continue
                        graph = torch.cuda.CUDAGraph()
                        with torch.cuda.graph(graph, pool=pool, stream=stream):
                            for runner in group:
                                runner.layer(index, backward)
                        self.graphs.setdefault((index, backward), []).append((device, graph))
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
        """Unit ``index``'s forward (or backward) work on every GPU: one replay each. ``trace``:
        every replica's span is the replay's (replicas sharing a GPU share its span)."""
        for device, graph in self.graphs.get((index, backward), []):
            group = self.groups[device]
            starts = [runner.mark() for runner in group] if trace else None
            with torch.cuda.device(device):
                graph.replay()
            if trace:
                name = f"{'bwd' if backward else 'fwd'} {group[0].units[index].name}"
                for runner, start in zip(group, starts):
                    runner.marks.append((name, start, runner.mark(), "compute"))


def _work(runner: Runner, index: int, backward: bool) -> int:
    return (runner.backward_work if backward else runner.forward_work)[index]
