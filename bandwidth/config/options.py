"""The command line, parsed once into a frozen Config. Code below this never touches argparse.

Flag names follow MXNet's tools/bandwidth/measure.py (``--kv-store``, ``--gpus``, ``--num-batches``,
...) so that its users' commands keep working.
"""

from __future__ import annotations

import argparse
import math
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from bandwidth.ceiling.hostmatrix import HostMatrix, load_matrix
from bandwidth.cliparse import OneLineParser
from bandwidth.config.compute_flags import add_compute_flags, compute_fields
from bandwidth.errors import ConfigError

DTYPES = ("float32", "float16", "bfloat16")
OPTIMIZERS = ("none", "sgd")
LAUNCHES = ("auto", "graph", "eager")             # how a step's GPU work is issued (see Config.launch)
OWNER_RULES = ("balanced", "greedy")      # the device mode's key placement
SERVER_ORDERS = ("same", "staggered")     # the PS worker's visiting order (stores/dist.py)
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
    # The compute a step overlaps with (bandwidth.config.compute_flags, bandwidth.compute):
    compute: str = "none"                  # "none" | "flops" | "ms" | "file"
    batch_size: int = 32                   # samples per device and step
    seq_len: int | None = None             # tokens per sample (None: the model's)
    compute_ms: tuple[float, float] | None = None          # the step's forward, backward ms
    compute_layers_ms: tuple[tuple[str, float, float], ...] | None = None  # per layer
    max_in_flight: int | None = None       # PS modes: messages per server in flight (None: all)
    server_order: str = "same"             # PS modes: "same" | "staggered" (stores/dist.py)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "Config":
        data = dict(data)
        data["image_shape"] = tuple(data["image_shape"])
        if data.get("gpus") is not None:
            data["gpus"] = tuple(data["gpus"])
        for key in ("compute_ms", "compute_layers_ms"):
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


SIZE_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
MAX_TIMEOUT_S = 7 * 24 * 3600             # a week: any longer is no bound at all
MAX_CHUNK_MB = 1e9                        # MB of 1e6 bytes: 1 PB
MAX_GRAPH_STEPS = 1024                    # --graph-steps N: replays queued per timed iteration
MAX_SIZE_BYTES = 1 << 50                  # 1 PiB: beyond any device's memory
MAX_SWEEP_SIZES = 1000                    # -b 1 -e 1G -f 1.05 has 395 sizes


def parse_graph_steps(text: str) -> int | None:
    """--graph-steps: "auto" (None) or a count from 1 to MAX_GRAPH_STEPS."""
    if str(text).strip().lower() == "auto":
        return None
    try:
        count = int(str(text).strip())
    except ValueError:
        count = 0
    if not 1 <= count <= MAX_GRAPH_STEPS:
        raise ConfigError(f"--graph-steps must be 'auto' or a whole number from 1 to "
                          f"{MAX_GRAPH_STEPS}; got {str(text)[:30]!r}")
    return count


def check_timeout(seconds: float, flag: str = "--timeout") -> None:
    """``--timeout``: a finite number of seconds, more than 0 and at most a week."""
    if not (math.isfinite(seconds) and 0 < seconds <= MAX_TIMEOUT_S):
        raise ConfigError(f"{flag} must be a number of seconds above 0 and at most "
                          f"{MAX_TIMEOUT_S} (a week); got {seconds:g}")


def parse_size(text: str) -> int:
    """nccl-tests' sizes: bytes with an optional K, M or G suffix (powers of two): 1M = 1048576."""
    body, unit = (text[:-1], text[-1].upper()) if text[-1:].isalpha() else (text, "")
    try:
        number = float(body) * SIZE_UNITS[unit]
        value = int(number) if math.isfinite(number) else 0
    except (KeyError, ValueError):
        value = 0
    if value <= 0:
        raise ConfigError(f"a size must be a positive number of bytes with an optional K, M or G "
                          f"suffix, such as 1M; got {text[:40]!r}")
    if value > MAX_SIZE_BYTES:
        raise ConfigError(f"size {text[:40]!r} is more than {MAX_SIZE_BYTES >> 50} PiB; give a "
                          "size that fits in memory, such as 1G")
    return value


