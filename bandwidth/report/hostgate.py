"""Per-host and per-pair gates on the host-to-host matrix, and the re-pairing pass that says which
host is at fault.

Usage (the matrix from ``launch.py -H hosts -n K python -m bandwidth.ceiling --network --json``)::

    python -m bandwidth.hostgate hosts.json                    # pairs at 70 % of the reference
    python -m bandwidth.hostgate hosts.json --min-percent 80 --junit hosts.xml

The rules, on the matrix's data (every cell one direction of one pair, measured alone):

1. A **pair** of hosts carries the slower of its two directions (the slowest cell between any of
   their processes). The reference is what a healthy host reaches: the median over hosts of each
   host's fastest pair (a median over pairs would let one slow host, which is in every other
   pair of a small cluster, pull the reference down to its own rate). A pair **fails** below
   ``--min-percent`` of the reference; the slowest pair is named whether or not it fails.
2. Each **host**'s figure is the median of its pairs; the slowest host is named.
3. **Re-pairing** (as GCP's cluster scanner does with suspect nodes): each host of a failing pair
   is held against the hosts that have shown the rate in some pair (cleared). A host slow with
   every cleared host is **at fault**; a failing pair neither of whose hosts is at fault is a
   fault of that path alone; with no cleared host to pair with (two hosts) nothing is blamed.
   The full matrix already holds every re-paired measurement, so the pass reads them from it; a
   suspect the matrix holds no pair with a cleared host for is reported as not re-paired.

The same command gates the host check in rounds (``python -m bandwidth.ceiling --network --rounds
--json R.json``; bandwidth.report.roundgate): it names each slow host and slow path the rounds
found, at the document's own threshold unless ``--min-percent`` is given. And the GPU check of one host
(``python -m bandwidth.ceiling --gpus-check --json G.json``; bandwidth.report.gpugate): it names
each slow GPU, slow host link and slow GPU pair.

Exit status: 0 every pair passes, 1 a pair, host or path fails (named), 2 bad input.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from dataclasses import dataclass

from bandwidth.cliparse import check_output_path
from bandwidth.errors import BandwidthError, ConfigError
from bandwidth.gates import GateRecord, summary_path, write_reports
from bandwidth.links.hostmatrix import HostMatrix, load_matrix
from bandwidth.links.gpudoc import load_gpu_rounds
from bandwidth.links.rounddoc import load_rounds, read_document
from bandwidth.report.gpugate import gpu_lines, gpu_records
from bandwidth.report.roundgate import round_lines, round_records
from bandwidth.textformat import gbps_3
from bandwidth.thresholds import parse_min_percent

DEFAULT_PCT = 70.0


def pair_rates(matrix: HostMatrix) -> dict[tuple[str, str], float]:
    """(host a, host b) with a < b -> the slowest cell between them, either direction."""
    out: dict[tuple[str, str], float] = {}
    for i, row in enumerate(matrix.gbps):
        for j, value in enumerate(row):
            a, b = matrix.hosts[i], matrix.hosts[j]
            if value is None or a == b:
                continue
            key = (min(a, b), max(a, b))
            out[key] = min(value, out.get(key, value))
    return out


@dataclass(frozen=True)
class HostVerdicts:
    median_gbps: float                        # the reference: median of each host's best pair
    threshold_gbps: float
    pairs: dict[tuple[str, str], float]
    failing_pairs: list[tuple[str, str]]
    host_gbps: dict[str, float]               # median of each host's pairs
    faulty_hosts: list[str]                   # from the re-pairing pass
    path_faults: list[tuple[str, str]]        # failing pairs with no faulty host
    unresolved: list[str]                     # hosts the matrix cannot re-pair

    @property
    def slowest_pair(self) -> tuple[str, str]:
        return min(self.pairs, key=self.pairs.get)

    @property
    def slowest_host(self) -> str:
        return min(self.host_gbps, key=self.host_gbps.get)


def judge(matrix: HostMatrix, min_pct: float = DEFAULT_PCT) -> HostVerdicts:
    pairs = pair_rates(matrix)
    if not pairs:
        raise ConfigError(f"{matrix.file}: the matrix holds no pair of two different hosts")
    hosts = sorted({h for p in pairs for h in p})
    best = {h: max(v for p, v in pairs.items() if h in p) for h in hosts}
    reference = statistics.median(best.values())
    threshold = reference * min_pct / 100.0
    failing = sorted(p for p, v in pairs.items() if v < threshold)
    host_gbps = {h: statistics.median(v for p, v in pairs.items() if h in p) for h in hosts}
    suspects = sorted({h for p in failing for h in p})
    # Re-pairing: a host with a passing pair has shown it can run at the rate (cleared). A
    # suspect that is slow with every cleared host it was paired with is at fault; one that is
    # fast with some of them leaves its failing pairs to the path between the two.
    cleared = [h for h in hosts if any(h in p and p not in failing for p in pairs)]
    faulty, unresolved = [], []
    for host in suspects:
        with_cleared = [(min(host, g), max(host, g)) for g in cleared if g != host]
        with_cleared = [p for p in with_cleared if p in pairs]
        if not with_cleared:
            unresolved.append(host)
        elif all(p in failing for p in with_cleared):
            faulty.append(host)
    paths = [p for p in failing if not (set(p) & set(faulty)) and not (set(p) & set(unresolved))]
    return HostVerdicts(reference, threshold, pairs, failing, host_gbps, faulty, paths, unresolved)


def records(v: HostVerdicts, min_pct: float) -> list[GateRecord]:
    """One record per pair and one per host, for the reports (gate "host")."""
    margin = f"at least {min_pct:g} % of the reference ({gbps_3(v.median_gbps)} GB/s)"
    out = []
    for pair, gbps in sorted(v.pairs.items()):
        failed = pair in v.failing_pairs
        verdict = "SLOW PAIR" if failed else "ok"
        note = "the slowest pair" if pair == v.slowest_pair else ""
        if pair in v.path_faults:
            note = "; ".join(filter(None, [note, "neither host is slow with others: the path"]))
        out.append(GateRecord("host", f"pair {pair[0]}<->{pair[1]}", verdict, failed, gbps,
                              v.threshold_gbps, margin, note))
    for host, gbps in sorted(v.host_gbps.items()):
        failed = host in v.faulty_hosts
        verdict = "HOST AT FAULT" if failed else \
            "not re-paired" if host in v.unresolved else "ok"
        note = "; ".join(filter(None, [
            "the slowest host" if host == v.slowest_host else "",
            "slow with every cleared host too (re-pairing)" if failed else "",
            "no cleared host to re-pair it with" if host in v.unresolved else ""]))
        out.append(GateRecord("host", f"host {host}", verdict, failed, gbps, v.threshold_gbps,
                              margin + ", median of the host's pairs", note))
    return out


def lines(v: HostVerdicts, min_pct: float) -> list[str]:
    a, b = v.slowest_pair
    out = [f"# host gate: a pair fails below {min_pct:g} % of the reference, the median host's "
           f"best pair ({gbps_3(v.median_gbps)} GB/s): {gbps_3(v.threshold_gbps)} GB/s",
           f"# slowest pair: {a}<->{b} {gbps_3(v.pairs[v.slowest_pair])} GB/s; slowest host: "
           f"{v.slowest_host} (median of its pairs {gbps_3(v.host_gbps[v.slowest_host])} GB/s)"]
    for pair in v.failing_pairs:
        out.append(f"# SLOW PAIR {pair[0]}<->{pair[1]}: {gbps_3(v.pairs[pair])} GB/s")
    for host in v.faulty_hosts:
        out.append(f"# HOST AT FAULT {host}: slow with every host that reaches the rate with "
                   "others")
    for pair in v.path_faults:
        out.append(f"# path {pair[0]}<->{pair[1]} at fault: both hosts are fast with others")
    for host in v.unresolved:
        out.append(f"# {host}: not re-paired (no cleared host to pair it with)")
    out.append(f"# FAILED: {len(v.failing_pairs)} of {len(v.pairs)} pairs slow"
               + (f"; at fault: {', '.join(v.faulty_hosts)}" if v.faulty_hosts else "")
               if v.failing_pairs else f"# PASSED ({len(v.pairs)} pairs)")
    return out


def main(argv: list[str] | None = None) -> int:
    class Parser(argparse.ArgumentParser):
        def error(self, message):
            raise ConfigError(message)

    p = Parser(prog="python -m bandwidth.hostgate",
               description="Per-pair and per-host gates on a host-to-host matrix, and the "
                           "re-pairing pass that names the host at fault; the same on the host "
                           "check in rounds and on the GPU check of one host (slow GPU, GPU "
                           "pair, host link).")
    p.add_argument("matrix", metavar="FILE.json", help="the --json of python -m "
                   "bandwidth.ceiling --network (the matrix), --network --rounds or "
                   "--gpus-check")
    p.add_argument("--min-percent", default=None, metavar="P",
                   help="a pair fails below P %% of the median host's best pair (default 70; "
                        "for rounds and the GPU check, the percent they were measured at)")
    p.add_argument("--junit", default=None, metavar="FILE.xml")
    p.add_argument("--summary-md", default=None, metavar="FILE.md")
    try:
        args = p.parse_args(argv)
        pct = None if args.min_percent is None else parse_min_percent(args.min_percent)
        summary_md = summary_path(args.summary_md, os.environ)
        for path, flag in ((args.junit, "--junit"), (summary_md, "--summary-md")):
            check_output_path(flag, path)
        doc = read_document(args.matrix, "host gate:")
        if isinstance(doc, dict) and "rounds" in doc:
            record = load_rounds(args.matrix, doc)
            verdict = record.verdict(pct)
            text, gates, failed = (round_lines(record, verdict), round_records(record, verdict),
                                   verdict.failed)
        elif isinstance(doc, dict) and "gpu_rounds" in doc:
            gpu_record = load_gpu_rounds(args.matrix, doc)
            verdict = gpu_record.verdict(pct)
            text, gates, failed = (gpu_lines(gpu_record, verdict),
                                   gpu_records(gpu_record, verdict), verdict.failed)
        else:
            pct = DEFAULT_PCT if pct is None else pct
            verdicts = judge(load_matrix(args.matrix), pct)
            text, gates, failed = (lines(verdicts, pct), records(verdicts, pct),
                                   bool(verdicts.failing_pairs))
        print("\n".join(text))
        for line in write_reports(gates, tool=p.prog, title=f"bandwidth: {p.prog}",
                                  verdict_line=text[-1], junit_path=args.junit,
                                  summary_md=summary_md):
            print(line)
    except BandwidthError as exc:
        print(f"python -m bandwidth.hostgate: error: {exc}", file=sys.stderr)
        return exc.exit_code
    return 1 if failed else 0

