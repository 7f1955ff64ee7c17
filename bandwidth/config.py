"""The command line, parsed once into a frozen Config. Code below this never touches argparse.

Flag names follow MXNet's tools/bandwidth/measure.py (``--kv-store``, ``--gpus``, ``--num-batches``,
...) so that its users' commands keep working.
"""

from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass

from bandwidth.errors import ConfigError

DTYPES = ("float32", "float16", "bfloat16")
OPTIMIZERS = ("none", "sgd")


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
    cpu_threads: int | None = None         # CPU summation threads of the local mode (None: torch's)
    timeout_s: float = 300.0               # bound on any multi-process part
    json_path: str | None = None
    dry_run: bool = False
    seed: int = 0

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "Config":
        data = dict(data)
        data["image_shape"] = tuple(data["image_shape"])
        if data.get("gpus") is not None:
            data["gpus"] = tuple(data["gpus"])
        return cls(**data)


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
    if len(set(ids)) != len(ids):
        raise ConfigError(f"--gpus lists a GPU twice: {text!r}")
    return ids


def build_parser() -> argparse.ArgumentParser:
    from bandwidth.kvstores import KVSTORES

    parser = argparse.ArgumentParser(
        prog="measure.py",
        description="Measure the bandwidth of exchanging (reduce + broadcast) a network's parameter "
                    "arrays under one kvstore mode, in MXNet's 'GB/sec per gpu' (= all-reduce busbw).",
        epilog="examples:\n"
               "  python measure.py --kv-store device --gpus 0,1 --network resnet --num-layers 200\n"
               "  python measure.py --kv-store nccl --network inception-v3 --image-shape 3,299,299\n"
               "  python measure.py --kv-store local --cpus 4 --network mlp   # no GPU needed\n"
               "  python measure.py --network resnet --num-layers 200 --dry-run",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    net = parser.add_argument_group("network")
    net.add_argument("--network", default="resnet",
                     help="network whose parameter shapes are exchanged, or a .json shape file "
                          "(default: resnet; --list-networks shows all)")
    net.add_argument("--num-layers", type=int, default=None,
                     help="depth, for resnet, resnext and vgg (default: the network's own, resnet 152)")
    net.add_argument("--image-shape", default="3,224,224", help="C,H,W (default: 3,224,224)")
    net.add_argument("--num-classes", type=int, default=1000, help="classes (default: 1000)")
    net.add_argument("--list-networks", action="store_true", help="list the networks and exit")
    ex = parser.add_argument_group("exchange")
    ex.add_argument("--kv-store", "--kvstore", dest="kv_store", default="device",
                    help=f"kvstore mode: {', '.join(KVSTORES)} (default: device)")
    ex.add_argument("--gpus", default=None,
                    help="comma list of GPU ids, e.g. 0,1,2,3 (default: every visible GPU)")
    ex.add_argument("--cpus", type=int, default=None,
                    help="use N replicas in host memory instead of GPUs (default when no GPU is "
                         "visible: 2)")
    ex.add_argument("--optimizer", default="none",
                    help="'sgd' (lr 0.01, no momentum, no weight decay, as MXNet) or 'none' (default)")
    ex.add_argument("--dtype", default="float32", help=f"{' | '.join(DTYPES)} (default: float32)")
    ex.add_argument("--gc-type", default="none",
                    help="gradient compression; only 'none' is supported (kept for MXNet's commands)")
    ex.add_argument("--chunk-mb", type=float, default=None,
                    help="largest pipelining chunk of the device and local modes, MB (default: "
                         "device: each GPU's share in two chunks, at most 256 MB; local: 32)")
    ex.add_argument("--cpu-threads", type=int, default=None,
                    help="CPU summation threads of the local mode (default: torch's, one per core)")
    tm = parser.add_argument_group("measurement")
    tm.add_argument("--num-batches", type=int, default=5,
                    help="measured iterations (default: 5; one warm-up iteration runs before)")
    tm.add_argument("--warmup", type=int, default=1, help="discarded warm-up iterations (default: 1)")
    tm.add_argument("--disp-batches", type=int, default=1,
                    help="average and print every N iterations (default: 1)")
    tm.add_argument("--test-results", type=int, default=1,
                    help="1: check every pulled value against the known result (default); 0: skip")
    tm.add_argument("--no-reference", dest="reference", action="store_false",
                    help="skip the flat all-reduce reference measured after the run")
    tm.add_argument("--timeout", type=float, default=300.0,
                    help="seconds before a multi-process part is stopped as hung (default: 300)")
    tm.add_argument("--seed", type=int, default=0, help="seed of the test data (default: 0)")
    out = parser.add_argument_group("output")
    out.add_argument("--json", dest="json_path", default=None,
                     help="write configuration, environment, every iteration and the summary here")
    out.add_argument("--dry-run", action="store_true",
                     help="print the arrays (name, shape, bytes) and exit without allocating")
    return parser


def config_from_args(args: argparse.Namespace) -> Config:
    """Validate the parsed flags and freeze them; bad values raise ConfigError."""
    from bandwidth.kvstores import canonical_name

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
    optimizer = "none" if args.optimizer in (None, "None", "none") else args.optimizer.lower()
    if optimizer not in OPTIMIZERS:
        raise ConfigError(f"unknown --optimizer {args.optimizer!r}; valid: {', '.join(OPTIMIZERS)}")
    if args.gc_type.lower() != "none":
        raise ConfigError(f"--gc-type {args.gc_type!r} is not supported: gradient compression is "
                          "not implemented; use --gc-type none")
    if args.gpus is not None and args.cpus is not None:
        raise ConfigError("give either --gpus or --cpus, not both")
    if args.cpus is not None and args.cpus < 1:
        raise ConfigError(f"--cpus must be at least 1; got {args.cpus}")
    if args.chunk_mb is not None and args.chunk_mb <= 0:
        raise ConfigError(f"--chunk-mb must be positive; got {args.chunk_mb}")
    if args.cpu_threads is not None and args.cpu_threads < 1:
        raise ConfigError(f"--cpu-threads must be at least 1; got {args.cpu_threads}")
    if args.timeout <= 0:
        raise ConfigError(f"--timeout must be positive; got {args.timeout}")
    return Config(
        network=args.network, num_layers=args.num_layers,
        image_shape=parse_image_shape(args.image_shape), num_classes=args.num_classes,
        kv_store=canonical_name(args.kv_store),
        gpus=None if args.gpus is None else parse_gpus(args.gpus), cpus=args.cpus,
        num_batches=args.num_batches, warmup=args.warmup, disp_batches=args.disp_batches,
        test_results=bool(args.test_results), optimizer=optimizer, dtype=args.dtype,
        reference=args.reference, chunk_mb=args.chunk_mb, cpu_threads=args.cpu_threads,
        timeout_s=args.timeout, json_path=args.json_path, dry_run=args.dry_run, seed=args.seed)

