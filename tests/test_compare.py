"""python -m bandwidth.compare as users run it: joining documents of separate runs, the ratio and
speed-up tables, CSV and plot, and the regression check's exit codes (0 pass, 1 regression,
2 bad input or other hardware), on hand-made documents and on one written by measure.py."""

import csv
import json
import re
import os
import subprocess
import sys

import pytest
from conftest import ROOT
from resultdocs import (
    doctor,
    make_document,
    make_result,
    measure_document,
    scaling,
    three_modes,
    write_document,
)

from bandwidth import compare


def run_compare(*args, cwd):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "bandwidth.compare", *map(str, args)], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=120, check=False)


@pytest.fixture
def docs(tmp_path):
    """base.json; now.json (3 % slower); slow.json (the baseline is 50 % higher than it);
    tcp.json (half); h100.json (other hardware)."""
    base = make_document(three_modes())
    write_document(tmp_path / "base.json", base)
    write_document(tmp_path / "now.json", doctor(base, 0.97))
    write_document(tmp_path / "slow.json", doctor(base, 1 / 1.5))
    write_document(tmp_path / "tcp.json", doctor(base, 0.5))
    write_document(tmp_path / "h100.json",
                   make_document(three_modes(), "NVIDIA H100 80GB HBM3", 8, "550.54"))
    return tmp_path


def assert_one_error_line(proc, *fragments):
    assert proc.returncode == 2
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("compare: error: "), proc.stderr
    for fragment in fragments:
        assert fragment in lines[0]


def test_joins_runs_into_one_table_and_a_ratio_table(docs):
    proc = run_compare("base.json", "tcp.json", "--baseline-row", "tcp.json nccl", cwd=docs)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.splitlines()
    assert out[0] == "# 6 results from base.json, tcp.json"
    assert out[2].split()[:3] == ["row", "source", "mode"]
    ratio = out.index(next(line for line in out if line.startswith("# performance ratio")))
    assert "row 5 (nccl resnet-200 cuda:0,1 in tcp.json)" in out[ratio]
    assert out[ratio + 6].endswith("1.00  baseline")
    assert out[ratio + 2].split()[-1] == "2.43"        # 346.6 / 142.8
    assert "regression check" not in proc.stdout


def test_speedup_csv_and_plot(docs):
    write_document(docs / "g.json", make_document(scaling({2: 280.0, 4: 320.0, 8: 340.0})))
    proc = run_compare("g.json", "--speedup", "--csv", "rows.csv", "--plot", "rows.png",
                       cwd=docs)
    assert proc.returncode == 0, proc.stderr
    assert "# speed-up with added GPUs" in proc.stdout
    assert "# wrote rows.csv" in proc.stdout and "# wrote rows.png (scaling plot)" in proc.stdout
    with open(docs / "rows.csv", newline="") as f:
        assert [r["n"] for r in csv.DictReader(f)] == ["2", "4", "8"]
    assert (docs / "rows.png").read_bytes()[:4] == b"\x89PNG"


def test_a_fair_baseline_passes(docs):
    proc = run_compare("now.json", "--baseline", "base.json", "--tolerance", "10%", cwd=docs)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == "# PASSED (3 ok)"
    proc = run_compare("base.json", "--baseline", "base.json", cwd=docs)
    assert proc.returncode == 0 and re.search(r" \+0\.0 .* ok\n", proc.stdout)


def test_a_doctored_baseline_fails_with_exit_1(docs):
    write_document(docs / "doctored.json", doctor(json.loads((docs / "base.json").read_text()),
                                                  1.5))
    proc = run_compare("base.json", "--baseline", "doctored.json", cwd=docs)
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout.count("REGRESSION") == 3
    assert proc.stdout.splitlines()[-1] == "# FAILED: 3 of 3 gates (3 regression)"
    # 33 % below: passes only with a tolerance above that
    assert run_compare("slow.json", "--baseline", "base.json", "--tolerance", "34",
                       cwd=docs).returncode == 0


