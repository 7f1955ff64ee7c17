"""Regression checks as functions: tolerance parsing, the hardware fingerprint, matching rows by
key, repeats (any repeat within tolerance passes), the absolute floor, and exit codes."""

import json

import pytest
from resultdocs import doctor, h200_links, make_document, make_result, three_modes, write_document

from bandwidth import thresholds
from bandwidth.errors import ConfigError
from bandwidth.report import baseline as bl
from bandwidth.results.document import fingerprint, rows_from_document


def rows_of(doc, source="now"):
    return rows_from_document(doc, source)


BASE = make_document(three_modes())


@pytest.mark.parametrize("text, pct", [("10%", 10.0), ("10", 10.0), (" 2.5 % ", 2.5),
                                       ("0", 0.0), (5, 5.0), ("99.9%", 99.9)])
def test_tolerance_is_a_percentage_with_or_without_the_sign(text, pct):
    assert thresholds.parse_tolerance(text) == pct


@pytest.mark.parametrize("text", ["-1", "-5%", "abc", "", "%", "10%%", "100", "nan", "inf"])
def test_a_bad_tolerance_states_the_rule(text):
    with pytest.raises(ConfigError, match=r"--tolerance must be a percentage from 0 up to 100, "
                                          r"written 10% or 10"):
        thresholds.parse_tolerance(text)


def test_floor_and_repeat_values_are_checked():
    assert thresholds.parse_min_gbps("431") == 431.0
    assert thresholds.parse_repeat("3") == 3
    for bad in ("0", "-2", "x", "inf"):
        with pytest.raises(ConfigError, match="--min-gbps must be a positive number"):
            thresholds.parse_min_gbps(bad)
    for bad in ("0", "1.5", "x"):
        with pytest.raises(ConfigError, match="--repeat must be a whole number"):
            thresholds.parse_repeat(bad)


def verdicts(diffs):
    return [d.verdict for d in diffs]


def test_the_same_numbers_pass():
    diffs = bl.compare(rows_of(BASE, "base"), rows_of(BASE), 10.0)
    assert verdicts(diffs) == ["ok", "ok", "ok"]
    assert [d.change_pct for d in diffs] == [0.0, 0.0, 0.0]
    assert bl.exit_code(diffs) == 0


def test_a_baseline_raised_by_half_is_a_regression():
    diffs = bl.compare(rows_of(doctor(BASE, 1.5), "base"), rows_of(BASE), 10.0)
    assert verdicts(diffs) == ["REGRESSION"] * 3
    assert diffs[0].change_pct == pytest.approx(-100 / 3)
    assert diffs[0].baseline_gbps == pytest.approx(346.6 * 1.5)
    assert bl.exit_code(diffs) == 1


def test_within_tolerance_passes_and_beyond_it_fails_either_way_round():
    base = rows_of(BASE, "base")
    assert verdicts(bl.compare(base, rows_of(doctor(BASE, 0.95)), 10.0)) == ["ok"] * 3
    assert verdicts(bl.compare(base, rows_of(doctor(BASE, 0.85)), 10.0)) == ["REGRESSION"] * 3
    assert verdicts(bl.compare(base, rows_of(doctor(BASE, 0.85)), 20.0)) == ["ok"] * 3
    faster = bl.compare(base, rows_of(doctor(BASE, 1.3)), 10.0)
    assert verdicts(faster) == ["faster"] * 3 and bl.exit_code(faster) == 0


def test_a_row_passes_if_any_repeat_is_within_tolerance():
    base = rows_of(BASE, "base")
    slow, fair = rows_of(doctor(BASE, 0.5), "run1"), rows_of(doctor(BASE, 0.97), "run2")
    diffs = bl.compare(base, slow + fair, 10.0)
    assert verdicts(diffs) == ["ok"] * 3
    assert [d.repeats for d in diffs] == [2, 2, 2]
    assert diffs[0].now_gbps == pytest.approx(346.6 * 0.97)
    slower = rows_of(doctor(BASE, 0.6), "run2")
    assert bl.exit_code(bl.compare(base, slow + slower, 10.0)) == 1


