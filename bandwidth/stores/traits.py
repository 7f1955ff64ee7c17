"""What a kvstore mode is, in words and flags: its ``Traits``.

The driver reads them before any store exists: the summary and the bound it prints, how the run
is started (one process per device, under launch.py), what the plan checks (an optimizer the mode
needs, the default replicas on one GPU), how its steps are issued (CUDA graphs) and what the
session keeps for it. A mode holds one ``Traits`` (``KVStore.traits``); a rule that words or flags
cannot say (local's graph only on one GPU) is a subclass's method.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from bandwidth.hardware.devices import DeviceSet


@dataclass(frozen=True)
class Traits:
    summary: str
    # The link that bounds this mode; shown beside its figures.
    bound: str
    # The same on CPU devices (replicas in host memory), where the words differ (no GPU there).
    summary_on_cpu: str | None = None
    # The bound on CPU devices, where it differs: no PCIe, no GPU link.
    bound_on_cpu: str | None = None
    # Which ceiling bandwidth.ceiling.bounds measures for it: "peer link", "host path", "flat
    # all-reduce".
    bound_kind: str | None = None
    # True: one process per device, started by the tool (torch.distributed needs it).
    process_per_device: bool = False
    # True: runs under launch.py with workers and servers; the store takes a ``cluster``.
    distributed: bool = False
    # False: the parameter servers apply each push at once instead of one push per worker.
    sync: bool = True
    # True: MXNet refuses it without an optimizer (the async parameter servers).
    needs_optimizer: bool = False
    # True: on GPUs ``KVStore.capture`` records one step as a CUDA graph, which the session
    # replays.
    graph_capable: bool = False
    # False: ``--launch auto`` issues this mode's steps eagerly even where it can capture them
    # (``can_capture``), which then only ``--launch graph`` asks for.
    auto_graph: bool = True
    # True: ``make_layout`` and the store take ``owners``, a key placement rule (config.py).
    takes_owners: bool = False
    # Why algbw means nothing with one device (None: it still measures a path, e.g. local's
    # host path on one GPU): a one-rank all-reduce moves no byte.
    alone_moves_nothing: str | None = None
    # Replicas the default run (no --gpus, no --cpus) puts on a machine of one GPU, where one
    # device moves nothing across a link: 2 (``--gpus 0,0``) where the mode measures that GPU so.
    replicas_on_one_gpu: int = 1
    # What a run of one GPU still measures (None: nothing, MXNet's 0 alone; the hint says more).
    one_gpu_measures: str | None = None
    # True: a step consumes what ``prepare`` wrote, so a replayed graph needs a fresh prepare (a
    # set of buffers of its own) for every replay (bandwidth.measurement.session).
    prepared_steps: bool = False
    # True: with one CPU device, the worker's pull may land in its own gradients (an answer
    # comes only after the server holds the push, so the pushed bytes have left), and the
    # session keeps no outputs buffer: it refills the gradients, untimed, before each step. A
    # worker then holds S less (issue 27: resnet-50 at 50 x 5 within 20 GB).
    pulls_into_gradients: bool = False
    # The keywords the store of a schedule's part is built with besides the whole network's
    # (bandwidth.schedules.runner): a mode may plan a part's step otherwise (device: its graph
    # schedule on a shared GPU).
    part_options: Mapping[str, object] = field(default_factory=dict)

    def summary_text(self, devices: DeviceSet) -> str:
        """What this mode does on ``devices``, in words (CPU devices are not GPUs)."""
        return self.summary_on_cpu if self.summary_on_cpu and not devices.is_cuda else self.summary

    def bound_text(self, devices: DeviceSet) -> str:
        """What bounds this mode on ``devices``, in words."""
        return self.bound_on_cpu if self.bound_on_cpu and not devices.is_cuda else self.bound

    def can_capture(self, devices: DeviceSet, optimizer: str = "none") -> bool:
        """Whether ``KVStore.capture`` can record a step on ``devices`` with ``optimizer`` (a
        name)."""
        return self.graph_capable
