"""Text tables and CSV of result rows: the sweep table, the performance-ratio table against a
baseline row, the speed-up table of scaling runs."""

import csv

import pytest
from resultdocs import (flat_sweep, make_document, make_result, measure_document, scaling,
                        three_modes)

from bandwidth import textformat
from bandwidth.errors import ConfigError
from bandwidth.report import table
from bandwidth.results.document import rows_from_document


def rows_of(results, source="run.json", **doc_args):
    return rows_from_document(make_document(results, **doc_args), source)


def column_end(lines, header):
    """The index just past ``header`` in the header line: right-aligned cells end there."""
    start = lines[0].index(header)
    return start + len(header)


def test_sweep_table_has_a_comment_header_units_and_right_aligned_numbers():
    rows = rows_of(three_modes())
    lines = table.sweep_table(rows)
    assert lines[0] == "# 3 results from run.json"
    assert lines[1].startswith("# GB/s per GPU = all-reduce busbw")
    body = lines[2:6]
    for header in ("GB/s per GPU", "algbw GB/s", "% of ceiling", "size"):
        assert header in body[0]
    end = column_end(body, "GB/s per GPU")
    assert [line[end - 7:end] for line in body[1:]] == ["346.600", "285.600", " 21.600"]
    end = column_end(body, "% of ceiling")
    assert [line[:end].split()[-1] for line in body[1:]] == ["90.1", "n/a", "91.1"]
    assert body[1].split()[:5] == ["1", "device", "resnet-200", "cuda:0,1", "257.99"]
    assert lines[6] == ("# ceiling of device: p2p unidirectional copy, 385 GB/s (measured in "
                        "the same run)")
    assert "source" not in body[0] and "dtype" not in body[0]


def test_sweep_table_has_one_ceiling_line_per_mode_with_3_significant_digits():
    local = [make_result("local", network=f"flat {k}M", nbytes=k << 20, busbw=0.05, kind="cpu",
                         ceiling=("host memory: copies and summation, 4 MiB probe", 0.0532))
             for k in (1, 2, 4)]
    nccl = [make_result("nccl", network=f"flat {k}M", nbytes=k << 20, busbw=0.04 * k, kind="cpu",
                        ceiling=("flat all-reduce of the same bytes, same run", 0.045 * k))
            for k in (1, 2, 4)]
    cache = "fits in cache: the 4 MiB host memory probe is not a bound"
    for result in local[:2]:
        result["ceiling"]["not_a_bound"] = cache
    lines = table.sweep_table(rows_of(local + nccl))
    footer = [line for line in lines if line.startswith("#   ") or "ceiling of" in line]
    assert footer == [
        "# ceiling of local: host memory: copies and summation, 4 MiB probe, 0.0532 GB/s "
        "(measured in the same run)",
        f"#   rows 1, 2: % of ceiling n/a, {cache}",
        "# ceiling of nccl: flat all-reduce of the same bytes, same run, per row, 0.045 to 0.18 "
        "GB/s (measured in the same run)"]
    end = column_end(lines[2:], "% of ceiling")
    assert [line[:end].split()[-1] for line in lines[3:9]] == [
        "n/a", "n/a", "94.0", "88.9", "88.9", "88.9"]


def test_one_device_rows_show_algbw_and_no_busbw_or_percentage():
    rows = rows_of([make_result("local", n=1, busbw=0.0, kind="cpu", ceiling=("x", 1.0)),
                    make_result("local", n=2, busbw=0.5, kind="cpu", ceiling=("x", 1.0))])
    lines = table.sweep_table(rows)
    one, two = lines[3], lines[4]
    # GB/s per GPU, min, max, algbw, % of ceiling, error
    assert one.split("cpu x1")[1].split()[2:] == ["n/a", "(1", "device)", "-", "-", "1000.000",
                                                  "n/a", "0.000000"]
    assert "n/a (1 device)" not in two and two.split()[-2] == "50.0"


def test_sweep_table_names_sources_and_differing_columns_only_when_they_differ():
    rows = rows_of(three_modes(), "h200.json") + rows_of(
        [make_result("nccl", busbw=100.0, dtype="bfloat16", error=-1)], "tcp.json")
    lines = table.sweep_table(rows)
    assert lines[0] == "# 4 results from h200.json, tcp.json"
    assert lines[2].split()[:3] == ["row", "source", "mode"] and "dtype" in lines[2]
    assert lines[6].split()[1] == "tcp.json" and "bfloat16" in lines[6]
    assert lines[6].endswith("not checked")


def _as_backend(result, backend):
    return {**result, "config": {**result["config"], "backend": backend}}