def test_baseline_repeats_count_by_their_median():
    base = rows_of(doctor(BASE, 0.5), "a") + rows_of(BASE, "b") + rows_of(doctor(BASE, 3), "c")
    diffs = bl.compare(base, rows_of(BASE), 10.0)
    assert diffs[0].baseline_gbps == pytest.approx(346.6) and verdicts(diffs) == ["ok"] * 3


def test_missing_rows_fail_closed_unless_allowed_and_new_rows_pass():
    now = make_document([make_result("device", busbw=346.6), make_result("nccl", n=4, busbw=300)])
    diffs = bl.compare(rows_of(BASE, "base"), rows_of(now), 10.0)
    assert [(d.label, d.verdict) for d in diffs] == [
        ("device resnet-200 cuda:0,1", "ok"), ("nccl resnet-200 cuda:0,1", "MISSING"),
        ("local resnet-200 cuda:0,1", "MISSING"), ("nccl resnet-200 cuda:0,1,2,3", "new")]
    assert diffs[1].now_gbps is None and diffs[3].baseline_gbps is None
    assert bl.exit_code(diffs) == 1
    assert bl.verdict_line(diffs).startswith("# FAILED: 2 of 4 gates (1 ok, 2 missing, 1 new)")
    allowed = bl.compare(rows_of(BASE, "base"), rows_of(now), 10.0, allow_missing=True)
    assert [d.verdict for d in allowed] == ["ok", "missing", "missing", "new"]
    assert bl.exit_code(allowed) == 0


def test_no_row_in_common_is_bad_input():
    now = make_document([make_result("nccl", network="vgg-16")])
    diffs = bl.compare(rows_of(BASE, "base"), rows_of(now), 10.0)
    assert bl.exit_code(diffs) == 2
    assert bl.verdict_line(diffs).startswith("# NOTHING COMPARED")


def test_rows_of_other_sizes_or_one_device_are_not_compared():
    base = make_document([make_result("nccl", network="mlp", nbytes=1000),
                          make_result("nccl", n=1, busbw=0.0)])
    now = make_document([make_result("nccl", network="mlp", nbytes=2000),
                         make_result("nccl", n=1, busbw=0.0)])
    diffs = bl.compare(rows_of(base, "base"), rows_of(now), 10.0, min_gbps=100)
    assert verdicts(diffs) == ["bytes differ", "one device"]


def test_the_floor_fails_any_row_below_it_with_or_without_a_baseline():
    now = rows_of(BASE)
    diffs = bl.compare(rows_of(BASE, "base"), now, 10.0, min_gbps=100.0)
    assert verdicts(diffs) == ["ok", "ok", "BELOW FLOOR"] and bl.exit_code(diffs) == 1
    floor = bl.check_floor(now, 300.0)
    assert verdicts(floor) == ["ok", "BELOW FLOOR", "BELOW FLOOR"]
    assert bl.exit_code(floor, baseline_given=False) == 1
    assert bl.exit_code(bl.check_floor(now, 20.0), baseline_given=False) == 0
    # repeats: the best one counts
    again = rows_of(doctor(BASE, 2.0), "run2")
    assert verdicts(bl.check_floor(now + again, 300.0)) == ["ok", "ok", "BELOW FLOOR"]


def test_the_diff_table_shows_row_baseline_now_change_and_verdict():
    diffs = bl.compare(rows_of(doctor(BASE, 1.5), "base"), rows_of(BASE), 10.0)
    lines = bl.diff_table(diffs, 10.0, baseline_name="base.json")
    assert lines[0].startswith("# regression check of GB/s per GPU")
    assert "a row fails below base.json by more than 10 %" in lines[0]
    assert lines[1].split() == ["row", "baseline", "GB/s", "now", "GB/s", "change", "%", "p50",
                                "p95", "cv", "%", "verdict"]
    assert lines[2].split() == ["device", "resnet-200", "cuda:0,1", "519.900", "346.600", "-33.3",
                                "346.600", "346.600", "0.0", "REGRESSION"]
    assert lines[-1] == "# FAILED: 3 of 3 gates (3 regression)"
    floor_lines = bl.diff_table(bl.check_floor(rows_of(BASE), 50.0), None, 50.0)
    assert floor_lines[1].split() == ["row", "now", "GB/s", "p50", "p95", "cv", "%", "verdict"]
    assert floor_lines[-1] == "# FAILED: 1 of 3 gates (2 ok, 1 below floor)"


