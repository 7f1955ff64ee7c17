"""``python -m bandwidth.predict``: the step time of a distributed job that may not run here,
from parameters measured here; ``--plan``: where its bytes go (no process is started)."""

from __future__ import annotations

import argparse
import json
import sys

import networks
from bandwidth import cliexit
from bandwidth.cliparse import check_output_path
from bandwidth.config.job import SERVER_KEYS, SERVER_TAKES, WORKER_ORDER_FROM
from bandwidth.errors import BandwidthError, ConfigError
from bandwidth.files import write_atomic
from bandwidth.links.linkbound import parse_rate
from bandwidth.predict import params as paramfile
from bandwidth.predict.jobs import make_job
from bandwidth.predict.model import MODES, gbps_per_worker, incast_words, predict
from bandwidth.predict.plan import alternatives, plan_lines, servers_stop_binding
from bandwidth.words import counted

PROG = "python -m bandwidth.predict"
MAX_PROCESSES = 100_000


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        message = " ".join(message.split())
        raise ConfigError(message if len(message) <= 300 else message[:300] + "...")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog=PROG, formatter_class=argparse.RawDescriptionHelpFormatter,
                description="Predict the step time and GB/s per worker of a distributed job "
                            "(parameter servers or dist_nccl) at W workers x S servers on links of "
                            "a given rate, name the binding resource and the S at which servers "
                            "stop binding. The parameters are measured by the tool itself "
                            "(benchmarks/predict_check.py calibrates them on the lab and states "
                            "the model's error); formulas: docs/formulas.md.",
                epilog="examples:\n"
                       f"  {PROG} --network mobilenet -n 50 -s 5 --link-rate 10gbit\n"
                       f"  {PROG} --network resnet -n 100 -s 10 --link-rate 25gbit "
                       "--max-in-flight 1\n"
                       f"  {PROG} --plan --network resnet -n 8 -s 8 --hosts 8 --link-rate 1gbit\n"
                       f"  {PROG} --kv-store dist_nccl --network vgg -n 16 --link-rate 100gbit")
    p.add_argument("--kv-store", default="dist_sync", help=f"one of {', '.join(MODES)} "
                   "(default: dist_sync)")
    p.add_argument("--network", default="resnet", help="a network of measure.py, flat:N, or a "
                   "shape file (default: resnet)")
    p.add_argument("--num-layers", type=int, default=None)
    p.add_argument("--image-shape", default="3,224,224")
    p.add_argument("--num-classes", type=int, default=1000)
    p.add_argument("-n", "--num-workers", type=int, default=2)
    p.add_argument("-s", "--num-servers", type=int, default=2)
    p.add_argument("--link-rate", default="10gbit", help="every host's link, each way "
                   "(default: 10gbit)")
    p.add_argument("--rate-of", action="append", default=[], metavar="HOST=RATE",
                   help="one host's link (hosts are h1, h2, ... in placement order); repeatable")
    p.add_argument("--host-matrix", default=None, metavar="FILE.json",
                   help="the hosts and their rates from python -m bandwidth.ceiling --network "
                        "--json FILE: host i of the placement is the matrix's i-th host, its rate "
                        "the slowest cell from or to it (overrides --hosts and --rate-of)")
    p.add_argument("--placement", default="round-robin", metavar="POLICY",
                   help="the launcher's policy: round-robin (over --hosts, default max(W, S)), "
                        "servers-apart (default hosts W + S), count:N; separate: servers-apart on "
                        "W + S hosts (default: round-robin)")
    p.add_argument("--hosts", type=int, default=None, help="hosts the workers are dealt over")
    p.add_argument("--max-in-flight", type=int, default=None, metavar="N",
                   help="messages per server a worker keeps in flight (default: all)")
    p.add_argument("--server-keys", default="auto", choices=SERVER_KEYS,
                   help="how the arrays are spread over the servers: 'mxnet' (MXNet's key rule), "
                        "'balanced' (the same bytes on every server) or 'auto' (default: balanced "
                        "where a server takes a worker at a time, else MXNet's), as measure.py's")
    p.add_argument("--server-takes", default="auto", choices=SERVER_TAKES,
                   help="the order a sync server takes the pushes in: 'message', 'worker' (one "
                        "worker's whole share after another) or 'auto' (default: worker from "
                        f"{WORKER_ORDER_FROM} workers on, else message), as measure.py's")
    p.add_argument("--devices-per-worker", type=int, default=1,
                   help="dist_nccl: ranks per worker (default: 1)")
    p.add_argument("--params", default=None, metavar="FILE",
                   help="the measured parameters (default: the lab's, shipped with the tool)")
    p.add_argument("--plan", action="store_true",
                   help="print per-host bytes each way, server imbalance, the busiest link and "
                        "a better placement; starts no process")
    p.add_argument("--json", dest="json_path", default=None, help="write the prediction here")
    return p


def question(args) -> dict:
    """The checked arguments of make_job (bad values: ConfigError)."""
    if args.num_workers < 1 or args.num_workers > MAX_PROCESSES:
        raise ConfigError(f"-n {args.num_workers}: give 1 to {MAX_PROCESSES} workers")
    if args.num_servers < 0 or args.num_servers > MAX_PROCESSES:
        raise ConfigError(f"-s {args.num_servers}: give 0 to {MAX_PROCESSES} servers")
    if args.hosts is not None and args.hosts < 1:
        raise ConfigError(f"--hosts {args.hosts}: give 1 or more")
    if args.devices_per_worker < 1:
        raise ConfigError(f"--devices-per-worker {args.devices_per_worker}: give 1 or more")
    rate_of = {}
    for item in args.rate_of:
        host, sep, rate = item.partition("=")
        if not sep:
            raise ConfigError(f"--rate-of {item!r}: expected HOST=RATE, e.g. h3=500mbit")
        rate_of[host.strip()] = parse_rate(rate, "--rate-of")
    hosts = args.hosts
    if args.host_matrix:
        hosts, rate_of = matrix_rates(args.host_matrix)
    from bandwidth.config.values import parse_image_shape
    try:
        shapes = networks.get_shapes(args.network, image_shape=parse_image_shape(args.image_shape),
                                     num_classes=args.num_classes, num_layers=args.num_layers)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    return dict(mode=args.kv_store, shapes=shapes, workers=args.num_workers,
                servers=args.num_servers, rate_bits=parse_rate(args.link_rate, "--link-rate"),
                placement=args.placement, hosts=hosts, rate_of=rate_of,
                in_flight=args.max_in_flight, ranks_per_worker=args.devices_per_worker,
                server_keys=args.server_keys, server_takes=args.server_takes)


