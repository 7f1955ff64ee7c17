"""One process's part of a measurement: its replicas, the mode on them, and the error check."""

from __future__ import annotations

import torch

from bandwidth import optimizers
from bandwidth.data import Reference, fill_gradient
from bandwidth.devices import DeviceSet
from bandwidth.kvstores import KVSTORES
from bandwidth.layout import DTYPE_BYTES, TORCH_DTYPES, Replica


class Session:
    """Buffers for the replicas ``indices`` of ``devices`` (all of them in a single-process run,
    one in a run of one process per device) and the kvstore mode that exchanges them."""

    def __init__(self, kv_store: str, shapes, devices: DeviceSet, indices: list[int], group, *,
                 dtype: str, optimizer: str, seed: int, chunk_mb: float | None,
                 cpu_threads: int | None = None, check: bool = True, cluster=None,
                 first_replica: int = 0, replicas: int | None = None):
        """``first_replica`` and ``replicas``: this process's devices are replicas
        first_replica + index of ``replicas`` in the whole job (default: the devices here)."""
        store_cls = KVSTORES[kv_store]
        self.devices = devices
        self.n = replicas or devices.n
        self.seed = seed
        self.group = group
        self.layout = store_cls.make_layout(shapes, devices.n, cluster)
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

    def prepare(self) -> None:
        self.store.prepare()

    def step(self) -> None:
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
        self.store.close()
        self.replicas.clear()
        self.references.clear()
