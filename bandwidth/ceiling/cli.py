"""The command line of ``python -m bandwidth.ceiling`` (see the package docstring)."""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from bandwidth import cliexit
from bandwidth.ceiling import render
from bandwidth.ceiling.model import PARTS
from bandwidth.config.values import check_timeout, parse_gpus, parse_size, size_sweep
from bandwidth.cliparse import check_output_path
from bandwidth.errors import BandwidthError, ConfigError
from bandwidth.files import write_atomic
from bandwidth.gates import summary_path, write_reports
from bandwidth.textformat import render as render_table
from bandwidth.thresholds import parse_min_percent

if TYPE_CHECKING:
    from bandwidth.ceiling.suite import CeilingOptions

PROG = "python -m bandwidth.ceiling"
MAX_MB = 1e9                              # 1 PB: beyond any memory


class _Parser(argparse.ArgumentParser):
    def error(self, message):             # one line and status 2, not the usage block
        message = " ".join(message.split())
        raise ConfigError(message if len(message) <= 300 else message[:300] + "...")


def add_check_flags(p: argparse.ArgumentParser) -> None:
    """The checks that name a slow part: hosts (--network, --rounds) and this host's GPUs."""
    p.add_argument("--network", action="store_true",
                   help="under launch.py: the host-to-host bandwidth matrix between the launched "
                        "processes (the ceiling of the distributed modes)")
    p.add_argument("--rounds", action="store_true",
                   help="with --network: find the slow host and the slow path in rounds of "
                        "disjoint pairs instead of the full matrix (bandwidth.links.rounds); "
                        "judge its --json with python -m bandwidth.hostgate")
    p.add_argument("--gpus-check", action="store_true",
                   help="check this host's GPUs in rounds of disjoint pairs (every pair, both "
                        "ways at once) and each GPU's host link; name a slow GPU, GPU pair or "
                        "host link and exit 1 (bandwidth.links.gpurounds); with two GPUs the "
                        "pair is held against NVML's figure (--expect-links P, default 60 %%); "
                        "judge its --json with python -m bandwidth.hostgate")
    p.add_argument("--no-peer", default=None, metavar="PAIRS",
                   help="with --gpus-check: peer access off for these GPU pairs (0-1,2-3 or "
                        "all), so their copies are staged through host memory: what a lost "
                        "NVLink path reads, for trying the check")
    p.add_argument("--min-percent", default=None, metavar="P",
                   help="with --rounds or --gpus-check: a pair is slow below P %% of the "
                        "reference (default 70)")
    p.add_argument("--screen-rounds", default=None, metavar="K|all",
                   help="with --rounds: rounds of the round robin before re-pairing (default "
                        "ceil(log2 N)); 'all' measures every pair, which finds every slow path")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog=PROG, formatter_class=argparse.RawDescriptionHelpFormatter,
                description="Measure this host's communication ceilings: peer-to-peer bandwidth "
                            "and latency matrices (p2pBandwidthLatencyTest's), host<->device "
                            "copies per GPU, host memory copy and sum rates, collective busbw "
                            "over a size sweep (nccl-tests'), and the NVML link topology.",
                epilog="examples:\n"
                       f"  {PROG}                          # every visible GPU\n"
                       f"  {PROG} --gpus 0,1 -b 1M -e 1G -f 2 --json ceilings.json\n"
                       f"  {PROG} --skip nccl,p2p-disabled --mb 64\n"
                       f"  {PROG} --cpus 2                 # no GPU: memory, Gloo\n"
                       f"  python launch.py -H hosts -n N {PROG} --network --rounds --json R.json"
                       "\n      # the slow host, the slow path: then python -m bandwidth.hostgate "
                       "R.json\n"
                       f"  {PROG} --gpus-check --json G.json  # the slow GPU, GPU pair or host "
                       "link (exit 1)\n"
                       "parts for --skip: " + ", ".join(PARTS))
    p.add_argument("--gpus", default=None, help="comma list of GPU ids (default: every visible "
                   "GPU; CPU devices when there is none)")
    p.add_argument("--cpus", type=int, default=None, help="N CPU devices instead of GPUs")
    p.add_argument("-b", "--minbytes", default=None,
                   help="collectives: smallest size, e.g. 1M (default 1M on GPUs, 64K on CPUs)")
    p.add_argument("-e", "--maxbytes", default=None,
                   help="collectives: largest size (default 1G on GPUs, 4M on CPUs)")
    p.add_argument("-f", "--stepfactor", type=float, default=2.0,
                   help="collectives: size multiplier (default 2)")
    p.add_argument("-n", "--iters", type=int, default=20,
                   help="collectives: calls per timed burst (default 20)")
    p.add_argument("-w", "--warmup", type=int, default=5,
                   help="collectives: untimed calls per size (default 5)")
    p.add_argument("--mb", type=float, default=256.0,
                   help="buffer of the host<->device copies and the sums, MB of 1e6 bytes "
                        "(default 256)")
    p.add_argument("--p2p-mb", type=float, default=160.0,
                   help="buffer of the peer-to-peer copies, MB (default 160: "
                        "p2pBandwidthLatencyTest's 40,000,000 ints)")
    p.add_argument("--p2p-burst", type=int, default=5,
                   help="back-to-back peer copies per sample (default 5, the reference's)")
    p.add_argument("--repeats", type=int, default=5, help="timed samples, median (default 5)")
    p.add_argument("--burst", type=int, default=10,
                   help="back-to-back host<->device copies and GPU adds per sample (default 10)")
    p.add_argument("--latency-repeat", type=int, default=100,
                   help="16-byte copies per latency sample (default 100)")
    p.add_argument("--cpu-threads", type=int, default=None,
                   help="torch CPU threads for the host sums (default: torch's)")
    p.add_argument("--skip", default="", help="comma list of parts not to measure")
    p.add_argument("--timeout", type=float, default=600.0,
                   help="seconds allowed to each child process (default 600)")
    add_check_flags(p)
    p.add_argument("--json", dest="json_path", default=None,
                   help='also write the results to this file as JSON: {"ceilings": ...}, '
                        'or {"network": ...} with --network (the file --network-ceiling reads), '
                        'or {"rounds": ...} with --network --rounds, or {"gpu_rounds": ...} '
                        'with --gpus-check (both what hostgate reads)')
    p.add_argument("--expect-links", nargs="?", const="60", default=None, metavar="P",
                   help="fail (exit 1) any link below P %% (default 60) of what NVML says it "
                        "carries: NVLinks x the rate of their generation, PCIe generation x "
                        "lanes; and any link NVML shows degraded (with --gpus-check: the "
                        "percent of NVML's figure a pair is held to where there is no median)")
    p.add_argument("--junit", default=None, metavar="FILE.xml",
                   help="write the --expect-links verdicts as JUnit XML (one test case per link)")
    p.add_argument("--summary-md", default=None, metavar="FILE.md",
                   help="append the --expect-links verdicts as markdown (default: "
                        "$GITHUB_STEP_SUMMARY when set)")
    return p


