"""A scheduled step on GPUs with one CUDA graph per part (``--launch graph|auto``).

Issued eagerly, each part's exchange costs the host tens to hundreds of microseconds (every copy,
kernel, event or collective of the mode's operation), so a step of many parts is paced by the
host, not by the links (resnet-50 ``backward`` on one H100: 54 parts, 5.92 ms a step against
0.256 ms for the flat step's one replay). ``PartGraphs(store)`` captures, once at set-up, each
part's operation as its own CUDA graph (the mode's ``KVStore.capture`` over that part) and runs a
step's events with them:

- EXCHANGE of part p: an event recorded on every device's current stream (where the compute slots
  run, bandwidth.compute.runner) is waited for by one side stream on the first replica's GPU,
  which then replays p's graph and records p's ``done`` event. The exchange thus starts when the
  compute issued before it (the backward slot that produced its gradients) is done, and runs
  while the compute stream goes on with the following units' work.
- WAIT of part p: every device's current stream waits for p's ``done`` event; nothing blocks the
  host. Compute issued after the WAIT reads the part's finished arrays.

The host's work per part is one replay and a few event records. The parts' exchanges run one
after another on the side stream, in the order the step starts them (NCCL collectives in the same
order on every rank). The session (bandwidth.measurement.session) treats the object as the flat
step's graph: ``replay`` is one step, ``--launch auto`` times it against the eager step.

With compute on one GPU, ``capture_step`` records the whole step, compute slots and every part's
exchange, as a single CUDA graph (bandwidth.compute.stepgraph): the same events and streams as
``PartGraphs``, captured once instead of replayed part by part.
"""

from __future__ import annotations

import torch

from bandwidth.schedules.base import BACKWARD, EXCHANGE, FORWARD, REDUCE, WAIT


class PartGraphs:
    def __init__(self, store):
        """``store``: a runner.ScheduledStore on GPUs whose part stores can ``capture``."""
        self.store = store
        self.devices = list(dict.fromkeys(r.device for r in store.replicas))
        self.home = self.devices[0]
        self.graphs = [part.capture() for part in store.stores]
        self.side = torch.cuda.Stream(device=self.home)
        count = len(store.stores)
        # ready[p][d]: device d's compute reached part p's EXCHANGE; done[p]: p's replay ended.
        self.ready = [[torch.cuda.Event() for _ in self.devices] for _ in range(count)]
        self.done = [torch.cuda.Event() for _ in range(count)]
        self.compute = []      # each device's current stream, read once per step (replay)
        for device in self.devices:
            torch.cuda.synchronize(device)

    def replay(self) -> None:
        """One step: the schedule's events, each part's exchange a replay of its graph."""
        self.compute = [torch.cuda.current_stream(device) for device in self.devices]
        self.store.run_events(self._start, self._finish)

    def _start(self, event) -> None:
        part = event.part
        for stream, ready in zip(self.compute, self.ready[part]):
            ready.record(stream)
            self.side.wait_event(ready)
        with torch.cuda.device(self.home), torch.cuda.stream(self.side):
            self.graphs[part].replay()
        self.done[part].record(self.side)

    def _finish(self, event) -> None:
        # Every WAIT joins, even where an earlier join covers it: left out, the two-GPU bfloat16
        # step took 7.3-7.5 ms instead of 4.3-5.1 (2 x H200, BENCHMARKS.md 2026-11-27).
        for stream in self.compute:
            stream.wait_event(self.done[event.part])


# The priority of the whole-step graph's capture stream (the products; lower is higher, torch's
# default 0): its kernels' blocks go to free SMs before the exchange's on the side stream. With it
# and the redundant WAITs left out, float32 exposed 0.196-0.224 ms against 0.256-0.288 without it
# and 0.390-0.394 ms with neither (one H200, resnet-50 at batch 32, BENCHMARKS.md 2026-11-27).
PRODUCTS_PRIORITY = -1


def capture_step(store, compute) -> torch.cuda.CUDAGraph:
    """A whole step of ``store`` (a runner.ScheduledStore whose replicas share one GPU and
    whose parts' graphs ``PartGraphs`` captured already) as one CUDA graph: ``compute(event)``
    issues each FORWARD and BACKWARD slot's work on the current stream (the capture stream),
    each part's exchange is its store's ``record_step`` (what its own graph holds) on a side
    stream forked from the capture stream at its EXCHANGE (an event recorded there, as
    ``PartGraphs`` records one per step) and joined to it at its WAIT. The parts' exchanges
    follow one another on the side stream in the order the step starts them, so a WAIT is an
    edge of the graph only where no earlier WAIT joined a later exchange (``backward``'s W(0)
    joins them all: 53 of resnet-50's 54 edges into the products left out, which took float32's
    exposed time from 0.39 to 0.25-0.28 ms); the products run at ``PRODUCTS_PRIORITY``."""
    (device,) = set(r.device for r in store.replicas)
    graph = torch.cuda.CUDAGraph()
    capture = torch.cuda.Stream(device=device, priority=PRODUCTS_PRIORITY)
    side = torch.cuda.Stream(device=device)
    capture.wait_stream(torch.cuda.current_stream(device))
    done: dict[int, tuple[int, torch.cuda.Event]] = {}
    started, joined = 0, -1     # exchanges on the side stream; the latest the capture stream joined
    with torch.cuda.device(device), torch.cuda.graph(graph, stream=capture):
        for event in store.events:
            if event.kind in (FORWARD, BACKWARD):
                compute(event)
            elif event.kind == EXCHANGE:
                if event.op != REDUCE:
                    raise RuntimeError(f"a part's {event.op} is not captured (fsdp is eager)")
                ready = torch.cuda.Event()
                ready.record(capture)
                side.wait_event(ready)
                with torch.cuda.stream(side):
                    store.stores[event.part].record_step()
                done[event.part] = (started, torch.cuda.Event())
                done[event.part][1].record(side)
                started += 1
            elif event.kind == WAIT:
                # The side stream runs the exchanges in order, so joining one joins every
                # exchange started before it: a WAIT that an earlier join covers adds no edge.
                order, finished = done.pop(event.part)
                if order > joined:
                    capture.wait_event(finished)
                    joined = order
    torch.cuda.current_stream(device).wait_stream(capture)
    torch.cuda.synchronize(device)
    return graph
