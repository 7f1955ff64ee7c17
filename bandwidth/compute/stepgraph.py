"""A scheduled step with its compute on one GPU as a single CUDA graph, and its compute alone as
another (``StepGraphs``): one step, one replay.

With a graph per run of compute slots (compute.graphs.SlotGraphs) and one per part's exchange
(schedules.graphs.PartGraphs), resnet-50 under ``backward`` replays 108 slot graphs and 54 part
graphs a step, and each replay's launch costs the GPU about as much as a small unit's products
(at batch 32 in bfloat16 a step is about 1 ms of compute on an H200): the products reached 66-69 %
of a large matmul's rate, against 73-78 % for ``flat``'s two runs. Here the step's events are
captured once at set-up (schedules.graphs.capture_step): every compute slot's products issued on
the capture stream, every part's exchange (what its own graph holds) on a side stream forked from
the capture stream at its EXCHANGE and joined to it at its WAIT; the compute alone is the same
slots with no exchange, captured likewise, so that both pay one launch. On an H200 (2026-11-26,
``device --gpus 0,0``, resnet-50 at batch 32, ``--launch graph``, one call): bfloat16 products
at 76.0 % of a large matmul's rate against 51.2 % with a graph per slot and part (this host's
replays paced those: 3.72 ms of compute alone against 2.65 ms), the step 2.89 ms against 3.20;
float32, where the GPU binds, 89.4 % against 89.2 %. The exposed communication did not fall
(float32 0.27-0.41 ms either way, bfloat16 0.24 ms against 0.18 ms allowed): on one GPU the
exchange's copy kernels take the products' memory and SMs, which no launch saving gives back.

Where: a process whose replicas share one GPU (``nccl``'s process per GPU, ``device`` or
``local`` on ``--gpus 0,0``), replaying a graph per part (``backward``, ``ddp``). Several GPUs
driven by one process, and modes whose parts are not replayed from graphs (``local``), keep the
graphs per run of slots for the step, and replay the compute alone as one graph per GPU
(``AloneGraphs``). A whole step across two GPUs
was tried (2026-11-26, 2 x H100, ``device --gpus 0,1 --schedule backward``, resnet-50 at batch
32, a capture lane per GPU forked from the capture stream): its compute alone as one replay
reached 72.6 % of a large matmul's rate in bfloat16 (61.0 % per run of slots), but the step,
whose parts' exchanges tie the two GPUs together at every EXCHANGE and WAIT inside the graph,
took 17.1 ms against 1.3 ms of compute alone (float32: 20.3 against 17.3 ms; per part: 17.9
ms), so it was not kept. ``--launch graph`` keeps these graphs; ``--launch auto`` times
``TRIAL_STEPS`` steps with compute each way (measurement.costs) and keeps the faster.

The traced step (measurement.costs.trace) is not replayed from here: its timeline is CUDA events
recorded between launches (each slot's and each exchange's start and end), and a single replay
has no place for them; it runs the graphs per part and per run of slots as before.
"""

from __future__ import annotations

import torch

from bandwidth.compute.runner import Runner
from bandwidth.schedules.base import BACKWARD, FORWARD, Event
from bandwidth.schedules.graphs import PartGraphs, capture_step

# --launch auto: steps with compute timed each way (after one of each), medians compared.
TRIAL_STEPS = 5


def step_graph_unavailable(session, runners: list[Runner]) -> str | None:
    """Why a step of ``session`` with ``runners``' compute is not one CUDA graph (None: it can
    be)."""
    if not runners or runners[0].kind != "cuda" or runners[0].waits:
        return "no products on a GPU"
    if not isinstance(session.graph, PartGraphs):
        return "the parts' exchanges are not replayed from graphs"
    gpus = {r.device for r in session.replicas}
    if len(gpus) != 1:
        return f"the process drives {len(gpus)} GPUs"
    return None


class StepGraphs:
    def __init__(self, session, runners: list[Runner]):
        """``session``: its store a scheduled step replayed from a graph per part
        (``step_graph_unavailable`` is None); ``runners``: calibrated and tuned."""
        self.runners = runners
        store = session.store
        self.step = capture_step(store, self._compute)
        self.alone = capture_compute(runners, store.events)

    def _compute(self, event: Event) -> None:
        for runner in self.runners:
            runner.layer(event.unit, backward=event.kind == BACKWARD)


def capture_compute(runners: list[Runner], events: list[Event]) -> torch.cuda.CUDAGraph:
    """``runners``' products of every forward and backward event, in order, as one CUDA graph
    on their GPU (every runner on the same one)."""
    device = runners[0].device
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream(device=device)
    stream.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.device(device), torch.cuda.graph(graph, stream=stream):
        for event in events:
            if event.kind in (FORWARD, BACKWARD):
                for runner in runners:
                    runner.layer(event.unit, backward=event.kind == BACKWARD)
    torch.cuda.current_stream(device).wait_stream(stream)
    torch.cuda.synchronize(device)
    return graph


class AloneGraphs:
    """The compute alone where the step is not one graph (a process that drives several GPUs, or
    a mode whose parts are not replayed from graphs: ``local``), as one CUDA graph per GPU (its
    replicas' products of every unit, in the step's order), replayed on each GPU's current
    stream in turn so that the GPUs compute at once. Without it the host issues a graph per run
    of compute slots on every GPU, and at bfloat16's short units it paces them: on 2 x H200
    (2026-11-26, ``device --gpus 0,1 --schedule backward``, resnet-50 at batch 32) 42-63 % of a
    large matmul's rate, against 72.6 % as one replay per GPU (``local --gpus 0,0``: 55.9 %
    against 73.9 %, one H200, 2026-11-27). A step with its exchange keeps its graphs per part
    (see the module's docstring), so what the host's pacing costs that step shows as exposed
    communication against this compute alone."""

    def __init__(self, runners: list[Runner], events: list[Event]):
        self.graphs = [(device, capture_compute([r for r in runners if r.device == device],
                                                events))
                       for device in dict.fromkeys(r.device for r in runners)]

    def replay(self) -> None:
        for device, graph in self.graphs:
            with torch.cuda.device(device):
                graph.replay()
