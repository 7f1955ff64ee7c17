"""Figures: the kind is chosen from the rows, each kind writes a real PNG, and matplotlib is
needed only when a figure is asked for."""

import os
import subprocess
import sys

import pytest
from conftest import ROOT
from resultdocs import flat_sweep, make_document, make_result, scaling, three_modes

from bandwidth.errors import ConfigError
from bandwidth.report import plot
from bandwidth.results.document import rows_from_document

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def rows_of(results, source="run.json"):
    return rows_from_document(make_document(results), source)


BARS = rows_of(three_modes(), "rdma.json") + rows_of(three_modes(0.5), "tcp.json")
SCALING = rows_of(scaling({1: 0.0, 2: 280.0, 4: 320.0, 8: 340.0})) \
    + rows_of(scaling({2: 150.0, 4: 130.0, 8: 90.0}, "device"))
SWEEP = rows_of(flat_sweep()) + rows_of(flat_sweep("device", peak=340.0))


def assert_png(path, min_bytes=20_000):
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC
    assert len(data) > min_bytes      # a drawn figure, not an empty canvas


@pytest.mark.parametrize("rows, kind", [(BARS, "bars"), (SCALING, "scaling"), (SWEEP, "sweep")])
def test_each_kind_is_chosen_from_the_rows_and_written_as_png(tmp_path, rows, kind):
    assert plot.choose_kind(rows) == kind
    out = tmp_path / f"{kind}.png"
    assert plot.plot_rows(rows, out) == kind
    assert_png(out)


def test_a_single_row_is_a_bar_chart(tmp_path):
    rows = rows_of([make_result("nccl", busbw=12.5)])
    assert plot.plot_rows(rows, tmp_path / "one.png") == "bars"
    assert_png(tmp_path / "one.png", min_bytes=10_000)


def test_a_kind_can_be_forced_and_an_unknown_kind_is_refused(tmp_path):
    assert plot.plot_rows(SCALING, tmp_path / "bars.png", kind="bars") == "bars"
    assert_png(tmp_path / "bars.png")
    with pytest.raises(ConfigError, match="valid: bars, scaling, sweep"):
        plot.plot_rows(SCALING, tmp_path / "x.png", kind="pie")


def test_nothing_to_plot_and_an_unwritable_path_are_config_errors(tmp_path):
    with pytest.raises(ConfigError, match="no results"):
        plot.plot_rows([], tmp_path / "x.png")
    with pytest.raises(ConfigError, match="cannot write the plot"):
        plot.plot_rows(BARS, tmp_path / "missing" / "x.png")


def test_sweep_series_group_flat_rows_by_mode_and_devices():
    series = plot.sweep_series(SWEEP + BARS)
    assert list(series) == ["nccl cuda:0,1", "device cuda:0,1"]
    sizes = [r.nbytes for r in series["nccl cuda:0,1"]]
    assert sizes == sorted(sizes) and sizes[0] == 1 << 20 and sizes[-1] == 1 << 30


def sweep_legend(rows):
    from matplotlib.figure import Figure

    fig = Figure()
    plot._sweep(fig, rows)
    (ax,) = fig.axes
    return [t.get_text() for t in ax.get_legend().get_texts()]


def test_a_sweep_draws_one_ceiling_per_mode_with_3_significant_digits():
    local = [make_result("local", network=f"flat {k}K", nbytes=k << 10, busbw=0.5, kind="cpu",
                         ceiling=("host memory: copies and summation, 4 MiB probe", 0.0532))
             for k in (64, 256, 1024)]
    nccl = [make_result("nccl", network=f"flat {k}K", nbytes=k << 10, busbw=0.04, kind="cpu",
                        ceiling=("flat all-reduce of the same bytes, same run", 0.05 * k / 64))
            for k in (64, 256, 1024)]
    local[0]["ceiling"]["not_a_bound"] = "fits in cache: ..."
    assert sweep_legend(rows_of(local + nccl)) == [
        "local cpu x2",
        "ceiling of local cpu x2:\nhost memory: copies and summation, 4 MiB\nprobe, 0.0532 GB/s",
        "nccl cpu x2",
        "ceiling of nccl cpu x2:\nflat all-reduce of the same bytes, same\nrun, per size, 0.05 "
        "to 0.8 GB/s",
        "above its ceiling by > 10 %:\nno % of ceiling there (see the table)"]
    # A constant ceiling per series is one entry, however many rows share it.
    assert sum("ceiling of" in t for t in sweep_legend(SWEEP)) == 2


def run_python(code: str):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120, check=False)


def test_reporting_modules_do_not_import_matplotlib_until_a_plot_is_asked():
    proc = run_python("import sys\n"
                      "import bandwidth.compare, bandwidth.report.baseline, "
                      "bandwidth.report.table, bandwidth.report.plot\n"
                      "assert 'matplotlib' not in sys.modules, 'matplotlib imported'\n")
    assert proc.returncode == 0, proc.stderr


def test_without_matplotlib_a_plot_is_an_unsupported_error_naming_the_fix(tmp_path):
    proc = run_python("import sys\n"
                      "sys.modules['matplotlib'] = None   # as if not installed\n"
                      "sys.path.insert(0, 'tests')\n"
                      "from resultdocs import make_document, three_modes\n"
                      "from bandwidth.results.document import rows_from_document\n"
                      "from bandwidth.report.plot import plot_rows\n"
                      "from bandwidth.errors import UnsupportedError\n"
                      "rows = rows_from_document(make_document(three_modes()), 'x')\n"
                      "try:\n"
                      f"    plot_rows(rows, {str(tmp_path / 'x.png')!r})\n"
                      "except UnsupportedError as exc:\n"
                      "    print(exc)\n")
    assert proc.returncode == 0, proc.stderr
    assert "pip install matplotlib" in proc.stdout
    assert not (tmp_path / "x.png").exists()