def size_sweep(begin: int, end: int, factor: float) -> list[int]:
    """Sizes from ``begin`` to ``end`` multiplying by ``factor`` (nccl-tests' -b -e -f). Each size
    is larger than the one before (a product that rounds back to the same integer takes the next
    integer), and a sweep of more than MAX_SWEEP_SIZES sizes is refused."""
    if end < begin:
        raise ConfigError(f"-e {end} is smaller than -b {begin}")
    if not math.isfinite(factor) or (factor <= 1 and begin != end):
        raise ConfigError(f"-f must be a number greater than 1 to sweep sizes; got {factor:g}")
    sizes = [begin]
    while begin != end and sizes[-1] * factor <= end:
        sizes.append(max(int(sizes[-1] * factor), sizes[-1] + 1))
        if len(sizes) > MAX_SWEEP_SIZES:
            raise ConfigError(f"-b {begin} -e {end} -f {factor:g} makes more than "
                              f"{MAX_SWEEP_SIZES} sizes; raise -f or narrow -b/-e")
    return sizes


def parse_image_shape(text: str) -> tuple[int, int, int]:
    parts = text.split(",")
    try:
        dims = tuple(int(p) for p in parts)
    except ValueError:
        dims = ()
    if len(dims) != 3 or min(dims) <= 0:
        raise ConfigError(f"--image-shape must be three positive integers C,H,W such as 3,224,224; "
                          f"got {text!r}")
    return dims  # type: ignore[return-value]


def parse_gpus(text: str) -> tuple[int, ...]:
    try:
        ids = tuple(int(p) for p in text.split(",") if p.strip() != "")
    except ValueError:
        ids = ()
    if not ids or min(ids) < 0:
        raise ConfigError(f"--gpus must be a comma list of GPU ids such as 0,1; got {text!r}")
    # A GPU listed twice is allowed, as MXNet's measure.py allowed it: two replicas share that
    # GPU (--gpus 0,0 runs the multi-device paths on one GPU). The modes of one process per
    # device refuse it (KVStore.unavailable), since NCCL cannot hold one GPU twice.
    return ids