def test_repeats_in_several_files_pass_if_any_is_within_tolerance(docs):
    proc = run_compare("slow.json", "now.json", "--baseline", "base.json", cwd=docs)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == "# PASSED (3 ok)"
    assert run_compare("slow.json", "tcp.json", "--baseline", "base.json",
                       cwd=docs).returncode == 1


def test_the_floor_alone(docs):
    proc = run_compare("now.json", "--min-gbps", "100", cwd=docs)
    assert proc.returncode == 1 and "BELOW FLOOR" in proc.stdout
    assert run_compare("now.json", "--min-gbps", "20", cwd=docs).returncode == 0


def test_a_baseline_from_other_hardware_gives_2_unless_forced(docs):
    proc = run_compare("now.json", "--baseline", "h100.json", cwd=docs)
    assert_one_error_line(proc, "baseline was measured on 8 x NVIDIA H100 80GB HBM3 (driver "
                                "550.54) but now.json has 2 x NVIDIA H200 (driver 580.159.04)",
                          "use --force to compare anyway")
    proc = run_compare("now.json", "--baseline", "h100.json", "--force", cwd=docs)
    assert proc.returncode == 0, proc.stderr
    assert "# warning: baseline was measured on 8 x NVIDIA H100" in proc.stdout


@pytest.mark.parametrize("args, fragment", [
    (["missing.json"], "cannot read 'missing.json'"),
    (["notjson.json"], "'notjson.json' is not JSON"),
    (["foreign.json"], "is not a result file of this tool"),
    (["empty.json"], "'empty.json' holds no results"),
    (["now.json", "--baseline", "base.json", "--tolerance", "-5"], "--tolerance must be"),
    (["now.json", "--baseline", "base.json", "--tolerance", "ten"], "--tolerance must be"),
    (["now.json", "--min-gbps", "x"], "--min-gbps must be a positive number"),
    (["now.json", "--baseline-row", "9"], "rows 1 to 3"),
    (["now.json", "--baseline", "missing.json"], "cannot read 'missing.json'"),
])
def test_bad_input_is_one_line_and_exit_2(docs, args, fragment):
    (docs / "notjson.json").write_text("{")
    (docs / "foreign.json").write_text(json.dumps({"schema_version": 1, "config": {}}))
    write_document(docs / "empty.json", make_document([]))
    assert_one_error_line(run_compare(*args, cwd=docs), fragment)


def test_nothing_in_common_with_the_baseline_is_exit_2(docs):
    write_document(docs / "vgg.json", make_document([make_result("nccl", network="vgg-16")]))
    proc = run_compare("vgg.json", "--baseline", "base.json", cwd=docs)
    assert proc.returncode == 2
    assert proc.stdout.splitlines()[-1].startswith("# NOTHING COMPARED")


def test_main_in_process(docs, capsys, monkeypatch):
    monkeypatch.chdir(docs)
    assert compare.main(["now.json", "--baseline", "base.json"]) == 0
    assert compare.main(["slow.json", "--baseline", "base.json"]) == 1
    assert compare.main(["now.json", "--baseline", "h100.json"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("compare: error: baseline was measured on 8 x NVIDIA H100")


def test_source_names_keep_paths_where_file_names_collide():
    assert compare.source_names(["a/r.json", "b/r.json", "c/x.json"]) == [
        "a/r.json", "b/r.json", "x.json"]


def test_a_real_measure_document_against_itself_and_a_doctored_copy(tmp_path):
    doc = measure_document(tmp_path / "real.json")
    write_document(tmp_path / "raised.json", doctor(doc, 1.5))
    proc = run_compare("real.json", "--baseline", "real.json", "--plot", "real.png", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "device mlp cpu x2" in proc.stdout and proc.stdout.splitlines()[-1] == "# PASSED (1 ok)"
    assert (tmp_path / "real.png").stat().st_size > 10_000
    proc = run_compare("real.json", "--baseline", "raised.json", cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "REGRESSION" in proc.stdout
