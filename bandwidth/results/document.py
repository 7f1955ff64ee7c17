"""The result document (what ``--json`` writes) and the flat Row view that tables, plots, CSV,
comparisons and regression checks read.

Document, schema version 1::

    {"schema_version": 1, "tool": "bandwidth 0.1.0", "created": "2026-11-22T05:00:00Z",
     "environment": {...},            # host, versions, devices, driver, peer access, links
     "fingerprint": {...},            # what must match for a baseline to apply (see below)
     "ceiling": {...},                # only with measure.py --ceiling: the full report of
                                      # python -m bandwidth.ceiling (Ceilings.to_dict())
     "results": [                     # one per measured configuration
       {"config": {...},              # with "backend": "toolkit" | "mxnet" (absent: toolkit)
        "network": {"name", "arrays", "bytes", "shapes"},
        "kv_store": {"name", "bound", "notes"}, "devices": ["cuda:0", ...],
        "launch": "graph" | "eager",  # how the steps were issued (measure.py --launch)
        "graph_steps": 1,             # graph: replays per timed iteration (--graph-steps)
        "schedule": {"name": "ddp", "parts": [{"index", "label", "nbytes", "arrays"}]},
                                      # only for a schedule other than flat (--schedule): its
                                      # parts in exchange order (ddp: its buckets)
        "cpu_threads": 2,             # CPU devices: the torch threads of the steps (else absent)
        "iterations": [{"iteration", "seconds", "error", "own_seconds",
                        "host_seconds"}],          # host_seconds: time to issue the step
        "reports": [...],
        "summary": {"busbw_median", "busbw_min", "busbw_max", "algbw_median", "seconds_median",
                    "error_max", "nbytes", "bus_factor", "iterations",
                    "host_seconds_median"},
        "reference": {... same fields as summary ...} | null,
        "ceiling": {"name": "p2p unidirectional copy", "gbps": 384.8,
                    "probe_nbytes": 256000000,        # null: the same run's flat reference
                    "not_a_bound": null | "fits in cache: ...",
                    "of": "busbw" | "algbw"} | null,  # the figure it bounds (algbw: one GPU)
        "workers": [{"worker", "seconds_median", "busbw_median", "network_nbytes",
                     "server_nbytes", "own_seconds", "errors"}],   # distributed modes: one per
                                    # worker (own_seconds, errors: every iteration's), else []
        "memory": {"workers_peak_rss", "servers_peak_rss",
                   "total_peak_rss"},       # distributed modes: bytes (absent elsewhere)
        "ranks": [{"rank", "role", "index", "host", "step_seconds", "step_seconds_median",
                   "wait_seconds", "nbytes_sent", "nbytes_received", "waited_on",
                   "peers": [{"role", "index", "host", "nbytes", "push_gbps", "pull_gbps",
                              "push_seconds", "pull_seconds"}]}],
                                    # distributed modes: one per rank, workers then servers
                                    # (bandwidth.results.ranks; absent elsewhere); a dist_nccl
                                    # worker's peers: its probe neighbours, {"role", "index",
                                    # "host", "nbytes", "send_gbps", "recv_gbps",
                                    # "send_seconds", "recv_seconds"}
        "probe": {"seconds", "nbytes", "repeats", "shifts", "backend", "workers",
                  "ranks_per_worker"},   # dist_nccl's neighbour probe (absent elsewhere)
        "straggler": {"rule", "figure", "k", "noise", "floor", "line",
                      "workers": {...}, "servers": {...},
                      "probe": {...}}}]}    # probe: bandwidth.results.probepaths.probe_json
                                    # distributed modes: the verdict of
                                    # bandwidth.results.stragglers (absent elsewhere)

``not_a_bound`` is set where the run beat its ceiling by more than 10 %
(bandwidth.ceiling.bounds.judged):
the figure is kept, but no % of ceiling is shown for that row.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bandwidth.formulas import busbw_gbps
from bandwidth.results.validate import check_document, read_json


@dataclass(frozen=True)
class Row:
    """One measured configuration, flattened: what a table line or a plot bar shows."""

    source: str                 # the document it came from (file name, or "this run")
    kv_store: str
    network: str                # label, e.g. resnet-200
    devices: str                # e.g. "cuda:0,1" or "cpu x2"
    n: int
    dtype: str
    optimizer: str
    nbytes: int
    busbw_gbps: float           # median over iterations: MXNet's GB/sec per gpu
    busbw_min: float
    busbw_max: float
    algbw_gbps: float | None           # None: one nccl rank, whose all-reduce moves nothing
    seconds: float
    error: float                # largest error over iterations (-1: not checked)
    ceiling_name: str | None
    ceiling_gbps: float | None
    backend: str = "toolkit"    # what exchanged the arrays: "toolkit" or "mxnet" (--backend)
    ceiling_note: str | None = None     # why the ceiling is not a bound for this row (no %)
    ceiling_of: str = "busbw"   # the figure the ceiling bounds: "busbw", or "algbw" (one GPU)
    samples: tuple[float, ...] = ()     # every measured iteration's GB/s per GPU (busbw), in order
    cpu_threads: int | None = None      # CPU devices: the torch threads the steps ran with
    straggler: str | None = None        # distributed: the line naming the straggler, if one
    schedule: str = "flat"      # --schedule, with ddp's caps: "backward", "ddp 25/1MiB"
    # --compute: what a step cost (results.costs.StepCosts; None without compute)
    batch_size: int | None = None
    compute_s: float | None = None
    exchange_s: float | None = None
    step_s: float | None = None
    exposed_s: float | None = None
    overlap: float | None = None
    samples_per_s: float | None = None
    performance_ratio: float | None = None
    framework_s: float | None = None    # --framework: its step, and its own cost beyond compute
    framework_own_s: float | None = None    # and the schedule's exposed (results.costs)
    framework_host_s: float | None = None   # and the host's time to issue it

    @property
    def key(self) -> tuple:
        """What identifies 'the same measurement' across runs (a flat row keeps the key it had
        before schedules existed)."""
        key = (self.kv_store, self.network, self.devices, self.dtype, self.optimizer,
               self.backend)
        return key if self.schedule == "flat" else key[:-1] + (self.schedule, self.backend)

    @property
    def mode(self) -> str:
        """The mode as tables and plots name it: ``device``, or ``mxnet device`` for MXNet's,
        with its schedule unless flat (``nccl ddp 25/1MiB``)."""
        mode = self.kv_store if self.backend == "toolkit" else f"{self.backend} {self.kv_store}"
        return mode if self.schedule == "flat" else f"{mode} {self.schedule}"

    @property
    def label(self) -> str:
        return f"{self.mode} {self.network} {self.devices}"

    @property
    def pct_of_ceiling(self) -> float | None:
        if not self.ceiling_gbps or self.ceiling_note:
            return None
        if self.ceiling_of == "algbw":
            return None if self.algbw_gbps is None else 100.0 * self.algbw_gbps / self.ceiling_gbps
        if self.n < 2:
            return None
        return 100.0 * self.busbw_gbps / self.ceiling_gbps


def devices_label(labels: list[str]) -> str:
    """``["cuda:0", "cuda:1"]`` -> ``cuda:0,1``; CPU devices -> ``cpu x2``."""
    if not labels:
        return "none"
    kind = labels[0].split(":")[0]
    if kind == "cpu":
        return f"cpu x{len(labels)}"
    return f"{kind}:" + ",".join(label.split(":")[1] for label in labels)


def iteration_gbps(result: dict) -> tuple[float, ...]:
    """Every measured iteration's GB/s per GPU of one ``results`` entry: its ``busbw_gbps``, or,
    in documents written before that field, busbw from the iteration's seconds."""
    summary, out = result["summary"], []
    for it in result.get("iterations") or []:
        if it.get("busbw_gbps") is not None:
            out.append(float(it["busbw_gbps"]))
        elif summary.get("bus_factor") is not None:
            out.append(busbw_gbps(summary["nbytes"], it["seconds"], summary["bus_factor"]))
    return tuple(out)