def build_parser() -> argparse.ArgumentParser:
    from bandwidth.stores.registry import KVSTORES

    parser = OneLineParser(
        prog="measure.py",
        description="Measure the bandwidth of exchanging (reduce + broadcast) a network's parameter "
                    "arrays under one kvstore mode, in MXNet's 'GB/sec per gpu' (= all-reduce busbw). "
                    "Comma lists of modes and networks, several GPU sets, --scaling or a flat-buffer "
                    "size sweep make one job that ends in a table.",
        epilog="examples:\n"
               "  python measure.py --kv-store device --gpus 0,1 --network resnet --num-layers 200\n"
               "  python measure.py --kv-store nccl --network inception-v3 --image-shape 3,299,299\n"
               "  python measure.py --kv-store local --cpus 4 --network mlp   # no GPU needed\n"
               "  python measure.py --kv-store local,device,nccl --network resnet,vgg --plot bw.png\n"
               "  python measure.py --kv-store nccl --scaling --network resnet --num-layers 200\n"
               "  python measure.py --kv-store nccl --network flat -b 1M -e 1G -f 2\n"
               "  python measure.py --save-baseline base.json; python measure.py --baseline "
               "base.json --tolerance 10%\n"
               "  python measure.py --network resnet --num-layers 200 --dry-run",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    net = parser.add_argument_group("network")
    net.add_argument("--network", default="resnet",
                     help="network(s) whose parameter shapes are exchanged: a comma list of names, "
                          ".json shape files, or 'flat' for one flat buffer per size of -b/-e/-f "
                          "(default: resnet; --list-networks shows all)")
    net.add_argument("--num-layers", type=int, default=None,
                     help="depth, for resnet, resnext and vgg (default: the network's own: "
                          "resnet and resnext 152, vgg 16)")
    net.add_argument("--image-shape", default="3,224,224", help="C,H,W (default: 3,224,224)")
    net.add_argument("--num-classes", type=int, default=1000, help="classes (default: 1000)")
    net.add_argument("--list-networks", action="store_true", help="list the networks and exit")
    net.add_argument("-b", "--minbytes", default="1M", help="flat sweep: smallest size (default 1M)")
    net.add_argument("-e", "--maxbytes", default="1G", help="flat sweep: largest size (default 1G)")
    net.add_argument("-f", "--stepfactor", type=float, default=2.0,
                     help="flat sweep: size multiplier (default 2)")
    ex = parser.add_argument_group("exchange")
    ex.add_argument("--kv-store", "--kvstore", dest="kv_store", default="device",
                    help=f"kvstore mode(s), a comma list of: {', '.join(KVSTORES)} (default: device)")
    ex.add_argument("--gpus", nargs="+", default=None,
                    help="comma list of GPU ids, e.g. 0,1,2,3; several lists make a sweep "
                         "(--gpus 0,1 0,1,2,3) (default: every visible GPU)")
    ex.add_argument("--cpus", type=int, default=None,
                    help="use N replicas in host memory instead of GPUs (default when no GPU is "
                         "visible: 2)")
    ex.add_argument("--num-servers", type=int, default=None, metavar="S",
                    help="under torchrun (or any launcher setting RANK, WORLD_SIZE, MASTER_ADDR, "
                         "MASTER_PORT, without launch.py): how many of the ranks, the last ones, "
                         "are servers of the dist_* parameter-server modes (default 0)")
    ex.add_argument("--max-in-flight", type=int, default=None, metavar="N",
                    help="parameter-server modes: messages per server a worker keeps in flight "
                         "(default: all of them at once)")
    ex.add_argument("--server-order", default="same", choices=SERVER_ORDERS,
                    help="parameter-server modes: the order a worker visits the servers in each "
                         "round of messages: 'same' (0, 1, ... on every worker; default) or "
                         "'staggered' (worker w starts at server w mod S)")
    ex.add_argument("--scaling", action="store_true",
                    help="sweep the device count from 1 to all of --gpus (or --cpus; without "
                         "either, every visible GPU, or the 2 default CPU devices)")
    ex.add_argument("--optimizer", default="none",
                    help="'sgd' (lr 0.01, no momentum, no weight decay, as MXNet) or 'none' (default)")
    ex.add_argument("--dtype", default="float32", help=f"{' | '.join(DTYPES)} (default: float32)")
    ex.add_argument("--gc-type", default="none",
                    help="gradient compression: 'none' (default), or MXNet's '2bit' with "
                         "--backend mxnet on the device and dist_* kvstores")
    ex.add_argument("--backend", default="toolkit",
                    help="what exchanges the arrays, a comma list of: toolkit (this toolkit's "
                         "modes on PyTorch; default), mxnet (MXNet 1.9.1's own kvstore and "
                         "ps-lite; pip install '.[mxnet]'); 'toolkit,mxnet' compares the two, "
                         "their iterations interleaved in one process")
    ex.add_argument("--chunk-mb", type=float, default=None,
                    help="largest pipelining chunk of the device and local modes (and the "
                         "_device modes' local reduce), MB of 1e6 bytes (default: device: each "
                         "owner's share in 2 chunks, at most 256 MB; local: S/16 within 2-32 MB "
                         "on GPUs, the whole buffer on CPU devices)")
    ex.add_argument("--launch", default=None,
                    help="how each timed step's GPU work is issued: 'graph' (captured once as a "
                         "CUDA graph and replayed, so that the host does not pace the step; "
                         "device and nccl modes) or 'eager' (every copy, kernel and collective "
                         "launched by the host each step, as a framework without graphs does) or "
                         "'auto' (capture, then keep the graph unless a few untimed trial steps "
                         "show the eager step faster); with --schedule backward or ddp, one graph "
                         "per part, replayed on a side stream (fsdp: eager) (default: auto on "
                         "GPUs, eager on CPU devices)")
    ex.add_argument("--graph-steps", default="auto",
                    help="with the graph launch: how many replays of the captured step each timed "
                         "iteration queues back to back, taking turns over a few sets of buffers "
                         "(so that neither the host's launch and wake-up nor the GPU's cache sets "
                         "a small network's figure); the time is divided by the count. 'auto' "
                         "(default): enough for an iteration of about 4 ms, at most 64 replays, "
                         "the sets within 40 %% of the free GPU memory; N: exactly N (1 to "
                         f"{MAX_GRAPH_STEPS})")
    ex.add_argument("--schedule", default="flat",
                    help="in which parts and order a training step exchanges the arrays, a comma "
                         "list (a sweep) of: flat (every array at once, nothing else running; "
                         "default), backward (MXNet's: one exchange per layer, last layer first, "
                         "each as soon as it is ready; every mode), ddp (PyTorch DDP's buckets in "
                         "reverse parameter order; nccl, dist_nccl), fsdp (FSDP/ZeRO-3 per block: "
                         "all-gather before forward and backward, reduce-scatter after; nccl, "
                         "dist_nccl). A sweep of several modes skips the pairs a schedule cannot "
                         "run")
    ex.add_argument("--bucket-mb", default=None,
                    help="ddp: bucket cap in MiB as DDP's bucket_cap_mb, a comma list sweeps "
                         "(default: 25, the first bucket 1 MiB as DDP does)")
    ex.add_argument("--first-bucket-mb", default=None,
                    help="ddp: the first bucket's cap in MiB (default 1, DDP's default; torch "
                         "2.13's DDP with an explicit bucket_cap_mb uses that cap instead)")
    ex.add_argument("--owners", default="balanced",
                    help="device mode's key placement: 'balanced' (keys larger than 1,000,000 "
                         "elements are split so that every GPU owns the same bytes; default) or "
                         "'greedy' (MXNet's rule: whole keys, largest first, onto the least-loaded "
                         "GPU)")
    ex.add_argument("--cpu-threads", type=int, default=None,
                    help="torch threads of the steps on CPU devices, and of the local mode's "
                         "summation on GPUs (default: on CPU devices, untimed trial steps of 1, "
                         "one per device and one per core, taken in turns; the lowest mean step "
                         "time wins, and more threads only where at least 10 %% faster than "
                         "fewer; a note says the choice; on GPUs torch's)")
    tm = parser.add_argument_group("measurement")
    tm.add_argument("--num-batches", type=int, default=5,
                    help="measured iterations (default: 5; one warm-up iteration runs before)")
    tm.add_argument("--warmup", type=int, default=1, help="discarded warm-up iterations (default: 1)")
    tm.add_argument("--disp-batches", type=int, default=1,
                    help="average and print every N iterations (default: 1)")
    tm.add_argument("--test-results", type=int, default=1,
                    help="1: check every pulled value against the known result (default); 0: skip")
    tm.add_argument("--no-reference", dest="reference", action="store_false",
                    help="skip the flat all-reduce reference and the mode's ceiling measurement")
    tm.add_argument("--ceiling", action="store_true",
                    help="measure and print this host's full ceilings first (python -m "
                         "bandwidth.ceiling) on the run's devices (the widest set of a sweep); "
                         "--json holds them under 'ceiling'; a failed part makes the exit "
                         "status 1")
    tm.add_argument("--network-ceiling", default=None, metavar="FILE.json",
                    help="distributed modes: the host-to-host matrix written by launch.py ... "
                         "python -m bandwidth.ceiling --network --json FILE; the summary states "
                         "the slowest cell between this job's hosts and the run's percentage of "
                         "it")
    tm.add_argument("--link-rate", default=None, metavar="RATE",
                    help="distributed modes: every host's link rate each way, e.g. 1gbit, "
                         "2.5gbit; the summary states the full-duplex bound of a step (which "
                         "link carries what: docs/formulas.md) and the run's %% of link")
    tm.add_argument("--predict", action="store_true",
                    help="distributed modes, with --link-rate: print the model's step for this "
                         "job's hosts and rate (python -m bandwidth.predict), its binding "
                         "resource and its error against the run")
    tm.add_argument("--all-worker-lines", action="store_true",
                    help="distributed modes: every worker prints its iteration lines (default: "
                         "worker 0's only; every worker's are in --json under 'workers' either "
                         "way)")
    tm.add_argument("--timeout", type=float, default=300.0,
                    help="hang bound, every mode: a process waiting more than S seconds for "
                         "another, or an iteration not completed within S seconds, stops the "
                         "run as hung (exit 1) (default: 300)")
    tm.add_argument("--seed", type=int, default=0, help="seed of the test data (default: 0)")
    out = parser.add_argument_group("output")
    out.add_argument("--json", dest="json_path", default=None,
                     help="write configuration, environment, every iteration and the summary here")
    out.add_argument("--csv", dest="csv_path", default=None, help="write the result table as CSV")
    out.add_argument("--plot", dest="plot_path", default=None,
                     help="draw the results into this file, .png, .svg or .pdf (the format "
                          "follows the name): bars against the ceiling, lines for scaling and "
                          "size sweeps")
    out.add_argument("--baseline-row", default=None,
                     help="add a performance-ratio table against this row (number or label)")
    out.add_argument("--speedup", action="store_true",
                     help="add a speed-up table over device counts (with --scaling)")
    out.add_argument("--dry-run", action="store_true",
                     help="print the arrays (name, shape, bytes) and exit without allocating")
    add_compute_flags(parser)
    ci = parser.add_argument_group("regression checks")
    ci.add_argument("--save-baseline", default=None,
                    help="write the results with this machine's hardware fingerprint as a baseline")
    ci.add_argument("--baseline", default=None,
                    help="compare with this baseline: exit 1 when a row dropped by more than "
                         "--tolerance")
    ci.add_argument("--tolerance", default="10%", help="allowed drop (default: 10%%)")
    ci.add_argument("--repeat", default="1",
                    help="measure N times; a row passes if any repeat passes. 'auto': repeat "
                         "until every row's median is known to --ci-width or --time-budget "
                         "ends, then judge all iterations together")
    ci.add_argument("--ci-width", default=5.0, type=float, metavar="PCT",
                    help="--repeat auto: stop when each median's 95 %% confidence interval is "
                         "narrower than PCT %% of it (default 5)")
    ci.add_argument("--time-budget", default=300.0, type=float, metavar="S",
                    help="--repeat auto: start no repeat that would end after S seconds "
                         "(default 300)")
    ci.add_argument("--confirm", default="2", metavar="N",
                    help="--repeat auto: a row that fails a gate on its figure is measured again "
                         "(the same rule and budget) up to N times, and fails only if every pass "
                         "fails (default 2; 0: fail on the first pass)")
    ci.add_argument("--confirm-interval", default=10.0, type=float, metavar="S",
                    help="--confirm: start each pass S seconds after the one before it began "
                         "(default 10)")
    ci.add_argument("--baseline-processes", default=None, metavar="K",
                    help="--save-baseline with --repeat auto: measure the baseline in K processes "
                         "(this one and K-1 fresh ones), each pass kept as a repeat (default 3; "
                         "a process's figure has a level of its own)")
    ci.add_argument("--allow-missing", action="store_true",
                    help="let baseline rows this run did not measure pass (default: they fail)")
    ci.add_argument("--min-percent-of-ceiling", default=None, metavar="P",
                    help="fail (exit 1) a row below P %% of the ceiling measured in the same run")
    ci.add_argument("--junit", dest="junit_path", default=None, metavar="FILE.xml",
                    help="write the gates' verdicts as JUnit XML")
    ci.add_argument("--summary-md", default=None, metavar="FILE.md",
                    help="append a markdown summary of the gates (default: $GITHUB_STEP_SUMMARY "
                         "when set)")
    ci.add_argument("--min-gbps", default=None,
                    help="fail (exit 1) when any row's GB/sec per gpu is below this floor")
    ci.add_argument("--force", action="store_true",
                    help="compare with a baseline from different hardware anyway, and measure "
                         "on a busy GPU (another process on it, clocks held down)")
    return parser


def _check_scalars(args: argparse.Namespace) -> None:
    if args.num_batches < 1:
        raise ConfigError(f"--num-batches must be at least 1; got {args.num_batches}")
    if args.warmup < 0:
        raise ConfigError(f"--warmup must be 0 or more; got {args.warmup}")
    if args.disp_batches < 1:
        raise ConfigError(f"--disp-batches must be at least 1; got {args.disp_batches}")
    if args.disp_batches > args.num_batches:
        raise ConfigError(f"--disp-batches {args.disp_batches} exceeds --num-batches "
                          f"{args.num_batches}, so nothing would be reported")
    if args.num_classes < 1:
        raise ConfigError(f"--num-classes must be positive; got {args.num_classes}")
    if args.dtype not in DTYPES:
        raise ConfigError(f"unknown --dtype {args.dtype!r}; valid: {', '.join(DTYPES)}")
    if args.gc_type.lower() not in GC_TYPES:
        raise ConfigError(f"unknown --gc-type {args.gc_type!r}; valid: {', '.join(GC_TYPES)}")
    if args.gpus is not None and args.cpus is not None:
        raise ConfigError("give either --gpus or --cpus, not both")
    if args.max_in_flight is not None and args.max_in_flight < 1:
        raise ConfigError(f"--max-in-flight must be 1 or more; got {args.max_in_flight}")
    if args.num_servers is not None and args.num_servers < 0:
        raise ConfigError(f"--num-servers must be 0 or more; got {args.num_servers}")
    if args.cpus is not None and args.cpus < 1:
        raise ConfigError(f"--cpus must be at least 1; got {args.cpus}")
    if args.chunk_mb is not None and not (math.isfinite(args.chunk_mb) and 0 < args.chunk_mb
                                          <= MAX_CHUNK_MB):
        raise ConfigError(f"--chunk-mb must be a positive number of MB up to {MAX_CHUNK_MB:g}; "
                          f"got {args.chunk_mb:g}")
    if args.launch is not None and args.launch not in LAUNCHES:
        raise ConfigError(f"unknown --launch {args.launch!r}; valid: {', '.join(LAUNCHES)}")
    graph_steps = parse_graph_steps(args.graph_steps)
    if graph_steps is not None and args.launch == "eager":
        raise ConfigError("--graph-steps counts replays of a CUDA graph; --launch eager has none")
    if graph_steps is not None and args.cpus is not None:
        raise ConfigError("--graph-steps needs GPUs (CUDA graphs); CPU devices run eager")
    if args.owners not in OWNER_RULES:
        raise ConfigError(f"unknown --owners {args.owners!r}; valid: {', '.join(OWNER_RULES)}")
    if args.launch in ("graph", "auto") and args.cpus is not None:
        raise ConfigError(f"--launch {args.launch} needs GPUs (CUDA graphs); CPU devices run eager")
    if args.cpu_threads is not None and args.cpu_threads < 1:
        raise ConfigError(f"--cpu-threads must be at least 1; got {args.cpu_threads}")
    check_timeout(args.timeout)
    if not -(1 << 63) <= args.seed < (1 << 64):
        raise ConfigError(f"--seed must fit in 64 bits; got {str(args.seed)[:30]}")
    if not (math.isfinite(args.ci_width) and 0 < args.ci_width < 100):
        raise ConfigError(f"--ci-width must be a percentage above 0 and below 100; got "
                          f"{args.ci_width:g}")
    if not (math.isfinite(args.confirm_interval) and 0 <= args.confirm_interval <= 3600):
        raise ConfigError(f"--confirm-interval must be a number of seconds from 0 to 3600; got "
                          f"{args.confirm_interval:g}")
    if not (math.isfinite(args.time_budget) and 0 < args.time_budget < 1e7):
        raise ConfigError(f"--time-budget must be a positive number of seconds; got "
                          f"{args.time_budget:g}")


def parse_baseline_processes(text: str | None, auto: bool, saving: bool) -> int:
    """``--baseline-processes K``: 1 to 20, more than 1 only with --save-baseline and --repeat
    auto; default 3 there, else 1."""
    if text is None:
        return 3 if auto and saving else 1
    try:
        value = int(str(text).strip())
    except ValueError:
        value = 0
    if not 1 <= value <= 20:
        raise ConfigError(f"--baseline-processes must be a whole number of processes from 1 to "
                          f"20; got {str(text)[:40]!r}")
    if value > 1 and not (auto and saving):
        raise ConfigError("--baseline-processes measures the passes of --repeat auto for "
                          "--save-baseline: give both, or leave it out")
    return value


def parse_confirm(text: str) -> int:
    """``--confirm N``: confirmation passes of --repeat auto, a whole number from 0 to 10."""
    try:
        value = int(str(text).strip())
    except ValueError:
        value = -1
    if not 0 <= value <= 10:
        raise ConfigError(f"--confirm must be a whole number of confirmation passes from 0 to 10 "
                          f"(0: none); got {str(text)[:40]!r}")
    return value


def _device_sets(args: argparse.Namespace) -> list[tuple[tuple[int, ...] | None, int | None]]:
    """(gpus, cpus) per configuration: the --gpus sets, or 1..N with --scaling."""
    if args.cpus is not None:
        counts = range(1, args.cpus + 1) if args.scaling else [args.cpus]
        return [(None, c) for c in counts]
    if args.gpus is None and args.scaling:
        # --scaling over the default devices: every visible GPU, or the default CPU devices.
        from bandwidth.hardware.devices import DEFAULT_CPUS, visible_gpus
        visible = visible_gpus()
        if visible:
            return [(tuple(range(k)), None) for k in range(1, visible + 1)]
        return [(None, c) for c in range(1, DEFAULT_CPUS + 1)]
    if args.gpus is None:
        return [(None, None)]          # resolved later: every visible GPU, or 2 CPU devices
    sets = [parse_gpus(text) for text in args.gpus]
    if args.scaling:
        if len(sets) != 1:
            raise ConfigError("--scaling takes one --gpus list (or none: every visible GPU)")
        return [(sets[0][:k], None) for k in range(1, len(sets[0]) + 1)]
    return [(gpus, None) for gpus in sets]


def _networks(args: argparse.Namespace, dtype_bytes: int) -> list[str]:
    names = [n for n in args.network.split(",") if n]
    if not names:
        raise ConfigError("--network needs at least one name")
    out = []
    for name in names:
        if name == "flat":
            sizes = size_sweep(parse_size(args.minbytes), parse_size(args.maxbytes),
                               args.stepfactor)
            # sizes below one element round to the same buffer: measure each buffer once
            out += dict.fromkeys(f"flat:{max(1, size // dtype_bytes)}" for size in sizes)
        else:
            out.append(name)
    return out


BACKENDS: dict[str, str] = {
    "toolkit": "this toolkit's kvstore modes on PyTorch (bandwidth.stores)",
    "mxnet": "Apache MXNet 1.9.1's own kvstore and ps-lite (bandwidth.backends.mxnet_backend)",
}


def canonical_backend(name: str) -> str:
    name = name.strip().lower()
    if name not in BACKENDS:
        raise ConfigError(f"unknown --backend {name!r}; valid: {', '.join(BACKENDS)}")
    return name


def _backends(args: argparse.Namespace) -> list[str]:
    names = list(dict.fromkeys(canonical_backend(b) for b in args.backend.split(",") if b))
    if not names:
        raise ConfigError("--backend needs at least one name")
    if args.gc_type.lower() != "none" and "toolkit" in names:
        raise ConfigError(f"--gc-type {args.gc_type!r}: gradient compression is not implemented "
                          "in the toolkit's modes; use --gc-type none, or --backend mxnet for "
                          "MXNet's own")
    return names


PLOT_SUFFIXES = (".png", ".svg", ".pdf")


def check_output_path(flag: str, path: str | None) -> None:
    """Refuse, before anything is measured, an output file that could not be written."""
    if path is None:
        return
    if not path.strip():
        raise ConfigError(f"{flag} '': give a file name")
    target = Path(path)
    if target.is_dir():
        raise ConfigError(f"{flag} {path}: is a folder; give a file name inside it")
    if target.exists() and not target.is_file():
        raise ConfigError(f"{flag} {path}: is not a regular file (a FIFO, socket or device); "
                          "give a file name")
    folder = target.parent
    if not folder.is_dir():
        raise ConfigError(f"{flag} {path}: the folder {str(folder)!r} does not exist")
    if not os.access(folder, os.W_OK | os.X_OK) or (target.exists()
                                                     and not os.access(target, os.W_OK)):
        raise ConfigError(f"{flag} {path}: not writable by this user")
    if flag == "--plot" and target.suffix.lower() not in PLOT_SUFFIXES:
        raise ConfigError(f"--plot {path}: give a file name ending in "
                          f"{', '.join(PLOT_SUFFIXES)} (the format follows the name)")


def job_from_args(args: argparse.Namespace) -> Job:
    """Validate the parsed flags and freeze them into a Job; bad values raise ConfigError."""
    from bandwidth.plan.layout import DTYPE_BYTES
    from bandwidth.report.baseline import (parse_min_gbps, parse_min_percent, parse_repeat,
                                           parse_tolerance)
    from bandwidth.config.schedules import schedule_pairs, schedule_sweep
    from bandwidth.stores.registry import canonical_name

    _check_scalars(args)
    for flag, path in (("--json", args.json_path), ("--csv", args.csv_path),
                       ("--plot", args.plot_path), ("--save-baseline", args.save_baseline)):
        check_output_path(flag, path)
    optimizer = "none" if args.optimizer in (None, "None", "none") else args.optimizer.lower()
    if optimizer not in OPTIMIZERS:
        raise ConfigError(f"unknown --optimizer {args.optimizer!r}; valid: {', '.join(OPTIMIZERS)}")
    modes = [canonical_name(m) for m in args.kv_store.split(",") if m]
    if not modes:
        raise ConfigError("--kv-store needs at least one mode")
    backends = _backends(args)
    matrix = None
    if args.network_ceiling is not None:
        from bandwidth.stores.registry import KVSTORES
        local = [m for m in modes if not KVSTORES[m].distributed]
        if local:
            raise ConfigError(f"--network-ceiling is the ceiling of the distributed modes (dist_*),"
                              f" not of --kv-store {','.join(local)}; drop it, or measure a "
                              "dist_* mode under launch.py")
        matrix = load_matrix(args.network_ceiling)
    auto = str(args.repeat).strip().lower() == "auto"
    repeat = AUTO_REPEATS if auto else parse_repeat(args.repeat)
    link_rate_bits = None
    if args.link_rate is not None:
        from bandwidth.ceiling.linkbound import parse_rate
        link_rate_bits = parse_rate(args.link_rate, "--link-rate")
    if args.predict:
        from bandwidth.predict.model import MODES as PREDICTED
        if link_rate_bits is None:
            raise ConfigError("--predict needs --link-rate RATE (every host's link, each way)")
        uncovered = [m for m in modes if m not in PREDICTED]
        if uncovered:
            raise ConfigError(f"--predict: the model does not cover --kv-store {uncovered[0]}; "
                              f"it predicts {', '.join(PREDICTED)}")
    image_shape = parse_image_shape(args.image_shape)
    common = dict(num_layers=args.num_layers, image_shape=image_shape,
                  num_classes=args.num_classes, num_batches=args.num_batches, warmup=args.warmup,
                  disp_batches=args.disp_batches, test_results=bool(args.test_results),
                  optimizer=optimizer, dtype=args.dtype, reference=args.reference,
                  chunk_mb=args.chunk_mb, cpu_threads=args.cpu_threads, timeout_s=args.timeout,
                  seed=args.seed, gc_type=args.gc_type.lower(), launch=args.launch,
                  owners=args.owners, graph_steps=parse_graph_steps(args.graph_steps),
                  max_in_flight=args.max_in_flight, server_order=args.server_order,
                  **compute_fields(args))
    # The backend varies fastest, so that the rows of a comparison sit side by side.
    configs = tuple(Config(network=network, kv_store=mode, gpus=gpus, cpus=cpus, backend=backend,
                           schedule=schedule, bucket_mb=bucket_mb, first_bucket_mb=first,
                           **common)
                    for mode, (schedule, bucket_mb, first) in schedule_pairs(modes, schedule_sweep(args))
                    for network in _networks(args, DTYPE_BYTES[args.dtype])
                    for gpus, cpus in _device_sets(args)
                    for backend in backends)
    return Job(configs=configs, json_path=args.json_path, csv_path=args.csv_path,
               plot_path=args.plot_path, dry_run=args.dry_run, ceiling=args.ceiling,
               save_baseline=args.save_baseline, baseline=args.baseline,
               tolerance_pct=parse_tolerance(args.tolerance), repeat=repeat,
               min_gbps=None if args.min_gbps is None else parse_min_gbps(args.min_gbps),
               force=args.force, baseline_row=args.baseline_row, speedup=args.speedup,
               network_ceiling=matrix, repeat_auto=auto, ci_width_pct=args.ci_width,
               time_budget_s=args.time_budget, allow_missing=args.allow_missing,
               confirm=parse_confirm(args.confirm), confirm_interval_s=args.confirm_interval,
               baseline_processes=parse_baseline_processes(args.baseline_processes, auto,
                                                           args.save_baseline is not None),
               min_pct_of_ceiling=None if args.min_percent_of_ceiling is None
               else parse_min_percent(args.min_percent_of_ceiling),
               junit_path=args.junit_path, summary_md=args.summary_md,
               link_rate_bits=link_rate_bits, num_servers=args.num_servers,
               predict=args.predict, all_worker_lines=args.all_worker_lines)