def check_numbers(args) -> None:
    """Every numeric flag in its range: one line naming the flag, never a traceback later."""
    check_timeout(args.timeout)
    for flag, value, low in (("--mb", args.mb, 0), ("--p2p-mb", args.p2p_mb, 0)):
        if not (math.isfinite(value) and value > low):
            raise ConfigError(f"{flag} must be a positive number; got {value:g}")
    if args.mb > MAX_MB or args.p2p_mb > MAX_MB:
        raise ConfigError(f"--mb and --p2p-mb must be at most {MAX_MB:g} (MB of 1e6 bytes); got "
                          f"{args.mb:g} and {args.p2p_mb:g}")
    for flag, value, low in (("-n/--iters", args.iters, 1), ("-w/--warmup", args.warmup, 0),
                             ("--p2p-burst", args.p2p_burst, 1), ("--repeats", args.repeats, 1),
                             ("--burst", args.burst, 1),
                             ("--latency-repeat", args.latency_repeat, 1),
                             ("--cpu-threads", args.cpu_threads, 1)):
        if value is not None and value < low:
            raise ConfigError(f"{flag} must be at least {low}; got {value}")
    if not math.isfinite(args.stepfactor):
        raise ConfigError(f"-f must be a number greater than 1; got {args.stepfactor:g}")


def options_from_args(args, is_cuda: bool) -> CeilingOptions:
    from bandwidth.ceiling.suite import CeilingOptions

    sizes = None
    if args.minbytes is not None or args.maxbytes is not None:
        begin = parse_size(args.minbytes or ("1M" if is_cuda else "64K"))
        end = parse_size(args.maxbytes or args.minbytes or ("1G" if is_cuda else "4M"))
        sizes = tuple(size_sweep(begin, end, args.stepfactor))
    elif args.stepfactor <= 1:
        raise ConfigError(f"-f must be greater than 1; got {args.stepfactor:g}")
    skip = frozenset(s.strip() for s in args.skip.split(",") if s.strip())
    return CeilingOptions(nbytes=int(args.mb * 1e6), p2p_nbytes=int(args.p2p_mb * 1e6),
                          p2p_burst=args.p2p_burst, repeats=args.repeats, burst=args.burst,
                          latency_repeat=args.latency_repeat, sizes=sizes, iters=args.iters,
                          warmup=args.warmup, skip=skip, cpu_threads=args.cpu_threads,
                          timeout_s=args.timeout)


