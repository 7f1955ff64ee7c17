"""The command line's flags (``build_parser``): names as MXNet's tools/bandwidth/measure.py had
them, defaults and help; values are checked by ``options.job_from_args``."""

from __future__ import annotations

import argparse

from bandwidth.cliparse import OneLineParser
from bandwidth.config.compute_flags import add_compute_flags
from bandwidth.config.job import (DTYPES, SERVER_KEYS, SERVER_ORDERS, SERVER_TAKES,
                                  WORKER_ORDER_FROM)
from bandwidth.config.values import MAX_GRAPH_STEPS


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
    ex.add_argument("--server-admit", type=int, default=None, metavar="N",
                    help="parameter-server modes: pushes a server accepts at once, from all its "
                         "workers together (Gloo moves a push only once its receive is posted, so "
                         "this caps the senders into a server's link; default: as many as its "
                         "receive slots hold)")
    ex.add_argument("--server-keys", default="auto", choices=SERVER_KEYS,
                    help="parameter-server modes: how the arrays are spread over the servers: "
                         "'mxnet' (MXNet's rule: arrays of 1M+ elements split evenly, smaller ones "
                         "whole on server key*9973 mod S), 'balanced' (every server the same "
                         "bytes to within one element, large arrays split) or 'auto' (default: "
                         "balanced where the servers take a worker at a time, else mxnet)")
    ex.add_argument("--server-takes", default="auto", choices=SERVER_TAKES,
                    help="sync parameter-server modes: the order a server takes the pushes in: "
                         "'message' (every worker's first message, then every worker's second, "
                         "...: answers leave while later pushes arrive), 'worker' (one worker's "
                         "whole share after another, server s starting at worker s*W/S: each push "
                         "connection stays busy instead of starting cold for every message, but "
                         "the answers wait for the last worker) or 'auto' (default: worker from "
                         f"{WORKER_ORDER_FROM} workers on, without --max-in-flight; "
                         "else message)")
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