def schedule_label(config: dict) -> str:
    """``flat``, ``backward``, ``fsdp``, or ``ddp 25/1MiB`` (bucket cap / first bucket's)."""
    name = config.get("schedule", "flat")          # documents before --schedule: flat
    if name != "ddp":
        return name
    return f"ddp {config.get('bucket_mb', 25.0):g}/{config.get('first_bucket_mb', 1.0):g}MiB"


def moves_nothing(result: dict) -> bool:
    """One nccl rank on one device: its all-reduce moves no byte, so its algbw is n/a, as the
    summary says (report.text.algbw_text)."""
    return (result["config"]["kv_store"] == "nccl" and len(result["devices"]) == 1
            and not result.get("workers"))


def rows_from_document(doc: dict, source: str) -> list[Row]:
    rows = []
    for result in doc.get("results", []):
        config, summary, ceiling = result["config"], result["summary"], result.get("ceiling")
        rows.append(Row(
            source=source, kv_store=config["kv_store"], network=result["network"]["name"],
            devices=devices_label(result["devices"]), n=len(result["devices"]),
            dtype=config["dtype"], optimizer=config["optimizer"], nbytes=summary["nbytes"],
            busbw_gbps=summary["busbw_median"], busbw_min=summary["busbw_min"],
            busbw_max=summary["busbw_max"], algbw_gbps=None if moves_nothing(result)
            else summary["algbw_median"],
            seconds=summary["seconds_median"], error=summary["error_max"],
            ceiling_name=ceiling["name"] if ceiling else None,
            ceiling_gbps=ceiling["gbps"] if ceiling else None,
            backend=config.get("backend", "toolkit"),       # documents before --backend: toolkit
            ceiling_note=ceiling.get("not_a_bound") if ceiling else None,
            ceiling_of=(ceiling.get("of") or "busbw") if ceiling else "busbw",
            samples=iteration_gbps(result), schedule=schedule_label(config),
            cpu_threads=result.get("cpu_threads") if isinstance(result.get("cpu_threads"), int)
            and not isinstance(result.get("cpu_threads"), bool) else None,
            straggler=named_straggler(result.get("straggler")),
            **step_cost_fields(result.get("step_costs"))))
    return rows