H100 = {"device_model": "NVIDIA H100 80GB HBM3", "device_count": 8, "driver": "550.54",
        "links": None, "peer_access": [[True] * 8 for _ in range(8)]}
H200 = {"device_model": "NVIDIA H200", "device_count": 2, "driver": "580.159", "links": None,
        "peer_access": [[True, True], [True, True]]}


def test_a_baseline_from_other_hardware_is_refused_naming_what_differs():
    with pytest.raises(bl.BaselineMismatchError) as info:
        bl.check_fingerprint(H100, H200)
    assert str(info.value) == ("baseline was measured on 8 x NVIDIA H100 80GB HBM3 (driver "
                               "550.54) but this machine has 2 x NVIDIA H200 (driver 580.159); "
                               "use --force to compare anyway")
    assert info.value.exit_code == 2 and isinstance(info.value, ConfigError)
    warning = bl.check_fingerprint(H100, H200, force=True)
    assert warning.startswith("warning: baseline was measured on 8 x NVIDIA H100")
    assert warning.endswith("compared anyway (--force)")
    assert bl.check_fingerprint(H200, dict(H200)) is None


def test_peer_access_or_links_alone_are_named():
    no_p2p = dict(H200, peer_access=[[True, False], [False, True]])
    with pytest.raises(bl.BaselineMismatchError, match=r"^baseline was measured on 2 x NVIDIA "
                       r"H200 \(driver 580.159\) as this machine has, but with other peer access: "
                       r"1 of 1 GPU pairs then, 0 of 1 GPU pairs now; use --force"):
        bl.check_fingerprint(H200, no_p2p)
    # Links are not other hardware: a lost lane is a failing gate (test below), not a refusal.
    assert bl.check_fingerprint(dict(H200, links=h200_links()),
                                dict(H200, links=h200_links(width=8))) is None


def test_links_are_compared_entry_by_entry_in_words():
    assert bl.link_differences(h200_links(), h200_links()) == []
    assert bl.link_differences(h200_links(18), h200_links(12, width=8)) == [
        "GPU 0<->1: 18 NVLinks in the baseline, 12 now",
        "GPU 1: PCIe gen5 x16 in the baseline, gen5 x8 now"]
    assert bl.link_differences(h200_links(1), h200_links(0)) == [
        "GPU 0<->1: 1 NVLink in the baseline, 0 now"]
    unknown = {"nvlinks": {"0-1": None}, "pcie": {"0": {"gen": None, "width": 16}}}
    assert bl.link_differences(h200_links(), unknown) == []      # unknown proves no difference
    assert bl.link_differences(h200_links(), None) == []


def test_links_recorded_on_one_side_only_are_a_note_not_a_refusal():
    note = bl.check_fingerprint(H200, dict(H200, links=h200_links()))
    assert note == ("note: links not compared: the baseline recorded none (no NVML there; "
                    "pip install '.[topology]')")
    assert "this machine recorded none" in bl.check_fingerprint(dict(H200, links=h200_links()),
                                                                H200)


