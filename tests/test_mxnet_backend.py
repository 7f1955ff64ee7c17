"""--backend mxnet: MXNet 1.9.1's own kvstore through measure.py (ps-lite through launch.py:
test_mxnet_pslite.py).

The tests marked ``needs_mxnet`` run where ``import mxnet`` works (``pip install '.[mxnet]'``:
mxnet==1.9.1 with numpy<1.24) and skip, saying why, elsewhere; .ci/run gives them their own venv.
The others (refusals, tables, the watchdog, never importing mxnet for the toolkit) run everywhere.
"""

import json
import os
import re
import subprocess
import sys
import time

import pytest
from conftest import ROOT, run_cli
from mxnet_support import LENET, iter_lines, needs_mxnet, size_line
from resultdocs import make_document, make_result, write_document

from bandwidth.report import table
from bandwidth.results.document import rows_from_document


# ---------------------------------------------------------------------------------------------
# everywhere: refusals, tables, the toolkit never importing mxnet


def test_the_toolkit_never_imports_mxnet():
    code = ("import sys\n"
            "from bandwidth.measure import main\n"
            f"rc = main(['--kv-store', 'local,device', '--cpus', '2', '--num-batches', '1', "
            f"'--no-reference', {', '.join(repr(a) for a in LENET)}])\n"
            "assert rc == 0, rc\n"
            "assert 'mxnet' not in sys.modules, 'mxnet imported'\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_without_mxnet_one_line_names_the_install_command():
    code = ("import sys\n"
            "sys.modules['mxnet'] = None   # as if not installed\n"
            "from bandwidth.measure import main\n"
            f"sys.exit(main(['--backend', 'mxnet', '--kv-store', 'device', '--cpus', '2', "
            f"{', '.join(repr(a) for a in LENET)}]))\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 2
    assert proc.stderr.strip() == ("measure.py: error: MXNet is not installed: "
                                   "pip install 'mxnet==1.9.1' 'numpy<1.24'")


@pytest.mark.parametrize("argv, message", [
    (["--backend", "caffe"], "unknown --backend 'caffe'; valid: toolkit, mxnet"),
    (["--backend", "mxnet", "--kv-store", "dist_nccl"],
     "MXNet has no such kvstore. Valid with --backend mxnet: local, device, nccl, dist_sync"),
    (["--backend", "toolkit,mxnet", "--gc-type", "2bit"],
     "gradient compression is not implemented in the toolkit's modes"),
    (["--gc-type", "1bit"], "unknown --gc-type '1bit'; valid: none, 2bit"),
    (["--backend", "toolkit,mxnet", "--kv-store", "dist_sync"],
     "one configuration per launch, not 2; give one --kv-store, --network, device set and "
     "--backend. To compare backends or modes, launch once per configuration with --json and "
     "join the files: python -m bandwidth.compare a.json b.json"),
])
def test_bad_backend_requests_are_one_line(argv, message):
    proc = run_cli(*argv, "--cpus", "2", *LENET)
    assert proc.returncode == 2
    assert message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_the_watchdog_ends_a_stuck_process_with_one_line():
    code = ("import time\n"
            "from bandwidth.backends.mxnet_session import Watchdog\n"
            "Watchdog(1.0, 'MXNet worker 0').kick('step 3')\n"
            "time.sleep(60)\n")
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 1 and time.monotonic() - start < 30
    assert "MXNet worker 0: no progress in step 3 for 1 s (--timeout)" in proc.stderr
    assert "mxnet" not in proc.stderr.split("MXNet worker")[0]       # nothing before the line


def test_mxnet_message_is_the_reason_line():
    from bandwidth.backends.mxnet_session import mxnet_message

    text = ("Traceback (most recent call last):\n  File \"../src/kvstore/kvstore.cc\", line 74\n"
            "MXNetError: compile with USE_NCCL=1 to use nccl\n")
    assert mxnet_message(Exception(text)) == "compile with USE_NCCL=1 to use nccl"


def _doc(backend: str | None, busbw: float, kv_store: str = "device") -> dict:
    result = make_result(kv_store=kv_store, network="lenet", busbw=busbw, kind="cpu")
    if backend is not None:
        result["config"]["backend"] = backend
    return make_document([result])


def test_old_documents_are_the_toolkit_and_rows_keep_their_labels():
    (old,) = rows_from_document(_doc(None, 5.0), "old.json")
    assert old.backend == "toolkit" and old.label == "device lenet cpu x2"
    (new,) = rows_from_document(_doc("mxnet", 1.0), "new.json")
    assert new.label == "mxnet device lenet cpu x2" and new.key != old.key


def test_compare_joins_a_toolkit_and_an_mxnet_file_side_by_side(tmp_path):
    toolkit = write_document(tmp_path / "toolkit.json", _doc(None, 5.0))
    mxnet = write_document(tmp_path / "mxnet.json", _doc("mxnet", 1.25))
    proc = subprocess.run([sys.executable, "-m", "bandwidth.compare", str(toolkit), str(mxnet)],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert re.search(r"^\s*1\s+toolkit\.json\s+toolkit\s+device\s+lenet", out, re.MULTILINE)
    assert re.search(r"^\s*2\s+mxnet\.json\s+mxnet\s+device\s+lenet", out, re.MULTILINE)
    side = out[out.index("# backends side by side"):].splitlines()
    assert side[1].split() == ["mode", "network", "GPUs", "toolkit", "GB/s", "mxnet", "GB/s",
                               "mxnet", "/", "toolkit", "toolkit", "error", "mxnet", "error"]
    assert side[2].split()[:7] == ["device", "lenet", "cpu", "x2", "5.000", "1.250", "0.25"]


def test_backend_table_pairs_only_the_same_measurement():
    rows = rows_from_document(make_document([
        make_result(kv_store="local", network="lenet", busbw=4.0, kind="cpu"),
        {**make_result(kv_store="local", network="lenet", busbw=2.0, kind="cpu"),
         "config": {**make_result()["config"], "kv_store": "local", "network": "lenet",
                    "backend": "mxnet"}},
        make_result(kv_store="device", network="lenet", busbw=3.0, kind="cpu")]), "run")
    lines = table.backend_table(rows)
    assert len(lines) == 3 and lines[2].split()[:7] == ["local", "lenet", "cpu", "x2", "4.000",
                                                        "2.000", "0.50"]


# ---------------------------------------------------------------------------------------------
# with MXNet: local and device on CPU contexts


@needs_mxnet
@pytest.mark.timeout(200)
@pytest.mark.parametrize("mode", ["local", "device"])
@pytest.mark.parametrize("optimizer", ["none", "sgd"])
def test_cpu_contexts_match_the_toolkit(mode, optimizer, tmp_path):
    args = ["--kv-store", mode, "--cpus", "2", "--optimizer", optimizer, "--num-batches", "3",
            "--no-reference", *LENET]
    toolkit = run_cli(*args)
    mxnet = run_cli("--backend", "mxnet", *args, "--json", str(tmp_path / "mx.json"))
    assert toolkit.returncode == 0, toolkit.stderr[-2000:]
    assert mxnet.returncode == 0, mxnet.stderr[-2000:]
    assert size_line(mxnet.stdout) == size_line(toolkit.stdout) == \
        "num of arrays = 8, total size = 1.724320 MB"
    lines = iter_lines(mxnet.stdout)
    assert [i for i, _, _ in lines] == [1, 2, 3] and all(gbps > 0 for _, gbps, _ in lines)
    # MXNet's SGD steps w -= 0.01 g in float32; the closed form is -steps x 0.01 x sum.
    assert max(err for _, _, err in lines) <= (1e-6 if optimizer == "sgd" else 0.0)
    assert f"MXNet 1.9.1 kvstore '{mode}'" in mxnet.stdout
    doc = json.loads((tmp_path / "mx.json").read_text())
    (result,) = doc["results"]
    assert result["config"]["backend"] == "mxnet" and doc["environment"]["mxnet"] == "1.9.1"
    assert result["network"]["arrays"] == 8 and len(result["iterations"]) == 3


@needs_mxnet
@pytest.mark.timeout(200)
def test_toolkit_and_mxnet_side_by_side(tmp_path):
    proc = run_cli("--backend", "toolkit,mxnet", "--kv-store", "local,device", "--cpus", "2",
                   "--num-batches", "2", "--no-reference", *LENET,
                   "--json", str(tmp_path / "both.json"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    # Each mode's two backends ran together, their iterations interleaved, both exact.
    results = json.loads((tmp_path / "both.json").read_text())["results"]
    for result in results:
        other = "mxnet" if result["config"]["backend"] == "toolkit" else "toolkit"
        assert f"iterations interleaved with {other}'s in this process (the first of each " \
               "iteration rotating)" in result["kv_store"]["notes"]
        assert len(result["iterations"]) == 2 and result["summary"]["error_max"] == 0.0
    assert any(note.startswith("CPU threads") for note in results[0]["kv_store"]["notes"])
    modes = re.findall(r"^\s*\d+\s+(toolkit|mxnet)\s+(local|device)\s+lenet", proc.stdout,
                       re.MULTILINE)
    assert modes == [("toolkit", "local"), ("mxnet", "local"), ("toolkit", "device"),
                     ("mxnet", "device")]
    side = proc.stdout[proc.stdout.index("# backends side by side"):].splitlines()
    assert [line.split()[0] for line in side[2:4]] == ["local", "device"]
    assert all(float(line.split()[6]) > 0 for line in side[2:4])        # mxnet / toolkit


@needs_mxnet
@pytest.mark.parametrize("argv, message", [
    (["--kv-store", "nccl", "--cpus", "2"], "MXNet's nccl kvstore reduces GPU arrays only"),
    (["--kv-store", "local", "--gc-type", "2bit", "--cpus", "2"],
     "MXNet compresses gradients only for the device and dist_* kvstores"),
    (["--kv-store", "dist_async", "--cpus", "2"], "--kv-store dist_async needs an optimizer"),
    (["--kv-store", "dist_sync", "--cpus", "2"], "runs under the launcher"),
])
def test_where_mxnet_would_fail_one_line_says_so(argv, message):
    proc = run_cli("--backend", "mxnet", *argv, *LENET)
    assert proc.returncode == 2
    assert message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


@needs_mxnet
def test_gpu_contexts_on_a_cpu_build_say_what_to_use():
    code = ("from bandwidth.hardware.devices import DeviceSet\n"
            "from bandwidth.backends.mxnet_backend import store_class\n"
            "from bandwidth.config.options import Config\n"
            "cls = store_class(Config(backend='mxnet', kv_store='device'))\n"
            "print(cls.unavailable(DeviceSet('cuda', (0,)), 'float32'))\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    if "has no CUDA" not in proc.stdout:
        pytest.skip(f"this MXNet build has CUDA: {proc.stdout.strip()}")
    assert "use --cpus N for CPU contexts, or the toolkit's own engine" in proc.stdout


@needs_mxnet
@pytest.mark.timeout(120)
def test_gradient_compression_runs_on_device_and_shows_its_loss():
    proc = run_cli("--backend", "mxnet", "--kv-store", "device", "--gc-type", "2bit", "--cpus",
                   "2", "--num-batches", "2", "--no-reference", *LENET)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert min(err for _, _, err in iter_lines(proc.stdout)) > 0.01       # 2bit is lossy