def test_backend_column_shows_wherever_a_row_is_not_the_toolkits():
    toolkit_only = table.sweep_table(rows_of(three_modes()))
    assert "backend" not in toolkit_only[2]
    mxnet_only = table.sweep_table(rows_of([_as_backend(r, "mxnet") for r in three_modes()]))
    assert mxnet_only[2].split()[:3] == ["row", "backend", "mode"]
    assert [line.split()[1] for line in mxnet_only[3:6]] == ["mxnet"] * 3
    mixed = rows_of([three_modes()[0], _as_backend(three_modes()[0], "mxnet")])
    assert [line.split()[1] for line in table.ratio_table(mixed)[2:4]] == ["toolkit", "mxnet"]


def test_format_bytes_uses_binary_units_for_sweep_sizes_and_mb_for_networks():
    assert textformat.format_bytes(1 << 20) == "1 MiB"
    assert textformat.format_bytes(3 << 30) == "3 GiB"
    assert textformat.format_bytes(257_991_328) == "257.99 MB"
    assert textformat.format_bytes(437_544) == "437.54 kB"
    assert textformat.format_bytes(12) == "12 B"


def test_ratio_table_divides_by_the_baseline_row_like_the_performance_ratio_tables():
    rows = rows_of(three_modes(), "rdma.json") + rows_of(three_modes(0.5), "tcp.json")
    lines = table.ratio_table(rows, 0)
    assert lines[0].startswith("# performance ratio: GB/s per GPU of each row / row 1 "
                               "(device resnet-200 cuda:0,1 in rdma.json)")
    ratios = [line.split()[-1] if not line.endswith("baseline") else line.split()[-2]
              for line in lines[2:]]
    assert ratios == ["1.00", "0.82", "0.06", "0.50", "0.41", "0.03"]
    assert lines[2].endswith("1.00  baseline")
    lines = table.ratio_table(rows, 3)
    assert lines[5].endswith("1.00  baseline") and lines[2].split()[-1] == "2.00"


def test_ratio_table_of_a_one_device_baseline_says_n_a():
    rows = rows_of([make_result("nccl", n=1, busbw=0.0), make_result("nccl", busbw=50.0)])
    assert table.ratio_table(rows, 0)[3].split()[-1] == "n/a"


def test_pick_baseline_row_by_number_label_or_unique_text():
    rows = rows_of(three_modes(), "rdma.json") + rows_of(three_modes(0.5), "tcp.json")
    assert table.pick_baseline_row(rows, None) == 0
    assert table.pick_baseline_row(rows, "5") == 4
    assert table.pick_baseline_row(rows, "tcp.json local resnet-200 cuda:0,1") == 5
    assert table.pick_baseline_row(rows, "tcp.json nccl") == 4
    with pytest.raises(ConfigError, match=r"rows 1 to 6"):
        table.pick_baseline_row(rows, "7")
    with pytest.raises(ConfigError, match=r"matches 2 rows .*give the row number"):
        table.pick_baseline_row(rows, "device resnet-200 cuda:0,1")
    with pytest.raises(ConfigError, match=r"matches no row.*1: rdma.json device"):
        table.pick_baseline_row(rows, "vgg")


def test_speedup_table_total_throughput_against_the_smallest_gpu_count():
    rows = rows_of(scaling({1: 0.0, 2: 280.0, 4: 320.0, 8: 340.0}))
    lines = table.speedup_table(rows)
    assert lines[0].startswith("# speed-up with added GPUs: total GB/s = n x algbw")
    assert "nccl resnet-200" in lines[2]
    assert lines[3].split() == ["GPUs", "total", "GB/s", "speed-up", "efficiency"]
    # total = n x algbw = n x busbw / (2(n-1)/n): 2 -> 560, 4 -> 853.33, 8 -> 1554.29
    assert lines[4].split() == ["2", "560.000", "1.00", "100", "%"]
    assert lines[5].split() == ["4", "853.333", "1.52", "76", "%"]
    assert lines[6].split() == ["8", "1554.286", "2.78", "69", "%"]
    assert len(lines) == 7        # one GPU left out: nothing crosses a link
    assert lines[3].index("efficiency") + len("efficiency") == len(lines[4])


