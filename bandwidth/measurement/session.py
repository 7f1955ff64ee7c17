"""One process's part of a measurement: its replicas, the mode on them, and the error check.

With ``launch="graph"`` (a graph-capable mode on GPUs) the mode's step is captured once at set-up
as a CUDA graph, and every step replays it: the host issues one launch per step instead of every
copy, kernel and collective. With ``launch="auto"`` (the default there) the step is captured too,
then a few untimed trial steps of each kind decide which one the run uses: the graph, unless the
eager step is clearly faster (on one H100 the graph of two replicas sharing the GPU ran up to 4
times faster than the eager step below ~100 MB and 0.1-5.5 % faster from ~200 MB up;
BENCHMARKS.md). A
mode whose ``auto_graph`` is False (``local``) runs eager under auto.
Every process of a run takes the same decision (the slowest rank's times). The error check is the
same either way: every step's outputs.
"""

from __future__ import annotations

import logging
import statistics
import time

import torch

from bandwidth.hardware import cputhreads
from bandwidth.hardware.devices import DeviceSet
from bandwidth.plan import optimizers
from bandwidth.plan.data import Reference, fill_gradient
from bandwidth.plan.layout import DTYPE_BYTES, TORCH_DTYPES, Replica
from bandwidth.stores.registry import KVSTORES

log = logging.getLogger(__name__)


