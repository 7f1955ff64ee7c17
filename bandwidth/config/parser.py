"""The command line's flags as one table (``FLAGS``: names as MXNet's tools/bandwidth/measure.py
had them, defaults, help, the topic each is listed under, whether ``--help`` shows it) and the
function that builds the parser from it (``build_parser``, given the kvstore modes' names, which
the stores' registry owns). ``--help`` lists the flags a person starts with, ``--help-all`` every
flag by topic; values are checked by ``options.parse_job``.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from bandwidth.cliparse import OneLineParser
from bandwidth.config.job import (DTYPES, SERVER_KEYS, SERVER_ORDERS, SERVER_TAKES,
                                  WORKER_ORDER_FROM)
from bandwidth.config.values import MAX_GRAPH_STEPS


@dataclass(frozen=True)
class Flag:
    """One flag: its names, the topic ``--help-all`` lists it under, whether ``--help`` shows it,
    and ``add_argument``'s keywords (default, type, choices, help...)."""

    group: str
    names: tuple[str, ...]
    short: bool
    options: Mapping[str, object]


def flag(group: str, *names: str, short: bool = False, **options) -> Flag:
    """A line of FLAGS: ``flag(topic, "--name", short=True, default=..., help=...)``."""
    return Flag(group, names, short, options)


def _kvstore_help(modes: Sequence[str]) -> str:
    # The mode names are the stores' registry's, handed to build_parser by its caller
    # (bandwidth.execution.commandline): config imports no registry.
    return f"kvstore mode(s), a comma list of: {', '.join(modes)} (default: device)"


# The topics --help-all lists the flags under, in TOPICS' order (--help keeps it, showing only the
# flags marked short).
NETWORK = "network"
SWEEP = "size sweep"
EXCHANGE = "exchange"
STEP = "schedule and launch"
COMPUTE = "compute"
MEASUREMENT = "measurement"
OUTPUT = "output"
CHECKS = "regression checks"
REPEATS = "repeats"
SERVERS = "parameter servers"
HOSTS = "across hosts"
TOPICS = (NETWORK, SWEEP, EXCHANGE, STEP, COMPUTE, MEASUREMENT, OUTPUT, CHECKS, REPEATS, SERVERS,
          HOSTS)