def matrix_rates(path: str) -> tuple[int, dict]:
    """(hosts, {"h<i>": bits per second}) from a host-to-host matrix: each host's rate is the
    slowest cell from or to it (GB/s of one pair at a time)."""
    from bandwidth.links.hostmatrix import load_matrix

    matrix = load_matrix(path)
    names = list(dict.fromkeys(matrix.hosts))
    slowest = {name: float("inf") for name in names}
    for i, row in enumerate(matrix.gbps):
        for j, cell in enumerate(row):
            if cell is not None and matrix.hosts[i] != matrix.hosts[j]:
                for name in (matrix.hosts[i], matrix.hosts[j]):
                    slowest[name] = min(slowest[name], cell)
    if all(v == float("inf") for v in slowest.values()):
        raise ConfigError(f"--host-matrix {path}: no cell between two different hosts")
    rates = {f"h{k + 1}": slowest[n] * 8e9 for k, n in enumerate(names)
             if slowest[n] != float("inf")}
    return len(names), rates


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        check_output_path("--json", args.json_path)
        q = question(args)
        params = paramfile.load(args.params)
        job = make_job(**q)
        if args.plan:
            kw = {k: v for k, v in q.items()
                  if k not in ("mode", "shapes", "workers", "servers", "placement", "hosts")}
            options = ([] if job.mode == "dist_nccl" else
                       alternatives(job.mode, q["shapes"], q["workers"], q["servers"],
                                    params=params, current_placement=q["placement"],
                                    hosts=q["hosts"], **kw))
            balanced = (make_job(**dict(q, server_keys="balanced"))
                        if job.shares and job.server_keys == "mxnet" else None)
            print("\n".join(plan_lines(job, params, options, balanced)), flush=True)
            return 0
        lines, doc = report(job, q, params)
        print("\n".join(lines), flush=True)
        if args.json_path:
            write_atomic(args.json_path, json.dumps(doc, indent=1) + "\n", "the prediction")
            print(f"# wrote {args.json_path}", flush=True)
        return 0
    except BrokenPipeError:             # | head -3: the reader went away, as measure.py's
        return cliexit.broken_pipe()
    except KeyboardInterrupt:
        return cliexit.interrupted(PROG)
    except BandwidthError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except OSError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2


def report(job, q, params) -> tuple[list[str], dict]:
    found = predict(job, params)
    hosts = len(set(job.worker_hosts) | set(job.server_hosts))
    flight = "all" if job.in_flight is None else str(job.in_flight)
    workers = counted(len(job.worker_hosts), "worker")
    shape = (f"{workers} x {counted(len(job.server_hosts), 'server')}"
             if job.server_hosts else workers)
    lines = [f"# predicted: {job.mode}, {job.nbytes / 1e6:.2f} MB, {shape} on "
             f"{counted(hosts, 'host')} ({q['placement']}), {q['rate_bits'] / 1e9:g} Gbit/s "
             f"each way, messages in flight per server: {flight}"
             + (", each server taking one worker's share after another"
                if job.server_takes == "worker" else ""),
             f"# parameters: {params.source}",
             f"# model error: {error_text(params.check)}",
             f"step {found.seconds:.4f} s, {gbps_per_worker(job, found.seconds):.4f} GB/s per "
             f"worker",
             f"binds: {found.binding}: {found.resources[found.binding]:.4f} s (+ {found.serial_s:.4f}"
             " s that does not overlap: the last answers, a fixed cost per step)"]
    why = incast_words(found, params)
    if why:
        lines.append(f"  ({why})")
    stop = None
    if job.server_hosts:
        kw = {k: v for k, v in q.items() if k not in ("mode", "shapes", "workers", "servers",
                                                        "placement", "hosts", "rate_of")}
        stop = servers_stop_binding(job.mode, q["shapes"], q["workers"], params=params, **kw)
        lines.append("servers stop binding at S = " + (f"{stop} (each on a host of its own)"
                     if stop else f"none up to {4 * q['workers']}"))
    doc = {"mode": job.mode, "nbytes": job.nbytes, "workers": len(job.worker_hosts),
           "servers": len(job.server_hosts), "hosts": hosts, "placement": q["placement"],
           "rate_bits": q["rate_bits"], "max_in_flight": job.in_flight,
           "server_takes": job.server_takes,
           "seconds": found.seconds, "gbps_per_worker": gbps_per_worker(job, found.seconds),
           "binding": found.binding, "incast": why or None, "resources": found.resources,
           "serial_s": found.serial_s,
           "servers_stop_binding": stop, "params": params.to_dict()}
    return lines, doc


def error_text(check: dict | None) -> str:
    if not check:
        return "not checked (run benchmarks/predict_check.py)"
    return (f"median {check['median_pct']:.1f} %, worst {check['worst_pct']:.1f} % over "
            f"{check['runs']} held-out lab runs (benchmarks/predict_check.py, {check.get('date', '?')})")
