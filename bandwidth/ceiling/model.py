"""The ceiling result model: one tree of dataclasses, rendered to text (``render``) and to JSON.

JSON (``Ceilings.to_dict()``; the command line writes it as ``{"ceilings": ...}`` so that it can
be embedded in other result documents under that key)::

    {"schema_version": 1,
     "devices": {"kind": "cuda", "ids": [0, 1], "names": ["NVIDIA H200", ...]},
     "settings": {"nbytes", "repeats", "burst", "latency_repeat", "sizes", "iters", "warmup",
                  "skip"},
     "p2p": [{"key": "unidirectional_enabled", "title": "Unidirectional P2P=Enabled ...",
              "unit": "GB/s", "method": "...", "devices": [0, 1],
              "values": [[1850.1, 387.4], [388.7, 1849.9]] | null, "reason": null | "...",
              "notes": []}, ...],                      # six matrices, the reference's order
     "host_links": [{"gpu", "h2d_pinned_gbps", "d2h_pinned_gbps", "h2d_pageable_gbps",
                     "d2h_pageable_gbps", "device_add_gbps"}] | null,
     "host_memory": {"nbytes", "copy_gbps", "sum_gbps", "threads"} | null,
     "host_path": {"nbytes", "devices", "d2h_seconds", "sum_seconds", "h2d_seconds",
                   "overlap_seconds", "threads", "bound_busbw_gbps", "serial_busbw_gbps"} | null,
     "collectives": {"backend", "ranks", "iters", "warmup", "repeats", "timing", "note",
                     "rows": [{"nbytes", "count", "dtype", "results": {"all_reduce": {"seconds",
                              "algbw_gbps", "busbw_gbps", "wrong"}, ...}}]} | null,
     "topology": {"gpus": [...], "matrix": [["X", "NV18"], ...], "notes": []} | null,
     "not_applicable": {"host_links": "CPU devices: ...", ...},   # why a section is null
     "failures": ["..."],                                       # parts that failed
     "environment": {...}}                                      # bandwidth.hardware.environment

Anything not applicable is null with a reason, never 0.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from bandwidth.hardware.topology import Topology

# The parts of a ceiling measurement, by the names --skip takes.
PARTS = ("p2p", "p2p-disabled", "latency", "host", "cpu", "nccl", "topology")

SCHEMA_VERSION = 1

# The reference's six matrices, in its order: key -> (title, unit)
MATRICES = {
    "unidirectional_disabled": ("Unidirectional P2P=Disabled Bandwidth Matrix (GB/s)", "GB/s"),
    "unidirectional_enabled": ("Unidirectional P2P=Enabled Bandwidth (P2P Writes) Matrix (GB/s)",
                               "GB/s"),
    "bidirectional_disabled": ("Bidirectional P2P=Disabled Bandwidth Matrix (GB/s)", "GB/s"),
    "bidirectional_enabled": ("Bidirectional P2P=Enabled Bandwidth Matrix (GB/s)", "GB/s"),
    "latency_disabled": ("P2P=Disabled Latency Matrix (us)", "us"),
    "latency_enabled": ("P2P=Enabled Latency (P2P Writes) Matrix (us)", "us"),
}


@dataclass
class Matrix:
    key: str
    title: str
    unit: str
    method: str                                  # exactly what was timed
    devices: list[int]
    values: list[list[float | None]] | None      # [i][j]: from devices[i] to devices[j]
    reason: str | None = None                    # why values is None
    notes: list[str] = field(default_factory=list)

    @classmethod
    def not_applicable(cls, key: str, devices: list[int], reason: str) -> Matrix:
        title, unit = MATRICES[key]
        return cls(key, title, unit, "", list(devices), None, reason)


@dataclass
class HostLink:
    """One GPU's host<->device copy rates and its on-GPU add rate, GB/s."""

    gpu: int
    h2d_pinned_gbps: float | None
    d2h_pinned_gbps: float | None
    h2d_pageable_gbps: float | None
    d2h_pageable_gbps: float | None
    device_add_gbps: float | None


@dataclass
class HostMemory:
    nbytes: int
    copy_gbps: float          # copy_, counting read + write (2 x nbytes)
    sum_gbps: float           # torch.add of two buffers, counting 3 x nbytes
    threads: int


@dataclass
class CollectiveSweep:
    backend: str              # "nccl" or "gloo"
    ranks: int
    iters: int
    warmup: int
    repeats: int
    timing: str
    note: str | None
    rows: list[dict]          # see bandwidth.ceiling.collectives.sweep


@dataclass
class Ceilings:
    devices: dict
    settings: dict
    p2p: list[Matrix]
    host_links: list[HostLink] | None
    host_memory: HostMemory | None
    collectives: CollectiveSweep | None
    topology: Topology | None
    not_applicable: dict[str, str] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    host_path: dict | None = None      # the local mode's stages (bandwidth.ceiling.host.host_path)
    environment: dict = field(default_factory=dict)
    schema_version: int = SCHEMA_VERSION

    def matrix(self, key: str) -> Matrix:
        return next(m for m in self.p2p if m.key == key)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> Ceilings:
        d = dict(data)
        if d.get("schema_version") != SCHEMA_VERSION:
            raise ValueError(f"not a ceiling document of schema version {SCHEMA_VERSION}")
        d["p2p"] = [Matrix(**m) for m in d["p2p"]]
        if d["host_links"] is not None:
            d["host_links"] = [HostLink(**h) for h in d["host_links"]]
        if d["host_memory"] is not None:
            d["host_memory"] = HostMemory(**d["host_memory"])
        if d["collectives"] is not None:
            d["collectives"] = CollectiveSweep(**d["collectives"])
        if d["topology"] is not None:
            d["topology"] = Topology.from_dict(d["topology"])
        return cls(**d)