def test_speedup_table_has_a_column_group_per_series_and_splits_sources():
    tcp = rows_of(scaling({2: 100.0, 4: 80.0}), "tcp.json")
    rdma = rows_of(scaling({2: 300.0, 4: 330.0}), "rdma.json")
    lines = table.speedup_table(tcp + rdma)
    assert "nccl resnet-200 [tcp.json]" in lines[2] and "nccl resnet-200 [rdma.json]" in lines[2]
    assert lines[2].index("[tcp.json]") < lines[2].index("[rdma.json]")
    # tcp: total at 4 = 4 x 80 / (3/2) = 213.3 against 2 x 100 / 1 = 200: 1.07
    assert lines[5].split()[:3] == ["4", "213.333", "1.07"]
    one_run_per_count = rows_of(scaling({2: 100.0}), "g2.json") + rows_of(scaling({4: 90.0}),
                                                                           "g4.json")
    assert "[" not in table.speedup_table(one_run_per_count)[2]


def test_a_bucket_sweep_names_each_rows_caps():
    """--schedule ddp --bucket-mb 1,25: the rows differ only by the cap, so the table shows it."""
    results = [make_result("nccl", busbw=b) for b in (10.0, 12.0)]
    for result, cap in zip(results, (1, 25)):
        result["config"].update(schedule="ddp", bucket_mb=cap, first_bucket_mb=1)
    lines = [line for line in table.sweep_table(rows_of(results)) if not line.startswith("#")]
    assert lines[0].split()[:3] == ["row", "mode", "schedule"]
    assert lines[1].split()[1:4] == ["nccl", "ddp", "1/1MiB"]
    assert lines[2].split()[1:4] == ["nccl", "ddp", "25/1MiB"]
    flat = [line for line in table.sweep_table(rows_of(three_modes())) if line.startswith("row")]
    assert flat and "schedule" not in flat[0]


def test_speedup_table_without_scaling_runs_says_so():
    """It names the counts the rows have, not a flag the user may have given already."""
    (line,) = table.speedup_table(rows_of(three_modes()))
    assert line.startswith("# speed-up: none: ") and "these rows have only the count 2;" in line
    assert "measure with --scaling" not in line


def test_write_csv_has_every_field_and_leaves_unknown_values_empty(tmp_path):
    rows = rows_of(three_modes()) + rows_of([make_result("nccl", error=-1)])
    out = tmp_path / "rows.csv"
    table.write_csv(rows, out)
    with open(out, newline="") as f:
        data = list(csv.DictReader(f))
    assert list(data[0]) == list(table.CSV_COLUMNS)
    assert len(data) == 4
    assert float(data[0]["busbw_gbps"]) == pytest.approx(346.6)
    assert float(data[0]["pct_of_ceiling"]) == pytest.approx(90.07, abs=0.01)
    assert data[1]["ceiling_gbps"] == "" and data[1]["pct_of_ceiling"] == ""
    assert data[3]["error"] == "" and data[0]["error"] == "0.0"
    assert "None" not in out.read_text()


def test_write_csv_to_a_missing_folder_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="cannot write"):
        table.write_csv(rows_of(three_modes()), tmp_path / "no" / "rows.csv")


def test_report_lines_join_the_tables_and_check_the_baseline_row():
    rows = rows_of(flat_sweep(), "sweep.json")
    lines = table.report_lines(rows, baseline_row="11", speedup=True)
    assert lines[0] == "# 11 results from sweep.json"
    assert "# performance ratio: GB/s per GPU of each row / row 11 (nccl flat 1024M cuda:0,1)" \
        in "\n".join(lines)
    assert lines[-1].startswith("# speed-up: none: ")
    with pytest.raises(ConfigError):
        table.report_lines(rows, baseline_row="99")


def test_table_of_a_real_measure_document(tmp_path):
    doc = measure_document(tmp_path / "real.json")
    rows = rows_from_document(doc, "real.json")
    assert len(rows) == 1
    lines = table.sweep_table(rows)
    assert lines[0] == "# 1 result from real.json"
    assert lines[3].split()[1:4] == ["device", "mlp", "cpu"]
    assert lines[3].split()[-2:] == ["n/a", "0.000000"]      # no ceiling with --no-reference


def test_one_nccl_rank_has_no_algbw_in_the_table():
    """A one-rank all-reduce moves no byte: the table says n/a, as the summary does, where it
    printed the one-rank time's meaningless bytes/time (52.4 GB/s for mlp)."""
    rows = rows_from_document({"results": [make_result(kv_store="nccl", n=1),
                                           make_result(kv_store="device", n=1),
                                           make_result(kv_store="nccl", n=2)]}, "t")
    assert [r.algbw_gbps is None for r in rows] == [True, False, False]
    lines = table.sweep_table(rows)
    found = [line.split() for line in lines if line.split()[:1] in (["1"], ["2"], ["3"])]
    assert found[0][-3:] == ["n/a", "n/a", "0.000000"] and found[1][-3] != "n/a"
    assert rows[0].pct_of_ceiling is None