def named_straggler(found) -> str | None:
    """A distributed result's ``"straggler"`` line where it names a rank (None otherwise, and
    for anything that is not the writer's shape)."""
    line = found.get("line") if isinstance(found, dict) else None
    return line if isinstance(line, str) and line.startswith("straggler:") else None


STEP_COST_FIELDS = ("batch_size", "compute_s", "exchange_s", "step_s", "exposed_s", "overlap",
                    "samples_per_s", "performance_ratio")


def step_cost_fields(costs) -> dict:
    """A Row's step-cost fields from a result's "step_costs" (none where it has none, or where
    a value is not a number)."""
    if not isinstance(costs, dict):
        return {}
    fields = {name: costs[name] for name in STEP_COST_FIELDS if _number(costs.get(name))}
    framework = costs.get("framework")
    if isinstance(framework, dict) and _number(framework.get("step_s")) \
            and _number(framework.get("own_s")):
        fields.update(framework_s=framework["step_s"], framework_own_s=framework["own_s"],
                      framework_host_s=framework["host_s"]
                      if _number(framework.get("host_s")) else None)
    return fields


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def load_document(path: str | Path) -> dict:
    """Read a result document; a missing, unreadable, foreign or malformed file (a field of the
    wrong type, a rate that is NaN, 0 or negative: bandwidth.results.validate) is a ConfigError."""
    return check_document(read_json(path), repr(str(path)))


def load_rows(path: str | Path) -> list[Row]:
    return rows_from_document(load_document(path), Path(path).name)


def fingerprint(environment: dict) -> dict:
    """The hardware a figure belongs to: device model and count, driver, and link topology."""
    names = [d.get("name") for d in environment.get("devices", [])]
    return {
        "device_model": sorted(set(names))[0] if names else None,
        "device_count": len(names),
        "driver": environment.get("driver"),
        "links": environment.get("links"),
        "peer_access": environment.get("peer_access"),
    }
