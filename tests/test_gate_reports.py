"""The gates' reports for CI (issue 20, items 1 and 2): the rank test and the median's interval
against known values, JUnit XML valid against the JUnit schema, a markdown summary appended to
$GITHUB_STEP_SUMMARY, and every gate's verdict the same in the text, JSON, JUnit and markdown
outputs of python -m bandwidth.compare."""

import json
import math
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT
from resultdocs import h200_links, make_document, make_result, write_document

from bandwidth.report import baseline as bl
from bandwidth.report import stats
from bandwidth.results.document import rows_from_document

XSD = Path(__file__).with_name("junit-10.xsd")


# ---------------------------------------------------------------------------------------------
# statistics


def test_exact_u_distribution_matches_the_table():
    # Mann-Whitney's table for samples of 3 and 4: counts of U = 0..12 over C(7, 3) = 35 orders.
    assert list(stats._u_counts(3, 4)) == [1, 1, 2, 3, 4, 4, 5, 4, 4, 3, 2, 1, 1]
    # Completely separated samples: the smallest attainable p, 1 / C(n + m, n).
    assert stats.mann_whitney_less([1, 2, 3], [4, 5, 6, 7]) == pytest.approx(1 / 35)
    assert stats.mann_whitney_less([4, 5, 6, 7], [1, 2, 3]) == pytest.approx(1.0)
    assert stats.smallest_p(5, 5) == pytest.approx(1 / 252)


def test_normal_approximation_agrees_with_the_exact_count():
    rng = np.random.default_rng(1)
    now, before = rng.normal(9.7, 1, 30), rng.normal(10, 1, 30)
    exact = stats.mann_whitney_less(now, before)
    tied = stats.mann_whitney_less(np.round(now, 6), np.append(np.round(before, 6)[1:],
                                                                np.round(now, 6)[0]))
    assert 0 < exact < 1 and 0 < tied < 1
    # a large sample goes through the approximation: a clear drop is found, none is not
    big = rng.normal(10, 1, 200)
    assert stats.mann_whitney_less(big * 0.9, big) < 1e-6
    assert stats.mann_whitney_less(big, big) > 0.3


def test_a_drop_far_in_the_tail_has_a_p_above_zero():
    """1,000 tied baseline values all above 1,000 of this run's: the normal approximation's tail
    underflows to 0, which no rank test can give; p is the least the samples allow instead."""
    now, before = np.linspace(1, 2, 1000), np.full(1000, 1e6)
    p = stats.mann_whitney_less(now, before)
    assert p > 0 and p == max(stats.smallest_p(1000, 1000), sys.float_info.min)
    assert f"{p:.2g}" != "0"
    small = stats.mann_whitney_less(now[:50], before[:20])      # the approximation, not floored
    assert stats.smallest_p(50, 20) < small < 1e-6


def test_median_interval_from_order_statistics():
    assert stats.median_ci(range(20)) == (5.0, 14.0)       # B(20, 1/2): P(X <= 5) = 0.0207
    assert stats.median_ci(range(5)) is None                 # no 95 % interval below 6 values
    assert stats.median_ci(range(6)) == (0.0, 5.0)
    assert math.isinf(stats.ci_width_pct([1.0, 2.0]))
    s = stats.spread([10.0, 10.0, 10.0, 5.0] + [10.0] * 16)
    assert s.p50_gbps == 10.0 and s.p95_gbps < 10.0 and s.cv > 0 and s.samples == 20



def test_many_iterations_neither_overflow_nor_change_the_rule():
    """--repeat auto pools thousands of iterations on a fast host: 2 ** n and C(n + m, n) no
    longer fit a float there (an OverflowError ended measure.py without a verdict)."""
    x = np.arange(5000, dtype=float)
    low, high = stats.median_ci(x)
    # the normal approximation of the order statistics: n/2 -+ 1.96 sqrt(n)/2 = 2430.7, 2569.3
    assert 2425 <= low <= 2432 and 2567 <= high <= 2574
    assert stats.ci_width_pct(x + 1000) < 5
    assert stats.smallest_p(3000, 3000) == 0.0 and stats.smallest_p(5, 5) == pytest.approx(1 / 252)
    assert stats.median_ci(range(20)) == (5.0, 14.0)                  # small n: as before
    assert stats.mann_whitney_less(x * 0.8, x) < 1e-6