class Session:
    """Buffers for the replicas ``indices`` of ``devices`` (all of them in a single-process run,
    one in a run of one process per device) and the kvstore mode that exchanges them."""

    def __init__(self, kv_store: str, shapes, devices: DeviceSet, indices: list[int], group, *,
                 dtype: str, optimizer: str, seed: int, chunk_mb: float | None,
                 cpu_threads: int | None = None, check: bool = True, cluster=None,
                 first_replica: int = 0, replicas: int | None = None, launch: str = "eager",
                 owners: str = "balanced"):
        """``first_replica`` and ``replicas``: this process's devices are replicas
        first_replica + index of ``replicas`` in the whole job (default: the devices here).
        ``launch``: "graph" or "eager" (see ``launch_of``); ``owners``: the placement rule of
        modes that take one (``KVStore.takes_owners``)."""
        store_cls = KVSTORES[kv_store]
        self.threads_before = torch.get_num_threads()      # restored at close on CPU devices
        self.devices = devices
        self.n = replicas or devices.n
        self.seed = seed
        self.group = group
        rule = {"owners": owners} if store_cls.takes_owners else {}
        self.layout = store_cls.make_layout(shapes, devices.n, cluster, **rule)
        self.optimizer = optimizers.make(optimizer)
        numel = self.layout.numel
        self.replicas = []
        for index in indices:
            device = devices.torch_device(index)
            grads = torch.empty(numel, dtype=TORCH_DTYPES[dtype], device=device)
            fill_gradient(grads, rank=first_replica + index, seed=seed)
            outputs = torch.zeros_like(grads)
            self.replicas.append(Replica(first_replica + index, device, grads, outputs))
        chunk_elements = (None if chunk_mb is None        # None: each mode's own default
                          else max(1, int(chunk_mb * 1e6) // DTYPE_BYTES[dtype]))
        extra = {"cluster": cluster} if store_cls.distributed and cluster is not None else {}
        extra.update(rule)
        self.store = store_cls(self.replicas, self.layout, self.optimizer, group, chunk_elements,
                               cpu_threads, **extra)
        # The exact expected sum, once per distinct device (CPU devices share one).
        self.references = {}
        if check:
            for replica in self.replicas:
                if replica.device not in self.references:
                    self.references[replica.device] = Reference(numel, self.n, seed, replica.device)
        self.steps = 0
        self.synchronize()
        # CPU devices: the torch threads of the steps (bandwidth.hardware.cputhreads).
        self.threads_note = None
        self.cpu_threads_used = None      # CPU devices: the torch threads the steps run with
        if not devices.is_cuda:
            self._set_cpu_threads(cpu_threads)
            self.cpu_threads_used = torch.get_num_threads()
        self.launch = launch_of(store_cls, devices, launch, optimizer)
        self.graph, self.graph_failure, self.launch_trial = None, None, None
        auto = self.launch == "auto"
        if auto:
            self.launch = "graph"
        if self.launch == "graph":
            try:
                self.graph = self.store.capture()
            except RuntimeError as exc:
                # A step this CUDA build cannot capture still measures, eagerly; the summary says
                # so (notes) and the result's launch reads "eager".
                self.launch = "eager"
                self.graph_failure = f"graph capture failed, so steps run eager: {exc}".split(
                    "\n")[0]
                log.warning(self.graph_failure)
                self.synchronize()
        if auto and self.graph is not None:
            self._choose_launch()
        self.synchronize()

    def _choose_launch(self) -> None:
        """``launch="auto"``: time TRIAL_STEPS untimed steps each way (after one of each to warm
        up) and keep the graph unless the eager step's median is EAGER_MARGIN faster. The steps
        leave the weights as ``__init__`` did, so the error check still counts from step 1."""
        def median_seconds(issue) -> float:
            times = []
            for _ in range(TRIAL_STEPS + 1):
                self.store.prepare()
                self.synchronize()
                self.group.barrier()
                start = time.perf_counter()
                issue()
                self.synchronize()
                times.append(time.perf_counter() - start)
            return self.group.max(statistics.median(times[1:]))

        graph_s = median_seconds(self.graph.replay)
        eager_s = median_seconds(self.store.step)
        if self.optimizer is not None:
            for replica in self.replicas:
                replica.outputs.zero_()
        if eager_s < (1 - EAGER_MARGIN) * graph_s:
            self.launch, self.graph = "eager", None
        self.launch_trial = (f"launch auto: {TRIAL_STEPS} trial steps each way, median graph "
                             f"{1e6 * graph_s:.1f} us, eager {1e6 * eager_s:.1f} us: "
                             f"{self.launch} (--launch graph|eager to choose)")

    def _set_cpu_threads(self, cpu_threads: int | None) -> None:
        """--cpu-threads N, or (None) the trial of bandwidth.hardware.cputhreads where this process steps
        several replicas on its own (not a mode whose steps talk to other processes); the trial's
        steps leave the weights as ``__init__`` did."""
        if cpu_threads is not None:
            torch.set_num_threads(cpu_threads)
            self.threads_note = f"CPU threads: {cpu_threads} (--cpu-threads)"
            return
        store_cls = type(self.store)
        if len(self.replicas) < 2 or store_cls.distributed or store_cls.process_per_device:
            return

        def trial_step() -> None:
            self.store.prepare()
            self.store.step()

        _, self.threads_note = cputhreads.choose(trial_step, len(self.replicas))
        if self.optimizer is not None:
            self.store.reset_weights()

    def prepare(self) -> None:
        self.store.prepare()

    def step(self) -> None:
        if self.graph is not None:
            self.graph.replay()
        else:
            self.store.step()
        self.steps += 1

    def synchronize(self) -> None:
        # Each GPU once (replicas may share one: --gpus 0,0), in the order of the replicas.
        for device in dict.fromkeys(r.device for r in self.replicas if r.device.type == "cuda"):
            torch.cuda.synchronize(device)

    def error(self) -> float:
        wrong = 0.0
        total = 0.0
        for replica in self.replicas:
            w, total = self.references[replica.device].error_terms(
                [replica.outputs], self.optimizer, self.steps)
            wrong += w
        wrong = self.group.sum(wrong)
        return wrong / total if total else 0.0

    def close(self) -> None:
        self.synchronize()
        self.graph = None
        self.store.close()
        self.replicas.clear()
        self.references.clear()
        if not self.devices.is_cuda:
            torch.set_num_threads(self.threads_before)


# launch="auto": untimed trial steps each way, and how much faster eager must be to be chosen.
TRIAL_STEPS = 5
EAGER_MARGIN = 0.03


def launch_of(store_cls, devices: DeviceSet, requested: str | None,
              optimizer: str = "none") -> str:
    """How ``store_cls``'s steps are issued on ``devices``: "graph" or "auto" where asked for (or,
    for "auto", by default) on GPUs by a mode that can capture its step there (``can_capture``;
    "auto" only where the mode's ``auto_graph`` says a graph can help), otherwise "eager". The
    session resolves "auto" to "graph" or "eager" (``Session.launch``)."""
    wanted = requested or ("auto" if devices.is_cuda else "eager")
    if wanted == "auto" and not store_cls.auto_graph:
        return "eager"
    if wanted in ("graph", "auto") and devices.is_cuda and store_cls.can_capture(devices,
                                                                                 optimizer):
        return wanted
    return "eager"
