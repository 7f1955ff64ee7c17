"""The gates' verdicts as CI systems show them: JUnit XML, a markdown summary, and JSON.

One ``GateRecord`` per gated figure (a row against the baseline, the floor or its ceiling, a
link against the baseline or against what NVML says it should carry) is made from the checks'
results (``bandwidth.report.baseline.records_from_diffs``, ``bandwidth.ceiling.expect.link_gates``,
``bandwidth.report.hostgate.records``,
``bandwidth.report.gpugate.gpu_records``), and every output is written from the same records, so
that a verdict reads the same in the text, JSON, JUnit and markdown. The records sit below every
stage, as the vocabulary, since the gates of the ceiling and of the report share them:

- ``junit_xml``: ``<testsuites>`` with one ``<testsuite>`` per gate kind and one ``<testcase>``
  per record; a failed gate has a ``<failure>`` whose message carries the measured value, the
  reference, the margin and the verdict. It validates against the JUnit schema of Jenkins'
  xUnit plugin (tests/junit-10.xsd says where that comes from).
- ``markdown``: a title, the verdict line and a table, for ``$GITHUB_STEP_SUMMARY``.
- ``to_dict``: what the JSON outputs hold under ``"gates"``.
"""

from __future__ import annotations

import datetime
import socket
from dataclasses import asdict, dataclass
from xml.sax.saxutils import escape, quoteattr

from bandwidth.files import append_atomic, write_atomic

SUITES = {"baseline": "regression against the baseline", "floor": "floor (--min-gbps)",
          "ceiling": "share of the ceiling (--min-percent-of-ceiling)",
          "link": "links against the baseline", "expect": "links against NVML (--expect-links)",
          "host": "hosts of the host-to-host matrix",
          "gpu": "GPUs of one host (--gpus-check)"}


@dataclass(frozen=True)
class GateRecord:
    gate: str                   # a key of SUITES
    name: str                   # the row label, or the link ("GPU 0<->1 p2p")
    verdict: str
    failed: bool
    value: float | None         # what was measured (GB/s), None where nothing was
    reference: float | None     # what it was held against (GB/s)
    margin: str                 # the rule, in words: "tolerance 10 %", "at least 60 % of ..."
    detail: str = ""            # anything else: p-value, p50/p95/cv, why a row has no ceiling

    def message(self) -> str:
        """``device mlp cpu x2: measured 1.234 GB/s, reference 2.000 GB/s (tolerance 10 %...):
        REGRESSION``."""
        parts = [f"measured {_gbps(self.value)}", f"reference {_gbps(self.reference)}"]
        text = f"{self.name}: {', '.join(parts)} ({self.margin}): {self.verdict}"
        return text + (f"; {self.detail}" if self.detail else "")

    def to_dict(self) -> dict:
        return dict(asdict(self), message=self.message())


def _gbps(value: float | None) -> str:
    return "none" if value is None else f"{value:.3f} GB/s"


def junit_xml(records: list[GateRecord], tool: str, seconds: float = 0.0) -> str:
    """The JUnit XML document of ``records`` (one test suite per gate kind, in SUITES' order)."""
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
    host = socket.gethostname()
    failures = sum(r.failed for r in records)
    lines = ['<?xml version="1.0" encoding="UTF-8"?>',
             f'<testsuites name={quoteattr(tool)} tests="{len(records)}" '
             f'failures="{failures}" errors="0" time="{seconds:.3f}">']
    for gate, title in SUITES.items():
        mine = [r for r in records if r.gate == gate]
        if not mine:
            continue
        lines.append(f'  <testsuite name={quoteattr(f"{tool}: {title}")} tests="{len(mine)}" '
                     f'failures="{sum(r.failed for r in mine)}" errors="0" skipped="0" '
                     f'time="0" timestamp="{stamp}" hostname={quoteattr(host)}>')
        for r in mine:
            head = f'    <testcase name={quoteattr(r.name)} classname="bandwidth.{gate}" time="0"'
            if r.failed:
                lines += [head + ">",
                          f'      <failure type={quoteattr(r.verdict)} '
                          f'message={quoteattr(r.message())}>{escape(r.message())}</failure>',
                          f'      <system-out>{escape(r.message())}</system-out>',
                          "    </testcase>"]
            else:
                lines += [head + ">", f'      <system-out>{escape(r.message())}</system-out>',
                          "    </testcase>"]
        lines.append("  </testsuite>")
    lines.append("</testsuites>")
    return "\n".join(lines) + "\n"


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown(records: list[GateRecord], title: str, verdict_line: str) -> str:
    """A short markdown report: the title, the verdict line, one table row per gate."""
    lines = [f"### {_md_cell(title)}", "", f"**{_md_cell(verdict_line.lstrip('# '))}**", "",
             "| gate | name | measured GB/s | reference GB/s | verdict | detail |",
             "|---|---|---:|---:|---|---|"]
    for r in records:
        verdict = f"**{r.verdict}**" if r.failed else r.verdict
        lines.append(f"| {r.gate} | {_md_cell(r.name)} | "
                     f"{'-' if r.value is None else f'{r.value:.3f}'} | "
                     f"{'-' if r.reference is None else f'{r.reference:.3f}'} | {verdict} | "
                     f"{_md_cell(r.margin + ('; ' + r.detail if r.detail else ''))} |")
    return "\n".join(lines) + "\n\n"


def summary_path(given: str | None, environ: dict) -> str | None:
    """``--summary-md FILE``, else ``$GITHUB_STEP_SUMMARY`` where GitHub Actions sets it."""
    return given or environ.get("GITHUB_STEP_SUMMARY") or None


def write_reports(records: list[GateRecord], *, tool: str, title: str, verdict_line: str,
                  junit_path: str | None, summary_md: str | None, seconds: float = 0.0
                  ) -> list[str]:
    """Write the JUnit file (replaced) and the markdown (appended, as GitHub's step summary
    expects); returns ``# wrote ...`` lines."""
    wrote = []
    if junit_path:
        write_atomic(junit_path, junit_xml(records, tool, seconds), "the JUnit report")
        wrote.append(f"# wrote {junit_path} (JUnit XML, {len(records)} test cases)")
    if summary_md:
        append_atomic(summary_md, markdown(records, title, verdict_line), "the markdown summary")
        wrote.append(f"# wrote {summary_md} (markdown summary)")
    return wrote