def _with_samples(result: dict, samples) -> dict:
    result["iterations"] = [{"iteration": i + 1, "seconds": 1.0, "error": 0.0, "busbw_gbps": x}
                            for i, x in enumerate(samples)]
    result["summary"]["busbw_median"] = float(np.median(samples))
    return result


def test_a_drop_beyond_the_tolerance_fails_only_when_significant():
    rng = np.random.default_rng(2)
    base = make_document([_with_samples(make_result("nccl"), rng.normal(300, 3, 20))])
    # 15 % slower, tight: significant
    slow = make_document([_with_samples(make_result("nccl"), rng.normal(255, 3, 20))])
    diffs = bl.compare(rows_from_document(base, "b"), rows_from_document(slow, "n"), 10.0)
    assert diffs[0].verdict == "REGRESSION" and diffs[0].p_value < 1e-6
    # median 15 % lower but scattered across the baseline's range: not significant
    noisy = make_document([_with_samples(make_result("nccl"), [150, 160, 170, 255, 255, 255,
                                                                 310, 320, 330])])
    diffs = bl.compare(rows_from_document(base, "b"), rows_from_document(noisy, "n"), 10.0)
    assert diffs[0].change_pct < -10 and diffs[0].verdict == "ok (drop not significant)"
    assert diffs[0].p_value > stats.SIGNIFICANCE and bl.exit_code(diffs) == 0
    # too few iterations for the test: the tolerance alone decides, and the note says so
    few = make_document([_with_samples(make_result("nccl"), [250, 251, 252])])
    diffs = bl.compare(rows_from_document(make_document([_with_samples(
        make_result("nccl"), [300, 301, 302])]), "b"), rows_from_document(few, "n"), 10.0)
    assert diffs[0].verdict == "REGRESSION" and diffs[0].p_value is None
    assert "cannot reach p < 0.002: tolerance alone" in diffs[0].note


