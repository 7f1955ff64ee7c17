"""What the command line asks for, frozen: one ``Config`` per measured configuration and one
``Job`` for the whole invocation, with the names each field may take."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from bandwidth.links.hostmatrix import HostMatrix
from bandwidth.errors import ConfigError

DTYPES = ("float32", "float16", "bfloat16")
OPTIMIZERS = ("none", "sgd")
LAUNCHES = ("auto", "graph", "eager")             # how a step's GPU work is issued (see Config.launch)
OWNER_RULES = ("balanced", "greedy")      # the device mode's key placement
SERVER_ORDERS = ("same", "staggered")     # the PS worker's visiting order (stores/dist.py)
SERVER_KEYS = ("auto", "mxnet", "balanced")   # how the PS modes spread keys (stores/dist.py)
SERVER_TAKES = ("auto", "message", "worker")  # a sync server's order of pushes (psserver.py)
# --server-takes auto: a sync server takes one worker's share after another from this many workers
# on (each pushes into every server, so a server's link has as many senders). On the 1 Gbit/s lab,
# balanced keys both: steps 6 % and 21 % shorter than message by message's at 32 and 50 workers,
# 14-21 % longer at 10, 16 and 20 (BENCHMARKS.md, 2026-11-27).
WORKER_ORDER_FROM = 32
FRAMEWORKS = ("none", "torch")            # --framework: whose own step stands beside the schedule's
GC_TYPES = ("none", "2bit")               # MXNet 1.9.1's gradient compression (--backend mxnet)
AUTO_REPEATS = 1000                       # --repeat auto: the cap; --time-budget ends it first


@dataclass(frozen=True)
class Config:
    """Everything one measurement needs. ``run(Config(...))`` works without the command line."""

    network: str = "resnet"
    num_layers: int | None = None          # None: the network's default depth (resnet: 152)
    image_shape: tuple[int, int, int] = (3, 224, 224)
    num_classes: int = 1000
    kv_store: str = "device"
    gpus: tuple[int, ...] | None = None    # None: every visible GPU (CPU devices when there is none)
    cpus: int | None = None                # N replicas in host memory instead of GPUs
    num_batches: int = 5                   # measured iterations
    warmup: int = 1                        # discarded iterations before them
    disp_batches: int = 1                  # average and print every this many iterations
    test_results: bool = True              # check the pulled values every iteration
    optimizer: str = "none"
    dtype: str = "float32"
    reference: bool = True                 # also time one flat all-reduce of the same bytes
    chunk_mb: float | None = None          # pipelining chunk of device/local (None: the mode's)
    cpu_threads: int | None = None         # torch threads (None: CPU devices a trial, GPUs torch's)
    timeout_s: float = 300.0               # bound on any multi-process part
    seed: int = 0
    backend: str = "toolkit"               # "toolkit": bandwidth.stores; "mxnet": MXNet's kvstore
    gc_type: str = "none"                  # MXNet's gradient compression (--backend mxnet only)
    launch: str | None = None              # "auto" | "graph" | "eager"; None: auto on CUDA, eager on CPU
    owners: str = "balanced"               # device mode's key placement: "balanced" | "greedy"
    graph_steps: int | None = None         # graph replays per timed iteration (None: auto)
    schedule: str = "flat"                 # bandwidth.schedules: flat | backward | ddp | fsdp
    bucket_mb: float = 25.0                # ddp: bucket cap, MiB (DDP's bucket_cap_mb)
    first_bucket_mb: float = 1.0           # ddp: the first bucket's cap, MiB
    # ddp, fsdp: their step also taken by the framework itself (bandwidth.measurement.framework)
    framework: str = "none"                # "none" | "torch"
    # The compute a step overlaps with (bandwidth.config.compute_flags, bandwidth.compute):
    compute: str = "none"                  # "none" | "flops" | "ms" | "file"
    batch_size: int = 32                   # samples per device and step
    seq_len: int | None = None             # tokens per sample (None: the model's)
    compute_ms: tuple[float, float] | None = None          # the step's forward, backward ms
    compute_layers_ms: tuple[tuple[str, float, float], ...] | None = None  # per layer
    host_ms: tuple[float, float] | None = None   # the host's ms to issue forward, backward
    max_in_flight: int | None = None       # PS modes: messages per server in flight (None: all)
    server_order: str = "same"             # PS modes: "same" | "staggered" (stores/dist.py)
    server_admit: int | None = None        # PS modes: pushes a server accepts at once (None: slots)
    server_keys: str = "auto"              # PS modes: "auto" | "mxnet" | "balanced" (see below)
    server_takes: str = "auto"             # PS sync: "auto" | "message" | "worker" (server_settings)
    probe: bool = True                     # dist_nccl: the neighbour probe after the steps

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "Config":
        data = dict(data)
        data["image_shape"] = tuple(data["image_shape"])
        if data.get("gpus") is not None:
            data["gpus"] = tuple(data["gpus"])
        for key in ("compute_ms", "compute_layers_ms", "host_ms"):
            if data.get(key) is not None:
                data[key] = tuple(tuple(x) if isinstance(x, list) else x for x in data[key])
        return cls(**data)


@dataclass(frozen=True)
class Job:
    """What one command asks for: the configurations to measure (a sweep when there are several)
    and what to do with the results."""

    configs: tuple[Config, ...]
    json_path: str | None = None
    csv_path: str | None = None
    plot_path: str | None = None
    dry_run: bool = False
    ceiling: bool = False                  # run the full ceiling measurement first
    save_baseline: str | None = None
    baseline: str | None = None
    tolerance_pct: float = 10.0
    repeat: int = 1
    min_gbps: float | None = None
    force: bool = False
    baseline_row: str | None = None        # the row the ratio table divides by
    speedup: bool = False
    network_ceiling: HostMatrix | None = None   # distributed modes: the host-to-host matrix
    repeat_auto: bool = False              # --repeat auto: until the median is known well enough
    ci_width_pct: float = 5.0              # ... its 95 % interval narrower than this, in %
    time_budget_s: float = 300.0           # ... or this much time has passed
    confirm: int = 2                       # ... then a failed row is measured again this often
    confirm_interval_s: float = 10.0       # ... each pass this long after the last one began
    baseline_processes: int = 1            # --save-baseline: passes, each in a fresh process
    allow_missing: bool = False            # baseline rows missing from the run pass
    min_pct_of_ceiling: float | None = None
    junit_path: str | None = None
    summary_md: str | None = None          # --summary-md, else $GITHUB_STEP_SUMMARY (read in main)
    link_rate_bits: int | None = None      # distributed modes: every host's link, each way
    num_servers: int | None = None         # --num-servers: servers among torchrun's ranks
    predict: bool = False                  # --predict: the model's step beside the measured one
    all_worker_lines: bool = False         # distributed: every worker prints its iteration lines

    @property
    def is_sweep(self) -> bool:
        return len(self.configs) > 1


def refuse_server_takes(takes: str, mode: str, max_in_flight: int | None) -> None:
    """ConfigError where ``--server-takes worker`` cannot run: with an async mode (its servers
    answer every push on its own) or with ``--max-in-flight`` (a worker would wait for an answer
    that needs every worker's push while its server waits for the rest of that worker's share:
    it hung). measure.py and the model refuse alike."""
    if takes != "worker":
        return
    if mode.startswith("dist_async"):
        raise ConfigError(f"--server-takes worker orders a sync server's pushes; --kv-store "
                          f"{mode} answers every push on its own")
    if max_in_flight is not None:
        raise ConfigError("--server-takes worker with --max-in-flight: a worker would wait for an "
                          "answer that needs every worker's push while its server waits for the "
                          "rest of that worker's share; give one of them")


def server_settings(takes: str, keys: str, *, sync: bool, workers: int, servers: int,
                    max_in_flight: int | None = None) -> tuple[str, str]:
    """(--server-takes, --server-keys) with "auto" resolved for ``workers`` x ``servers``.

    A sync server takes one worker's whole share after another where ``WORKER_ORDER_FROM`` or
    more workers push into it and no ``--max-in-flight`` caps the pushes: message by message,
    that many senders into one link lose segments at once (incast) and each connection idles
    between its messages for longer than TCP's retransmission timeout, restarting every message
    from its initial window, while a worker's share taken whole keeps one connection busy. Fewer
    workers, async servers and capped pushes take message by message, whose answers overlap the
    later pushes (taken a worker at a time, a server link's two directions take turns). Keys are
    balanced where a server takes a worker at a time (its answers start once the last push is in,
    so the server with the most bytes would finish alone) and follow MXNet's rule otherwise."""
    if takes == "auto":
        crowded = servers > 0 and workers >= WORKER_ORDER_FROM
        takes = "worker" if sync and crowded and max_in_flight is None else "message"
    if keys == "auto":
        keys = "balanced" if takes == "worker" else "mxnet"
    return takes, keys