def rounds_options(args) -> tuple[float, int | str | None]:
    """--min-percent and --screen-rounds, which only --network --rounds takes."""
    if not args.rounds:
        given = [flag for flag, value in (("--min-percent", args.min_percent),
                                          ("--screen-rounds", args.screen_rounds))
                 if value and not (args.gpus_check and flag == "--min-percent")]
        if given:
            raise ConfigError(f"{' and '.join(given)} set the host check in rounds: add "
                              "--network --rounds")
        return parse_min_percent(args.min_percent or "70"), None
    if not args.network:
        raise ConfigError("--rounds is a way of measuring --network: add --network (under "
                          "launch.py)")
    screen = args.screen_rounds
    if screen is not None and screen != "all":
        if not screen.strip().isdigit() or int(screen) < 1:
            raise ConfigError(f"--screen-rounds must be a whole number of rounds (at least 1) "
                              f"or 'all'; got {screen!r}")
        screen = int(screen)
    return parse_min_percent(args.min_percent or "70"), screen


def network_main(args) -> int:
    from bandwidth.ceiling.network import measure_network, render

    if args.rounds:
        return rounds_main(args)
    matrix = measure_network(int(args.mb * 1e6), args.repeats, args.timeout)
    if matrix is not None:
        _show(render(matrix), args.json_path, {"network": matrix}, "the network matrix")
    return 0


def rounds_main(args) -> int:
    """--network --rounds: rank 0 prints and writes the search's document; 0 once measured (the
    gate on it is python -m bandwidth.hostgate's)."""
    from bandwidth.ceiling.netrounds import measure_rounds, render

    pct, screen = rounds_options(args)
    doc = measure_rounds(int(args.mb * 1e6), args.repeats, args.timeout, pct, screen)
    if doc is not None:
        _show(render(doc), args.json_path, {"rounds": doc}, "the host check's rounds")
    return 0


def _show(lines: list[str], json_path: str | None, doc: dict, what: str) -> None:
    """Rank 0's lines printed, and ``doc`` written to ``--json``'s file where one is named
    (``what`` names it in an error)."""
    print("\n".join(lines), flush=True)
    if json_path:
        write_atomic(json_path, json.dumps(doc, indent=1) + "\n", what)
        print(f"# wrote {json_path}")


def gpus_check(args, min_percent: float) -> int:
    """--gpus-check (bandwidth.ceiling.gpucheck): its flags checked, then the check."""
    from bandwidth.ceiling.gpucheck import gpus_main

    if args.network or args.rounds:
        raise ConfigError("--gpus-check checks the GPUs of this host; --network checks hosts: "
                          "one at a time")
    if args.junit or args.summary_md:
        raise ConfigError("the GPU check's JUnit and markdown come from the gate on its JSON: "
                          "python -m bandwidth.hostgate G.json --junit FILE.xml")
    expect = parse_min_percent(args.expect_links) if args.expect_links is not None else 60.0
    options = options_from_args(args, True)
    return gpus_main(args, options, min_percent, expect,
                     lambda m: print(f"# {m}", file=sys.stderr, flush=True))


def _expect_args(args, devices, options) -> tuple[float | None, str | None]:
    """--expect-links, --junit and --summary-md checked before anything is measured."""
    import os

    if args.expect_links is None:
        if args.junit or args.summary_md:
            raise ConfigError("--junit and --summary-md report the --expect-links gate: add "
                              "--expect-links")
        return None, None
    pct = parse_min_percent(args.expect_links)
    if not devices.is_cuda:
        raise ConfigError("--expect-links judges GPU links from NVML's facts: there are none on "
                          "CPU devices")
    missing = {"topology", "host"} & options.skip
    if missing or "p2p" in options.skip and len(devices.ids) > 1:
        raise ConfigError(f"--expect-links needs the parts it judges: do not --skip "
                          f"{','.join(sorted(missing | ({'p2p'} & options.skip)))}")
    summary_md = summary_path(args.summary_md, os.environ)
    for path, flag in ((args.junit, "--junit"), (summary_md, "--summary-md")):
        check_output_path(flag, path)
    return pct, summary_md


