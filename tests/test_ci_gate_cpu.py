"""measure.py as a CI gate on CPU devices (issue 20, items 1, 2 and 4), real processes throughout:
--repeat auto with a baseline saved the same way; an unchanged rerun passes, a run slowed for real
by competing processes on the same cores is caught, every iteration is kept in --json, and the
JUnit and markdown reports are written. The 20-of-20 version of the same check is
benchmarks/ci_gate.py (too slow for CI)."""

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from contextlib import contextmanager

import pytest

TINY = ["--kv-store", "local", "--cpus", "2", "--network", "mlp", "--image-shape", "1,28,28",
        "--num-classes", "10", "--num-batches", "20", "--no-reference"]
AUTO = ["--repeat", "auto", "--time-budget", "12", "--ci-width", "5"]


@contextmanager
def competing(processes: int):
    """Busy loops on the same cores as the measurement, ended on every way out."""
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
               for _ in range(processes)]
    try:
        yield
    finally:
        for p in burners:
            p.kill()
        for p in burners:
            p.wait(timeout=10)


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    from conftest import run_cli
    path = tmp_path_factory.mktemp("gate") / "base.json"
    proc = run_cli(*TINY, *AUTO, "--save-baseline", str(path), timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "# --repeat auto: " in proc.stdout
    return path


def test_every_iteration_is_kept_in_the_document(base):
    doc = json.loads(base.read_text())
    (result,) = doc["results"]
    iterations = result["iterations"]
    assert len(iterations) >= 20 and len(iterations) % 20 == 0     # whole repeats, pooled
    assert [it["iteration"] for it in iterations] == list(range(1, len(iterations) + 1))
    assert all(it["busbw_gbps"] > 0 for it in iterations)
    assert result["summary"]["iterations"] == len(iterations)


def test_an_unchanged_rerun_passes_and_reports(base, cli, tmp_path):
    """15 %, not the default 10 %: CI's two cores are shared with other jobs."""
    summary = tmp_path / "summary.md"
    proc = cli(*TINY, *AUTO, "--baseline", str(base), "--tolerance", "15%", "--junit",
               str(tmp_path / "j.xml"), "--summary-md", str(summary), "--json",
               str(tmp_path / "now.json"), timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "# PASSED (1 " in proc.stdout
    case = ET.parse(tmp_path / "j.xml").getroot().find(".//testcase")
    assert case.get("name") == "local mlp cpu x2" and case.find("failure") is None
    assert "**PASSED (1 " in summary.read_text()
    doc = json.loads((tmp_path / "now.json").read_text())
    assert doc["gates"][0]["name"] == "local mlp cpu x2" and not doc["gates"][0]["failed"]
    assert doc["verdict"].startswith("# PASSED")


def test_a_run_slowed_by_competing_processes_is_caught(base, cli, tmp_path):
    with competing(6):
        proc = cli(*TINY, *AUTO, "--baseline", str(base), "--tolerance", "15%", "--junit",
                   str(tmp_path / "j.xml"), timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "REGRESSION" in proc.stdout and "# FAILED: 1 of 1 gates (1 regression)" in proc.stdout
    failure = ET.parse(tmp_path / "j.xml").getroot().find(".//testcase/failure")
    assert failure.get("type") == "REGRESSION"


def test_a_baseline_row_the_run_lacks_fails_unless_allowed(base, cli, tmp_path):
    doc = json.loads(base.read_text())
    extra = json.loads(json.dumps(doc["results"][0]))
    extra["network"]["name"] = "lenet"
    doc["results"].append(extra)
    two = tmp_path / "two.json"
    two.write_text(json.dumps(doc))
    proc = cli(*TINY, "--baseline", str(two), "--tolerance", "99%", timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "local lenet cpu x2" in proc.stdout and " MISSING" in proc.stdout
    allowed = cli(*TINY, "--baseline", str(two), "--tolerance", "99%", "--allow-missing",
                  timeout=120)
    assert allowed.returncode == 0, allowed.stdout + allowed.stderr


def test_report_flags_need_a_gate_and_a_folder(cli, tmp_path):
    proc = cli(*TINY, "--junit", str(tmp_path / "j.xml"), timeout=60)
    assert proc.returncode == 2 and len(proc.stderr.splitlines()) == 1
    assert "--junit and --summary-md report the gates" in proc.stderr
    proc = cli(*TINY, "--min-gbps", "0.001", "--junit", str(tmp_path / "no" / "j.xml"),
               timeout=60)
    assert proc.returncode == 2 and "does not exist" in proc.stderr
    assert "iter 1" not in proc.stdout                      # refused before measuring