def test_a_link_that_lost_nvlinks_or_lanes_fails_naming_it(tmp_path, capsys):
    """Fabricated environments through the whole check (compare's command line): the same links
    pass; a lost NVLink or PCIe lane is a failure (exit 1) naming the link, not a refusal of
    other hardware; a link better than the baseline's is a note."""
    from bandwidth import compare

    base = write_document(tmp_path / "base.json", make_document(three_modes(), links=h200_links()))
    same = write_document(tmp_path / "same.json", make_document(three_modes(), links=h200_links()))
    lost = write_document(tmp_path / "lost.json",
                          make_document(three_modes(), links=h200_links(nvlinks=12, width=8)))
    assert compare.main([str(same), "--baseline", str(base)]) == 0
    assert "# PASSED (3 ok)" in capsys.readouterr().out
    assert compare.main([str(lost), "--baseline", str(base)]) == 1
    out, err = capsys.readouterr()
    assert err == ""
    assert "# link GPU 0<->1: 18 NVLinks in the baseline, 12 now (lost.json): LINK LOST" in out
    assert "# link GPU 1: PCIe gen5 x16 in the baseline, gen5 x8 now (lost.json): LINK LOST" in out
    assert out.splitlines()[-1] == "# FAILED: 2 of 5 gates (3 ok, 2 link lost)"
    assert compare.main([str(base), "--baseline", str(lost)]) == 0
    out = capsys.readouterr().out
    assert "# note: links better than the baseline's (base.json): GPU 0<->1: 12 NVLinks in the " \
           "baseline, 18 now; GPU 1: PCIe gen5 x8 in the baseline, gen5 x16 now" in out


def test_the_fingerprint_holds_the_links():
    doc = make_document(three_modes(), links=h200_links(nvlinks=12))
    assert doc["fingerprint"]["links"] == h200_links(nvlinks=12)


def test_document_fingerprint_falls_back_to_the_environment():
    doc = make_document(three_modes(), "NVIDIA H200", 2, "580.159")
    assert bl.document_fingerprint(doc) == fingerprint(doc["environment"])
    del doc["fingerprint"]
    assert bl.document_fingerprint(doc)["device_model"] == "NVIDIA H200"


def test_check_runs_fingerprint_compare_and_floor_in_one_call():
    now = rows_of(BASE)
    here = {"this machine": fingerprint(BASE["environment"])}
    result = bl.check(now, BASE, 10.0, fingerprints=here)
    assert result.exit_code == 0 and result.notes == []
    assert result.lines[-1] == "# PASSED (3 ok)"
    assert bl.check(now, doctor(BASE, 1.5), 10.0, fingerprints=here).exit_code == 1
    assert bl.check(now, None, min_gbps=300.0).exit_code == 1
    other = make_document(three_modes(), "NVIDIA H100 80GB HBM3", 8, "550.54")
    with pytest.raises(bl.BaselineMismatchError, match="but this machine has 2 x NVIDIA H200"):
        bl.check(now, other, 10.0, fingerprints=here)
    forced = bl.check(now, other, 10.0, fingerprints=here, force=True)
    assert forced.exit_code == 0 and forced.lines[0].startswith("# warning: baseline was")
    with pytest.raises(ValueError):
        bl.check(now, BASE, 10.0)
    with pytest.raises(ConfigError, match="needs --baseline FILE, --min-gbps X or"):
        bl.check(now)


def test_repeat_loop_as_measure_py_would_run_it():
    """--repeat 3: the first run is slow, the second fair: stop after the second."""
    runs = iter([doctor(BASE, 0.5), doctor(BASE, 0.98), BASE])
    here = {"this machine": fingerprint(BASE["environment"])}
    rows, attempts = [], 0
    for attempts in range(1, 4):
        rows += rows_of(next(runs), f"repeat {attempts}")
        result = bl.check(rows, BASE, 10.0, fingerprints=here)
        if result.exit_code == 0:
            break
    assert attempts == 2 and result.exit_code == 0


def test_save_and_load_baseline_round_trip(tmp_path):
    path = tmp_path / "base.json"
    doc = dict(BASE)
    del doc["fingerprint"]
    bl.save_baseline(doc, path)
    loaded = bl.load_baseline(path)
    assert loaded["fingerprint"] == fingerprint(BASE["environment"])
    assert loaded["results"] == json.loads(json.dumps(BASE["results"]))
    with pytest.raises(ConfigError, match="nothing to save"):
        bl.save_baseline(dict(BASE, results=[]), tmp_path / "empty.json")
    (tmp_path / "foreign.json").write_text('{"hello": 1}')
    with pytest.raises(ConfigError, match="not a result file of this tool"):
        bl.load_baseline(tmp_path / "foreign.json")
