"""Report result documents from separate runs together, and check them against a baseline.

Usage (each FILE is a document written by ``measure.py --json`` or ``--save-baseline``)::

    python -m bandwidth.compare h200.json tcp.json rdma.json          # one table of all rows
    python -m bandwidth.compare tcp.json rdma.json --baseline-row 1 --plot cmp.png --csv cmp.csv
    python -m bandwidth.compare gpus2.json gpus4.json gpus8.json --speedup
    python -m bandwidth.compare now.json --baseline base.json --tolerance 10%
    python -m bandwidth.compare run1.json run2.json run3.json --baseline base.json  # 3 repeats
    python -m bandwidth.compare now.json --min-gbps 300                # floor only, no baseline

Prints the table of every row (mode x network x GPUs: GB/s per GPU, algbw, % of ceiling, error),
the performance-ratio table against ``--baseline-row`` (a row number or label; default row 1),
with ``--speedup`` the speed-up table of scaling runs, and with ``--baseline`` or ``--min-gbps``
the regression check. With a baseline, rows of the same key in several FILEs are repeats: a row
passes if any repeat is within the tolerance.

With ``--junit FILE``, ``--summary-md FILE`` (appended; by default ``$GITHUB_STEP_SUMMARY`` where
set) and ``--json FILE`` the gates' verdicts are also written for CI systems (docs/reporting.md).

Exit status: 0 reported / passed; 1 a failed gate (a regression, a row below --min-gbps or below
--min-percent-of-ceiling, a baseline row missing from every FILE, a link that lost NVLinks or
PCIe lanes since the baseline); 2 bad input (an
unreadable file, a bad flag value, a baseline from other hardware without --force, no row in
common with the baseline); 130 interrupted (Ctrl-C); 141 the reader of stdout went away
(``| head -1``; bandwidth.cliexit).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from bandwidth import cliexit, thresholds
from bandwidth.cliparse import OneLineParser, check_output_path
from bandwidth.errors import BandwidthError, ConfigError
from bandwidth.gates import summary_path
from bandwidth.report import baseline as bl
from bandwidth.report.table import report_lines, write_csv
from bandwidth.results.document import Row, load_document, rows_from_document


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="python -m bandwidth.compare",
        description="Join result documents (measure.py --json) from separate runs into one table, "
                    "a performance-ratio table, a speed-up table and a plot; optionally check "
                    "them against a baseline (exit 1 on a regression).",
        epilog=__doc__.split("::", 1)[1].split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("files", nargs="+", metavar="FILE.json", help="result documents")
    parser.add_argument("--baseline-row", default=None, metavar="N|LABEL",
                        help="row the ratio table divides by: its number in the table or its "
                             "label, e.g. 'device resnet-200 cuda:0,1' (default: row 1)")
    parser.add_argument("--speedup", action="store_true",
                        help="also print the speed-up table of scaling runs (same mode and "
                             "network at several GPU counts)")
    parser.add_argument("--plot", default=None, metavar="FILE.png",
                        help="draw the rows (bars, scaling or size-sweep lines, chosen from them)")
    parser.add_argument("--csv", default=None, metavar="FILE.csv", help="write the rows as CSV")
    check = parser.add_argument_group("regression check")
    check.add_argument("--baseline", default=None, metavar="BASE.json",
                       help="compare every FILE's rows with this document's (matched by mode, "
                            "network, GPUs, dtype, optimizer)")
    check.add_argument("--tolerance", default="10%",
                       help="allowed drop below the baseline, in percent: 10%% or 10 "
                            "(default 10%%)")
    check.add_argument("--min-gbps", default=None, metavar="X",
                       help="fail any row whose GB/s per GPU (busbw) is below X")
    check.add_argument("--force", action="store_true",
                       help="compare with a baseline measured on other hardware")
    check.add_argument("--allow-missing", action="store_true",
                       help="let rows of the baseline that no FILE holds pass (by default they "
                            "fail: a missing measurement is not a pass)")
    check.add_argument("--min-percent-of-ceiling", default=None, metavar="P",
                       help="fail any row below P %% of the ceiling measured in its own run")
    reports = parser.add_argument_group("reports for CI")
    reports.add_argument("--junit", default=None, metavar="FILE.xml",
                         help="write the gates' verdicts as JUnit XML (one test case per gate)")
    reports.add_argument("--summary-md", default=None, metavar="FILE.md",
                         help="append a markdown summary (default: $GITHUB_STEP_SUMMARY when set)")
    reports.add_argument("--json", dest="json_path", default=None, metavar="FILE.json",
                         help='write the gates\' verdicts as {"gates": [...], "exit_status": N}')
    return parser


def source_names(paths: list[str]) -> list[str]:
    """File names, or the paths as given where two files share a name (run1/r.json, run2/r.json)."""
    names = [Path(p).name for p in paths]
    return [n if names.count(n) == 1 else str(p) for n, p in zip(names, paths)]


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        status = _compare(args)
        sys.stdout.flush()         # a closed pipe shows here, inside these handlers, not at exit
        return status
    except BrokenPipeError:
        return cliexit.broken_pipe()
    except KeyboardInterrupt:
        return cliexit.interrupted("compare")
    except BandwidthError as exc:
        print(f"compare: error: {exc}", file=sys.stderr)
        return exc.exit_code


def _compare(args: argparse.Namespace) -> int:
    tolerance = thresholds.parse_tolerance(args.tolerance)
    min_gbps = None if args.min_gbps is None else thresholds.parse_min_gbps(args.min_gbps)
    min_pct = None if args.min_percent_of_ceiling is None else \
        thresholds.parse_min_percent(args.min_percent_of_ceiling)
    gates = bl.Gates(tolerance, min_gbps, min_pct, args.allow_missing)
    summary_md = summary_path(args.summary_md, os.environ)
    for path, flag in ((args.junit, "--junit"), (summary_md, "--summary-md"),
                       (args.json_path, "--json")):
        check_output_path(flag, path)
    docs = [load_document(p) for p in args.files]
    rows: list[Row] = []
    for name, doc in zip(source_names(args.files), docs):
        found = rows_from_document(doc, name)
        if not found:
            raise ConfigError(f"{name!r} holds no results")
        rows += found
    base_doc = None if args.baseline is None else bl.load_baseline(args.baseline)
    result = None
    if base_doc is not None or gates.any:
        # Before anything is printed: a baseline from other hardware is refused with one line.
        fingerprints = {name: bl.document_fingerprint(doc)
                        for name, doc in zip(source_names(args.files), docs)}
        base_name = Path(args.baseline).name if args.baseline else "the baseline"
        result = bl.check(rows, base_doc, fingerprints=fingerprints, force=args.force,
                          baseline_name=base_name, gates=gates)
    for line in report_lines(rows, args.baseline_row, args.speedup):
        print(line)
    if args.csv:
        write_csv(rows, args.csv)
        print(f"# wrote {args.csv}")
    if args.plot:
        from bandwidth.report.plot import plot_rows

        kind = plot_rows(rows, args.plot)
        print(f"# wrote {args.plot} ({kind} plot)")
    if result is None:
        if args.junit or args.summary_md or args.json_path:
            raise ConfigError("--junit, --summary-md and --json report the gates: give "
                              "--baseline, --min-gbps or --min-percent-of-ceiling")
        return 0
    print()
    print("\n".join(result.lines))
    for line in bl.write_gate_reports(result, gates, tool="python -m bandwidth.compare",
                                      junit_path=args.junit, summary_md=summary_md,
                                      json_path=args.json_path,
                                      baseline_given=base_doc is not None, rows=rows):
        print(line)
    return result.exit_code


if __name__ == "__main__":
    sys.exit(main())
