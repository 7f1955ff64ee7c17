"""One GPU, the commonest machine: what the default run measures there, and the hint where a
run of one device would print MXNet's ``0.000000 GB/sec per gpu`` and nothing else.

With one device nothing crosses a link, so MXNet's figure is 0 by definition. The default
command (no ``--gpus``, no ``--cpus``) should still tell something of the machine: where the mode
can hold two replicas on one GPU (``device``: ``replicas_on_one_gpu`` = 2), it measures
``--gpus 0,0``, the step inside that GPU's memory, and says so. An explicit ``--gpus 0`` keeps
MXNet's one-device run (its 0 included) with a hint of what to run instead.
"""

from __future__ import annotations

from bandwidth.hardware.devices import DeviceSet

HINT = ("one device: nothing crosses a link, so GB/sec per gpu is 0 (MXNet's figure); to measure "
        "this GPU run --kv-store device --gpus {g},{g} (2 replicas: the step inside its memory) "
        "or --kv-store local --gpus {g} (the host path, PCIe both ways)")


def one_gpu(config, devices: DeviceSet, store_cls) -> tuple[DeviceSet, tuple[str, ...]]:
    """The devices a run uses and ``# note:`` lines about them. Changes only a default run on
    one GPU of a mode that can hold several replicas there; adds the hint to other runs of one
    GPU (single-host modes: a distributed worker's one device is a common set-up)."""
    if not devices.is_cuda or devices.n != 1 or store_cls.traits.distributed:
        return devices, ()
    (gpu,) = devices.ids
    count = store_cls.traits.replicas_on_one_gpu
    if config.gpus is None and config.cpus is None and count > 1:
        shared = DeviceSet("cuda", (gpu,) * count)
        if store_cls.unavailable(shared, config.dtype) is None:
            return shared, (
                f"one GPU visible: measuring {count} replicas on GPU {gpu} (as --gpus "
                f"{','.join([str(gpu)] * count)}), the {config.kv_store} step inside its memory, "
                "since one device moves nothing across a link (MXNet's figure would be 0); "
                f"--gpus {gpu} for MXNet's one-device run, --kv-store local for the host path",)
    if store_cls.traits.one_gpu_measures:
        return devices, ()
    return devices, (HINT.format(g=gpu),)
