"""What a kvstore mode moves and needs per step: its ``Costs``.

The bus factor (bytes each device moves per byte of the arrays, and which devices its ``n``
counts), the network traffic of a worker under launch.py and how it is counted, and the memory the
mode needs beyond the gradient and output buffers, for the plan's memory check. The default is a
single-host all-reduce among this worker's devices, with nothing more to hold; a mode that
differs holds an instance of a subclass (``KVStore.costs``).
"""

from __future__ import annotations

from bandwidth.formulas import allreduce_factor


class Costs:
    # What a worker's network traffic is called in the distributed summary: (out, in).
    traffic_words: tuple[str, str] = ("pushed", "pulled")

    def bus_factor(self, n: int) -> float:
        """Bytes each device moves per byte of the arrays: MXNet's 2(n-1)/n, nccl-tests' busbw."""
        return allreduce_factor(n)

    def counted_devices(self, local: int, total: int) -> int:
        """The n of the bus factor: MXNet counts this worker's devices (even for its
        parameter-server modes); an all-reduce over every worker counts them all."""
        return local

    def network_nbytes(self, nbytes: int, local: int, total: int) -> float:
        """Bytes one worker of ``local`` devices (``total`` in the job) sends over the network per
        step, and receives as many, for arrays of ``nbytes``; 0 for the single-host modes."""
        return 0.0

    def traffic_rule(self, local: int, total: int) -> str:
        """How ``network_nbytes`` counts, in words, for the summary's note."""
        return ""

    def extra_bytes_per_device(self, nbytes: int, n: int, optimizer: bool) -> int:
        """Device memory this mode needs beyond the gradient and output buffers."""
        return 0

    def staging_bytes(self, nbytes: int, n: int, optimizer: bool, on_gpu: bool) -> int:
        """Host memory this mode allocates for ``n`` devices besides their own buffers (with
        CPU devices, those are in host memory already and counted per device)."""
        return 0