def _expect(ceilings, pct: float, junit: str | None, summary_md: str | None,
            json_path: str | None) -> int:
    """The --expect-links gate on the measured ceilings: table, verdict, reports; 0 or 1."""
    from bandwidth.ceiling.expect import link_gates

    doc = ceilings.to_dict()
    if ceilings.topology is None:
        raise ConfigError(f"--expect-links: NVML's link facts are not available here "
                          f"({ceilings.not_applicable.get('topology', 'no topology')})")
    records = link_gates(doc, pct)
    failed = [r for r in records if r.failed]
    verdict = (f"# FAILED: {len(failed)} of {len(records)} links ("
               + ", ".join(f"{r.name}: {r.verdict}" for r in failed) + ")") if failed else \
        f"# PASSED ({len(records)} links at or above {pct:g} % of what NVML says they carry)"
    cells = [[r.name, "-" if r.value is None else f"{r.value:.1f}",
              "-" if r.reference is None else f"{r.reference:.1f}", r.verdict, r.detail]
             for r in records]
    print()
    print(f"# expected links: each at least {pct:g} % of what NVML says it carries")
    print("\n".join(render_table(["link", "measured GB/s", f"{pct:g} % of expected GB/s",
                                  "verdict", "detail"], cells, right={1, 2})))
    print(verdict)
    for line in write_reports(records, tool=PROG, title=f"bandwidth: {PROG}",
                              verdict_line=verdict, junit_path=junit, summary_md=summary_md):
        print(line)
    if json_path:
        data = json.loads(Path(json_path).read_text())
        data["gates"] = [r.to_dict() for r in records]
        data["verdict"] = verdict
        write_atomic(json_path, json.dumps(data, indent=1) + "\n", "the ceiling's JSON")
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    """Exit status: 0 done, 1 a part failed (printed as FAILED), 2 bad input, 130 interrupted
    (Ctrl-C), 141 the reader of stdout went away (bandwidth.cliexit)."""
    try:
        args = build_parser().parse_args(argv)
        check_output_path("--json", args.json_path)
        if args.gpus is not None and args.cpus is not None:
            raise ConfigError("--gpus and --cpus exclude each other")
        if args.cpus is not None and args.cpus < 1:
            raise ConfigError(f"--cpus must be at least 1; got {args.cpus}")
        check_numbers(args)
        # torch, 2 s, after the flags' checks: a Ctrl-C while it imports still ends the process
        # at once (the quiet handler: torch's import may swallow a KeyboardInterrupt).
        import torch  # noqa: F401
        cliexit.restore_interrupt()
        min_percent, _ = rounds_options(args)
        if args.gpus_check:
            return gpus_check(args, min_percent)
        if args.no_peer is not None:
            raise ConfigError("--no-peer sets the GPU check's pairs: add --gpus-check")
        if args.network:
            return network_main(args)
        from bandwidth.ceiling.suite import measure_ceilings
        from bandwidth.hardware.devices import resolve

        devices = resolve(parse_gpus(args.gpus) if args.gpus is not None else None, args.cpus)
        options = options_from_args(args, devices.is_cuda)
        expect_pct, summary_md = _expect_args(args, devices, options)
        # The preamble first: a reader that goes away (| head -1) shows as a broken pipe when
        # the rest is printed, not as a success.
        ceilings = measure_ceilings(devices, options,
                                    progress=lambda m: print(f"# {m}", file=sys.stderr, flush=True),
                                    started=lambda c: print("\n".join(render.preamble(c)),
                                                            flush=True))
        print("\n".join(render.lines(ceilings)[len(render.preamble(ceilings)):]), flush=True)
        if args.json_path:
            write_atomic(args.json_path, json.dumps({"ceilings": ceilings.to_dict()}, indent=1)
                         + "\n", "the ceiling's JSON")
            print(f"# wrote {args.json_path}")
        if expect_pct is not None:
            status = _expect(ceilings, expect_pct, args.junit, summary_md, args.json_path)
            return max(status, 1 if ceilings.failures else 0)
    except BrokenPipeError:
        return cliexit.broken_pipe()
    except KeyboardInterrupt:
        return cliexit.interrupted(PROG)
    except BandwidthError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except (OSError, cliexit.out_of_memory()) as exc:
        print(f"{PROG}: error: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 2
    return 1 if ceilings.failures else 0