# In the order argparse has always registered them: an ambiguous abbreviation's error lists the
# flags it could match in this order.
FLAGS: tuple[Flag, ...] = (
    flag(NETWORK, "--network", short=True, default="resnet",
         help="network(s) whose parameter shapes are exchanged: a comma list of names, "
              ".json shape files, or 'flat' for one flat buffer per size of -b/-e/-f "
              "(default: resnet; --list-networks shows all)"),
    flag(NETWORK, "--num-layers", short=True, type=int, default=None,
         help="depth, for resnet, resnext and vgg (default: the network's own: "
              "resnet and resnext 152, vgg 16)"),
    flag(NETWORK, "--image-shape", short=True, default="3,224,224",
         help="C,H,W (default: 3,224,224)"),
    flag(NETWORK, "--num-classes", short=True, type=int, default=1000,
         help="classes (default: 1000)"),
    flag(NETWORK, "--list-networks", short=True, action="store_true",
         help="list the networks and exit"),
    flag(SWEEP, "-b", "--minbytes", short=True, default="1M",
         help="flat sweep: smallest size (default 1M)"),
    flag(SWEEP, "-e", "--maxbytes", short=True, default="1G",
         help="flat sweep: largest size (default 1G)"),
    flag(SWEEP, "-f", "--stepfactor", short=True, type=float, default=2.0,
         help="flat sweep: size multiplier (default 2)"),
    flag(EXCHANGE, "--kv-store", "--kvstore", short=True, dest="kv_store", default="device",
         help=_kvstore_help),
    flag(EXCHANGE, "--gpus", short=True, nargs="+", default=None,
         help="comma list of GPU ids, e.g. 0,1,2,3; several lists make a sweep "
              "(--gpus 0,1 0,1,2,3) (default: every visible GPU)"),
    flag(EXCHANGE, "--cpus", short=True, type=int, default=None,
         help="use N replicas in host memory instead of GPUs (default when no GPU is "
              "visible: 2)"),
    flag(SERVERS, "--num-servers", type=int, default=None, metavar="S",
         help="under torchrun (or any launcher setting RANK, WORLD_SIZE, MASTER_ADDR, "
              "MASTER_PORT, without launch.py): how many of the ranks, the last ones, "
              "are servers of the dist_* parameter-server modes (default 0)"),
    flag(SERVERS, "--max-in-flight", type=int, default=None, metavar="N",
         help="parameter-server modes: messages per server a worker keeps in flight "
              "(default: all of them at once)"),
    flag(SERVERS, "--server-admit", type=int, default=None, metavar="N",
         help="parameter-server modes: pushes a server accepts at once, from all its "
              "workers together (Gloo moves a push only once its receive is posted, so "
              "this caps the senders into a server's link; default: as many as its "
              "receive slots hold)"),
    flag(SERVERS, "--server-keys", default="auto", choices=SERVER_KEYS,
         help="parameter-server modes: how the arrays are spread over the servers: "
              "'mxnet' (MXNet's rule: arrays of 1M+ elements split evenly, smaller ones "
              "whole on server key*9973 mod S), 'balanced' (every server the same "
              "bytes to within one element, large arrays split) or 'auto' (default: "
              "balanced where the servers take a worker at a time, else mxnet)"),
    flag(SERVERS, "--server-takes", default="auto", choices=SERVER_TAKES,
         help="sync parameter-server modes: the order a server takes the pushes in: "
              "'message' (every worker's first message, then every worker's second, "
              "...: answers leave while later pushes arrive), 'worker' (one worker's "
              "whole share after another, server s starting at worker s*W/S: each push "
              "connection stays busy instead of starting cold for every message, but "
              "the answers wait for the last worker) or 'auto' (default: worker from "
              f"{WORKER_ORDER_FROM} workers on, without --max-in-flight; "
              "else message)"),
    flag(SERVERS, "--server-order", default="same", choices=SERVER_ORDERS,
         help="parameter-server modes: the order a worker visits the servers in each "
              "round of messages: 'same' (0, 1, ... on every worker; default) or "
              "'staggered' (worker w starts at server w mod S)"),
    flag(EXCHANGE, "--scaling", short=True, action="store_true",
         help="sweep the device count from 1 to all of --gpus (or --cpus; without "
              "either, every visible GPU, or the 2 default CPU devices)"),
    flag(EXCHANGE, "--optimizer", short=True, default="none",
         help="'sgd' (lr 0.01, no momentum, no weight decay, as MXNet) or 'none' (default)"),
    flag(EXCHANGE, "--dtype", short=True, default="float32",
         help=f"{' | '.join(DTYPES)} (default: float32)"),
    flag(EXCHANGE, "--gc-type", short=True, default="none",
         help="gradient compression: 'none' (default), or MXNet's '2bit' with "
              "--backend mxnet on the device and dist_* kvstores"),
    flag(EXCHANGE, "--backend", default="toolkit",
         help="what exchanges the arrays, a comma list of: toolkit (this toolkit's "
              "modes on PyTorch; default), mxnet (MXNet 1.9.1's own kvstore and "
              "ps-lite; pip install '.[mxnet]'); 'toolkit,mxnet' compares the two, "
              "their iterations interleaved in one process"),
    flag(EXCHANGE, "--chunk-mb", type=float, default=None,
         help="largest pipelining chunk of the device and local modes (and the "
              "_device modes' local reduce), MB of 1e6 bytes (default: device: each "
              "owner's share in 2 chunks, at most 256 MB; local: S/16 within 2-32 MB "
              "on GPUs, the whole buffer on CPU devices)"),
    flag(STEP, "--launch", default=None,
         help="how each timed step's GPU work is issued: 'graph' (captured once as a "
              "CUDA graph and replayed, so that the host does not pace the step; "
              "device and nccl modes) or 'eager' (every copy, kernel and collective "
              "launched by the host each step, as a framework without graphs does) or "
              "'auto' (capture, then keep the graph unless a few untimed trial steps "
              "show the eager step faster); with --schedule backward or ddp, one graph "
              "per part, replayed on a side stream (fsdp: eager) (default: auto on "
              "GPUs, eager on CPU devices)"),
    flag(STEP, "--graph-steps", default="auto",
         help="with the graph launch: how many replays of the captured step each timed "
              "iteration queues back to back, taking turns over a few sets of buffers "
              "(so that neither the host's launch and wake-up nor the GPU's cache sets "
              "a small network's figure); the time is divided by the count. 'auto' "
              "(default): enough for an iteration of about 4 ms, at most 64 replays, "
              "the sets within 40 %% of the free GPU memory; N: exactly N (1 to "
              f"{MAX_GRAPH_STEPS})"),
    flag(STEP, "--schedule", short=True, default="flat",
         help="in which parts and order a training step exchanges the arrays, a comma "
              "list (a sweep) of: flat (every array at once, nothing else running; "
              "default), backward (MXNet's: one exchange per layer, last layer first, "
              "each as soon as it is ready; every mode), ddp (PyTorch DDP's buckets in "
              "reverse parameter order; nccl, dist_nccl), fsdp (FSDP/ZeRO-3 per block: "
              "all-gather before forward and backward, reduce-scatter after; nccl, "
              "dist_nccl). A sweep of several modes skips the pairs a schedule cannot "
              "run"),
    flag(STEP, "--bucket-mb", default=None,
         help="ddp: bucket cap in MiB as DDP's bucket_cap_mb, a comma list sweeps "
              "(default: 25, the first bucket 1 MiB as DDP does)"),
    flag(STEP, "--first-bucket-mb", default=None,
         help="ddp: the first bucket's cap in MiB (default 1, DDP's default; torch "
              "2.13's DDP with an explicit bucket_cap_mb uses that cap instead)"),
    flag(STEP, "--framework", default="none", metavar="NAME",
         help="with --schedule ddp or fsdp and a compute: take the step also through the "
              "framework itself, 'torch' (PyTorch's DistributedDataParallel; FSDP2's "
              "fully_shard on each unit, then the root) over a module of the network's "
              "arrays whose forward and backward run the same compute; the summary sets "
              "its step beside the schedule's and splits it into compute, network and "
              "the framework's own cost (default: none)"),
    flag(EXCHANGE, "--owners", default="balanced",
         help="device mode's key placement: 'balanced' (keys larger than 1,000,000 "
              "elements are split so that every GPU owns the same bytes; default) or "
              "'greedy' (MXNet's rule: whole keys, largest first, onto the least-loaded "
              "GPU)"),
    flag(EXCHANGE, "--cpu-threads", type=int, default=None,
         help="torch threads of the steps on CPU devices, and of the local mode's "
              "summation on GPUs (default: on CPU devices, untimed trial steps of 1, "
              "one per device and one per core, taken in turns; the lowest mean step "
              "time wins, and more threads only where at least 10 %% faster than "
              "fewer; a note says the choice; on GPUs torch's)"),
    flag(MEASUREMENT, "--num-batches", short=True, type=int, default=5,
         help="measured iterations (default: 5; one warm-up iteration runs before)"),
    flag(MEASUREMENT, "--warmup", type=int, default=1,
         help="discarded warm-up iterations (default: 1)"),
    flag(MEASUREMENT, "--disp-batches", short=True, type=int, default=1,
         help="average and print every N iterations (default: 1)"),
    flag(MEASUREMENT, "--test-results", short=True, type=int, default=1,
         help="1: check every pulled value against the known result (default); 0: skip"),
    flag(MEASUREMENT, "--no-reference", dest="reference", action="store_false",
         help="skip the flat all-reduce reference and the mode's ceiling measurement"),
    flag(MEASUREMENT, "--ceiling", action="store_true",
         help="measure and print this host's full ceilings first (python -m "
              "bandwidth.ceiling) on the run's devices (the widest set of a sweep); "
              "--json holds them under 'ceiling'; a failed part makes the exit "
              "status 1"),
    flag(HOSTS, "--network-ceiling", default=None, metavar="FILE.json",
         help="distributed modes: the host-to-host matrix written by launch.py ... "
              "python -m bandwidth.ceiling --network --json FILE; the summary states "
              "the slowest cell between this job's hosts and the run's percentage of "
              "it"),
    flag(HOSTS, "--link-rate", default=None, metavar="RATE",
         help="distributed modes: every host's link rate each way, e.g. 1gbit, "
              "2.5gbit; the summary states the full-duplex bound of a step (which "
              "link carries what: docs/formulas.md) and the run's %% of link"),
    flag(HOSTS, "--predict", action="store_true",
         help="distributed modes, with --link-rate: print the model's step for this "
              "job's hosts and rate (python -m bandwidth.predict), its binding "
              "resource and its error against the run"),
    flag(HOSTS, "--no-probe", dest="probe", action="store_false",
         help="dist_nccl: skip the neighbour probe after the measured steps (each worker "
              "exchanges a few MB with its neighbours at distance 1, 2, 4, ..., both ways, "
              "untimed in the figures; the straggler line uses it to name a worker whose link "
              "is slow, or a slow path)"),
    flag(HOSTS, "--all-worker-lines", action="store_true",
         help="distributed modes: every worker prints its iteration lines (default: "
              "worker 0's only; every worker's are in --json under 'workers' either "
              "way)"),
    flag(MEASUREMENT, "--timeout", short=True, type=float, default=300.0,
         help="hang bound, every mode: a process waiting more than S seconds for "
              "another, or an iteration not completed within S seconds, stops the "
              "run as hung (exit 1) (default: 300)"),
    flag(MEASUREMENT, "--seed", type=int, default=0, help="seed of the test data (default: 0)"),
    flag(OUTPUT, "--json", short=True, dest="json_path", default=None,
         help="write configuration, environment, every iteration and the summary here"),
    flag(OUTPUT, "--csv", short=True, dest="csv_path", default=None,
         help="write the result table as CSV"),
    flag(OUTPUT, "--plot", short=True, dest="plot_path", default=None,
         help="draw the results into this file, .png, .svg or .pdf (the format "
              "follows the name): bars against the ceiling, lines for scaling and "
              "size sweeps"),
    flag(OUTPUT, "--baseline-row", default=None,
         help="add a performance-ratio table against this row (number or label)"),
    flag(OUTPUT, "--speedup", action="store_true",
         help="add a speed-up table over device counts (with --scaling)"),
    flag(OUTPUT, "--dry-run", short=True, action="store_true",
         help="print the arrays (name, shape, bytes) and exit without allocating"),
    flag(COMPUTE, "--compute", short=True, default="none",
         help="compute each step overlaps with: 'none' (default: the exchange "
              "alone) or 'flops' (each layer's forward and backward FLOPs at "
              "--batch-size, run as matrix multiplications in the run's dtype on "
              "every device)"),
    flag(COMPUTE, "--batch-size", type=int, default=32, metavar="N",
         help="samples per device and step, for --compute flops and samples/s "
              "(default: 32)"),
    flag(COMPUTE, "--seq-len", type=int, default=None, metavar="T",
         help="tokens per sample of the language models (default: their learned "
              "positions, BERT 512, GPT-2 1024; Llama 2048)"),
    flag(COMPUTE, "--compute-ms", default=None, metavar="FWD,BWD",
         help="the step's forward and backward milliseconds on one device (e.g. "
              "from a profiler), spread over the layers by their FLOPs"),
    flag(COMPUTE, "--host-ms", default=None, metavar="FWD,BWD",
         help="the host's milliseconds to issue the model's forward and backward (its "
              "launches and autograd's work; benchmarks/real_step.py measures them), "
              "spent busy on the host before each layer's compute, spread by its arrays "
              "(the compute is then issued eagerly)"),
    flag(COMPUTE, "--compute-file", default=None, metavar="FILE.json",
         help='per-layer forward and backward milliseconds: {"layers": [{"name": '
              '"fc1", "forward_ms": 0.5, "backward_ms": 1.0}, ...]}, every layer of '
              "the network once (names as --dry-run lists them)"),
    flag(CHECKS, "--save-baseline", short=True, default=None,
         help="write the results with this machine's hardware fingerprint as a baseline"),
    flag(CHECKS, "--baseline", short=True, default=None,
         help="compare with this baseline: exit 1 when a row dropped by more than "
              "--tolerance"),
    flag(CHECKS, "--tolerance", short=True, default="10%", help="allowed drop (default: 10%%)"),
    flag(REPEATS, "--repeat", default="1",
         help="measure N times; a row passes if any repeat passes. 'auto': repeat "
              "until every row's median is known to --ci-width or --time-budget "
              "ends, then judge all iterations together"),
    flag(REPEATS, "--ci-width", default=5.0, type=float, metavar="PCT",
         help="--repeat auto: stop when each median's 95 %% confidence interval is "
              "narrower than PCT %% of it (default 5)"),
    flag(REPEATS, "--time-budget", default=300.0, type=float, metavar="S",
         help="--repeat auto: start no repeat that would end after S seconds "
              "(default 300)"),
    flag(REPEATS, "--confirm", default="2", metavar="N",
         help="--repeat auto: a row that fails a gate on its figure is measured again "
              "(the same rule and budget) up to N times, and fails only if every pass "
              "fails (default 2; 0: fail on the first pass)"),
    flag(REPEATS, "--confirm-interval", default=10.0, type=float, metavar="S",
         help="--confirm: start each pass S seconds after the one before it began "
              "(default 10)"),
    flag(REPEATS, "--baseline-processes", default=None, metavar="K",
         help="--save-baseline with --repeat auto: measure the baseline in K processes "
              "(this one and K-1 fresh ones), each pass kept as a repeat (default 3; "
              "a process's figure has a level of its own)"),
    flag(CHECKS, "--allow-missing", action="store_true",
         help="let baseline rows this run did not measure pass (default: they fail)"),
    flag(CHECKS, "--min-percent-of-ceiling", default=None, metavar="P",
         help="fail (exit 1) a row below P %% of the ceiling measured in the same run"),
    flag(CHECKS, "--junit", dest="junit_path", default=None, metavar="FILE.xml",
         help="write the gates' verdicts as JUnit XML"),
    flag(CHECKS, "--summary-md", default=None, metavar="FILE.md",
         help="append a markdown summary of the gates (default: $GITHUB_STEP_SUMMARY "
              "when set)"),
    flag(CHECKS, "--min-gbps", default=None,
         help="fail (exit 1) when any row's GB/sec per gpu is below this floor"),
    flag(CHECKS, "--force", action="store_true",
         help="compare with a baseline from different hardware anyway, and measure "
              "on a busy GPU (another process on it, clocks held down)"),
)