# ---------------------------------------------------------------------------------------------
# the reports of one compare run


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    """A baseline of four rows against a run where one row regressed, one is missing, one is
    below its ceiling's share and one passes; a link lost NVLinks."""
    folder = tmp_path_factory.mktemp("reports")
    rng = np.random.default_rng(3)
    ceiling = ("p2p unidirectional copy", 384.8)

    def row(mode, network, centre, spread=2.0):
        return _with_samples(make_result(mode, network=network, ceiling=ceiling),
                             rng.normal(centre, spread, 20))
    write_document(folder / "base.json", make_document(
        [row("device", "resnet-200", 340), row("nccl", "resnet-200", 300),
         row("local", "resnet-200", 200), row("device", "vgg-16", 340)], links=h200_links()))
    write_document(folder / "now.json", make_document(
        [row("device", "resnet-200", 341), row("nccl", "resnet-200", 240),
         row("local", "resnet-200", 199)], links=h200_links(nvlinks=12)))
    summary = folder / "step-summary.md"
    summary.write_text("earlier step\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT), GITHUB_STEP_SUMMARY=str(summary))
    proc = subprocess.run([sys.executable, "-m", "bandwidth.compare", "now.json", "--baseline",
                           "base.json", "--min-percent-of-ceiling", "60", "--junit",
                           "junit.xml", "--json", "gates.json"], cwd=folder, env=env,
                          capture_output=True, text=True, timeout=60)
    return folder, proc


EXPECTED = {("baseline", "device resnet-200 cuda:0,1"): "ok",
            ("baseline", "nccl resnet-200 cuda:0,1"): "REGRESSION",
            ("baseline", "local resnet-200 cuda:0,1"): "ok",
            ("baseline", "device vgg-16 cuda:0,1"): "MISSING",
            ("link", "link GPU 0<->1"): "LINK LOST",
            ("ceiling", "device resnet-200 cuda:0,1"): "ok",
            ("ceiling", "nccl resnet-200 cuda:0,1"): "ok",
            ("ceiling", "local resnet-200 cuda:0,1"): "BELOW CEILING"}


def test_the_junit_report_is_valid_against_the_schema(reports):
    import xmlschema

    folder, proc = reports
    assert proc.returncode == 1, proc.stdout + proc.stderr
    schema = xmlschema.XMLSchema(str(XSD))
    schema.validate(str(folder / "junit.xml"))
    root = ET.parse(folder / "junit.xml").getroot()
    assert root.tag == "testsuites" and root.get("tests") == "8" and root.get("failures") == "4"
    failure = root.find(".//testcase[@name='nccl resnet-200 cuda:0,1']/failure")
    message = failure.get("message")
    # the measured value, the reference, the margin and the verdict
    assert re.search(r"measured 2\d\d\.\d{3} GB/s, reference 3\d\d\.\d{3} GB/s \(tolerance 10 %, "
                     r"Mann-Whitney U p < 0.002\): REGRESSION; change -\d+\.\d %; p ", message)
    # an invalid document is refused by the same schema (the test can fail)
    with pytest.raises(xmlschema.XMLSchemaValidationError):
        schema.validate(ET.fromstring('<testsuites><testsuite name="x"/></testsuites>'))


def test_the_summary_is_appended_to_the_github_step_summary(reports):
    folder, _ = reports
    text = (folder / "step-summary.md").read_text()
    assert text.startswith("earlier step\n### bandwidth: python -m bandwidth.compare\n")
    assert "**FAILED: 4 of 8 gates" in text
    assert "| gate | name | measured GB/s | reference GB/s | verdict | detail |" in text


def _text_verdicts(stdout: str) -> dict:
    out, section = {}, "baseline"
    for line in stdout.splitlines():
        if line.startswith("# share of the ceiling"):
            section = "ceiling"
        for (gate, name), verdict in EXPECTED.items():
            if gate == "link" and line.startswith(f"# {name}:"):
                out[(gate, name)] = line.rsplit(": ", 1)[1]
            elif gate == section and line.startswith(name + " "):
                found = [v for v in ("REGRESSION", "MISSING", "BELOW CEILING", "ok")
                         if f" {v}" in line]
                out[(gate, name)] = found[0]
    return out


def test_every_verdict_is_the_same_in_text_json_junit_and_markdown(reports):
    folder, proc = reports
    text = _text_verdicts(proc.stdout)
    doc = json.loads((folder / "gates.json").read_text())
    as_json = {(g["gate"], g["name"]): g["verdict"] for g in doc["gates"]}
    assert doc["exit_status"] == 1 and doc["verdict"] in proc.stdout.splitlines()
    root = ET.parse(folder / "junit.xml").getroot()
    as_junit = {}
    for case in root.iter("testcase"):
        gate = case.get("classname").split(".")[1]
        failure = case.find("failure")
        as_junit[(gate, case.get("name"))] = failure.get("type") if failure is not None else \
            case.find("system-out").text.split("): ")[1].split(";")[0]
    as_md = {}
    for line in (folder / "step-summary.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip("|").split(" | ")]
        if len(cells) == 6 and cells[0] in ("baseline", "ceiling", "link"):
            as_md[(cells[0], cells[1])] = cells[4].strip("*")
    assert text == as_json == as_junit == as_md == EXPECTED


def test_reports_without_a_gate_are_refused(reports):
    folder, _ = reports
    proc = subprocess.run([sys.executable, "-m", "bandwidth.compare", "now.json", "--junit",
                           "x.xml"], cwd=folder, env=dict(os.environ, PYTHONPATH=str(ROOT)),
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and len(proc.stderr.splitlines()) == 1
    assert "--junit, --summary-md and --json report the gates" in proc.stderr


def test_an_even_count_of_scattered_iterations_keeps_its_samples():
    """The summary's median of an even count is busbw of the mean of the two middle times, which
    can lie far from either middle figure when they scatter: the samples still describe it."""
    from dataclasses import replace

    from bandwidth.formulas import busbw_gbps
    from bandwidth.results.document import Row

    times = [1.0, 1.0, 2.0, 10.0]
    samples = tuple(busbw_gbps(1e9, t, 1.0) for t in times)
    row = Row("x", "local", "mlp", "cpu x2", 2, "float32", "none", 10**9,
              busbw_gbps(1e9, 1.5, 1.0), 0, 0, 0, 1.5, 0, None, None, samples=samples)
    assert bl.usable_samples(row) == samples
    assert bl.usable_samples(replace(row, busbw_gbps=0.3)) == ()      # edited by hand


# ---------------------------------------------------------------------------------------------
# the confirmation pass of --repeat auto (measure.py measures the failed rows again)


def _rows(mode: str, centre: float, source: str, ceiling=None, seed: int = 0):
    rng = np.random.default_rng(seed)
    doc = make_document([_with_samples(make_result(mode, ceiling=ceiling),
                                       rng.normal(centre, 3, 20))])
    return rows_from_document(doc, source)


def test_a_failed_row_fails_only_if_its_confirmation_pass_fails_too():
    base = _rows("nccl", 300, "b", seed=1)
    first = _rows("nccl", 240, "repeat 1", seed=2)                 # -20 %: a regression
    diffs = bl.compare(base, first, 10.0, pool=True)
    assert diffs[0].verdict == "REGRESSION"
    stall_gone = _rows("nccl", 299, "confirmation 1 repeat 1", seed=3)
    diffs = bl.compare(base, first, 10.0, pool=True, confirmations=[stall_gone])
    (d,) = diffs
    assert d.verdict == "ok (not confirmed)" and not d.failed and bl.exit_code(diffs) == 0
    assert d.now_gbps == pytest.approx(299, abs=3) and d.repeats == 2     # the passing pass shown
    assert re.fullmatch(r"nccl resnet-200 cuda:0,1: first pass -2\d\.\d % \(p \S+\), "
                        r"confirmation pass 1 [-+]\d\.\d % \(p \S+\): not confirmed", d.note)
    still_slow = _rows("nccl", 238, "confirmation 1 repeat 1", seed=4)
    (d,) = bl.compare(base, first, 10.0, pool=True, confirmations=[still_slow])
    assert d.verdict == "REGRESSION" and d.note.endswith(": confirmed") and d.p_value < 1e-6
    # a second confirmation pass: fails only if all three do
    (d,) = bl.compare(base, first, 10.0, pool=True, confirmations=[still_slow, stall_gone])
    assert d.verdict == "ok (not confirmed)" and "confirmation pass 2 " in d.note
    # a row that passed its first pass is not changed by another pass
    (d,) = bl.compare(base, _rows("nccl", 301, "repeat 1", seed=5), 10.0, pool=True,
                      confirmations=[still_slow])
    assert d.verdict == "ok" and d.note is None


def test_floor_and_ceiling_gates_are_confirmed_the_same_way():
    ceiling = ("p2p unidirectional copy", 300.0)
    slow = _rows("device", 150, "repeat 1", ceiling, seed=6)       # 50 % of its ceiling
    fair = _rows("device", 280, "confirmation 1 repeat 1", ceiling, seed=7)
    (d,) = bl.check_ceiling(slow, 80.0, pool=True)
    assert d.verdict == "BELOW CEILING"
    (d,) = bl.check_ceiling(slow, 80.0, pool=True, confirmations=[fair])
    assert d.verdict == "ok (not confirmed)" and "first pass 5" in d.note
    (d,) = bl.check_ceiling(slow, 80.0, pool=True, confirmations=[slow])
    assert d.verdict == "BELOW CEILING" and d.note.endswith(": confirmed")
    (d,) = bl.check_floor(slow, 200.0, pool=True, confirmations=[fair])
    assert d.verdict == "ok (not confirmed)" and "first pass 1" in d.note
    (d,) = bl.check_floor(slow, 200.0, pool=True, confirmations=[slow])
    assert d.verdict == "BELOW FLOOR"


def test_confirm_keys_name_only_rows_whose_figure_failed():
    base = make_document([_with_samples(make_result(m), np.full(20, 300.0))
                          for m in ("nccl", "device", "local")])
    now = make_document([_with_samples(make_result("nccl"), np.full(20, 200.0)),
                         _with_samples(make_result("device"), np.full(20, 300.0))])
    here = {"this machine": base["fingerprint"]}
    result = bl.check(rows_from_document(now, "n"), base, fingerprints=here,
                      gates=bl.Gates(10.0, pool=True))
    assert result.exit_code == 1
    # local is MISSING (no measurement to repeat); device passed
    assert bl.confirm_keys(result) == {rows_from_document(now, "n")[0].key}


def test_a_confirmed_and_an_unconfirmed_row_read_the_same_in_every_report(tmp_path):
    """check() with a confirmation pass, reported as measure.py writes it: text, JSON, JUnit
    (schema-valid) and markdown carry the same verdict per row."""
    import xmlschema

    base = make_document([_with_samples(make_result(m), np.random.default_rng(8).normal(
        300, 3, 20)) for m in ("nccl", "device")])
    first = make_document([_with_samples(make_result(m), np.random.default_rng(9).normal(
        230, 3, 20)) for m in ("nccl", "device")])
    again = make_document([_with_samples(make_result("nccl"), np.random.default_rng(10).normal(
        231, 3, 20)), _with_samples(make_result("device"), np.random.default_rng(11).normal(
            302, 3, 20))])
    gates = bl.Gates(10.0, pool=True)
    result = bl.check(rows_from_document(first, "repeat 1"), base,
                      fingerprints={"this machine": base["fingerprint"]}, gates=gates,
                      confirmations=[rows_from_document(again, "confirmation 1 repeat 1")])
    assert result.exit_code == 1
    md = tmp_path / "s.md"
    bl.write_gate_reports(result, gates, tool="measure.py", junit_path=str(tmp_path / "j.xml"),
                          summary_md=str(md), json_path=str(tmp_path / "g.json"))
    expected = {"nccl resnet-200 cuda:0,1": "REGRESSION",
                "device resnet-200 cuda:0,1": "ok (not confirmed)"}
    text = {name: v for line in result.lines for name, v in expected.items()
            if line.startswith(name + " ") and f" {v}" in line}
    as_json = {g["name"]: g["verdict"] for g in json.loads((tmp_path / "g.json").read_text())
               ["gates"]}
    xmlschema.XMLSchema(str(XSD)).validate(str(tmp_path / "j.xml"))
    as_junit = {}
    for case in ET.parse(tmp_path / "j.xml").getroot().iter("testcase"):
        failure = case.find("failure")
        as_junit[case.get("name")] = failure.get("type") if failure is not None else \
            case.find("system-out").text.split("): ")[1].split(";")[0]
    as_md = {}
    for line in md.read_text().splitlines():
        cells = [c.strip() for c in line.strip("|").split(" | ")]
        if len(cells) == 6 and cells[0] == "baseline":
            as_md[cells[1]] = cells[4].strip("*")
    assert text == as_json == as_junit == as_md == expected
    assert any("not confirmed" in line for line in result.lines)
    assert "first pass" in json.loads((tmp_path / "g.json").read_text())["gates"][1]["detail"]
