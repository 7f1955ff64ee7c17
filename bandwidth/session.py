"""One process's part of a measurement: its replicas, the mode on them, and the error check.

With ``launch="graph"`` (a graph-capable mode on GPUs) the mode's step is captured once at set-up
as a CUDA graph, and every step replays it: the host issues one launch per step instead of every
copy, kernel and collective. The error check is the same either way: every step's outputs.
"""

from __future__ import annotations

import logging

import torch

from bandwidth import optimizers
from bandwidth.data import Reference, fill_gradient
from bandwidth.devices import DeviceSet
from bandwidth.kvstores import KVSTORES
from bandwidth.layout import DTYPE_BYTES, TORCH_DTYPES, Replica

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
        self.launch = launch_of(store_cls, devices, launch)
        self.graph, self.graph_failure = None, None
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
        self.synchronize()

    def prepare(self) -> None:
        self.store.prepare()

    def step(self) -> None:
        if self.graph is not None:
            self.graph.replay()
        else:
            self.store.step()
        self.steps += 1

    def synchronize(self) -> None:
        for replica in self.replicas:
            if replica.device.type == "cuda":
                torch.cuda.synchronize(replica.device)

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


def launch_of(store_cls, devices: DeviceSet, requested: str | None) -> str:
    """How ``store_cls``'s steps are issued on ``devices``: "graph" where asked for (or by
    default) on GPUs by a mode that can capture its step, otherwise "eager"."""
    wanted = requested or ("graph" if devices.is_cuda else "eager")
    return "graph" if wanted == "graph" and devices.is_cuda and store_cls.graph_capable \
        else "eager"