USAGE = "%(prog)s [--kv-store MODES] [--network NETWORKS] [--gpus IDS ...] [flag ...]"
DESCRIPTION = """\
Measure the bandwidth of exchanging (reduce + broadcast) a network's parameter arrays under one
kvstore mode, in MXNet's 'GB/sec per gpu' (= all-reduce busbw). Comma lists of modes and networks,
several GPU sets, --scaling or a flat-buffer size sweep make one job that ends in a table."""
EXAMPLES = """\
examples:
  python measure.py --kv-store device --gpus 0,1 --network resnet --num-layers 200
  python measure.py --kv-store nccl --network inception-v3 --image-shape 3,299,299
  python measure.py --kv-store local --cpus 4 --network mlp   # no GPU needed
  python measure.py --kv-store local,device,nccl --network resnet,vgg --plot bw.png
  python measure.py --kv-store nccl --scaling --network resnet --num-layers 200
  python measure.py --kv-store nccl --network flat -b 1M -e 1G -f 2
  python measure.py --save-baseline base.json
  python measure.py --baseline base.json --tolerance 10%
  python measure.py --network resnet --num-layers 200 --dry-run"""
MORE = "These are the flags to start with; --help-all adds the other {count}, grouped by topic."


class ShortHelp(argparse.Action):
    """``-h``/``--help``: the parser of the flags marked short, printed, then exit 0."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, help=None, modes=()):
        super().__init__(option_strings, dest=dest, default=argparse.SUPPRESS, nargs=0, help=help)
        self.modes = modes

    def __call__(self, parser, namespace, values, option_string=None):
        short = [spec for spec in FLAGS if spec.short]
        more = MORE.format(count=len(FLAGS) - len(short))
        parser_of(short, f"{more}\n\n{EXAMPLES}", self.modes).print_help()
        parser.exit()


def build_parser(modes: Sequence[str]) -> argparse.ArgumentParser:
    """The parser of every flag of FLAGS; its own help (``format_help``, ``--help-all``) lists
    them all, ``-h``/``--help`` the short ones. ``modes``: the kvstore modes' names, which
    --kv-store's help lists."""
    return parser_of(FLAGS, EXAMPLES, modes)


def parser_of(flags: tuple[Flag, ...] | list[Flag], epilog: str,
              modes: Sequence[str]) -> argparse.ArgumentParser:
    parser = OneLineParser(prog="measure.py", usage=USAGE, description=DESCRIPTION, epilog=epilog,
                           formatter_class=argparse.RawDescriptionHelpFormatter, add_help=False)
    parser.add_argument("-h", "--help", action=ShortHelp, modes=modes,
                        help="show the flags to start with and exit")
    parser.add_argument("--help-all", action="help",
                        help="show every flag, grouped by topic, and exit")
    used = {spec.group for spec in flags}
    groups = {topic: parser.add_argument_group(topic) for topic in TOPICS if topic in used}
    for spec in flags:
        options = dict(spec.options)
        if callable(options.get("help")):
            options["help"] = options["help"](modes)
        groups[spec.group].add_argument(*spec.names, **options)
    return parser
