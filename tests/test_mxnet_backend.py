"""--backend mxnet: MXNet 1.9.1's own kvstore and ps-lite through measure.py and launch.py.

The tests marked ``needs_mxnet`` run where ``import mxnet`` works (``pip install '.[mxnet]'``:
mxnet==1.9.1 with numpy<1.24) and skip, saying why, elsewhere; .ci/run gives them their own venv.
The others (refusals, tables, the watchdog, never importing mxnet for the toolkit) run everywhere.
"""

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest
from conftest import ROOT, run_cli
from resultdocs import make_document, make_result, write_document

from bandwidth.report import table
from bandwidth.results.document import rows_from_document

LAUNCH = ROOT / "launch.py"
LENET = ["--network", "lenet", "--image-shape", "1,28,28", "--num-classes", "10"]


def _mxnet_problem() -> str | None:
    """Why ``import mxnet`` fails in this interpreter (None: it works). Checked in a child, so
    that this test process never loads libmxnet beside torch."""
    proc = subprocess.run([sys.executable, "-c", "import mxnet"], capture_output=True, text=True,
                          timeout=120, env={k: v for k, v in os.environ.items()
                                            if not k.startswith("DMLC_")})
    if proc.returncode == 0:
        return None
    last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
    return (f"MXNet cannot be imported here ({last[:160]}); pip install '.[mxnet]' "
            "(mxnet==1.9.1, numpy<1.24) to run these tests")


MXNET_PROBLEM = _mxnet_problem()
needs_mxnet = pytest.mark.skipif(MXNET_PROBLEM is not None, reason=MXNET_PROBLEM or "")


def iter_lines(stdout: str) -> list[tuple[int, float, float]]:
    return [(int(i), float(gbps), float(err)) for i, gbps, err in
            re.findall(r"^iter (\d+), [0-9.]+ sec, ([0-9.]+) GB/sec per gpu, error (-?[0-9.]+)$",
                       stdout, re.MULTILINE)]


def size_line(stdout: str) -> str:
    return re.search(r"^num of arrays = .*$", stdout, re.MULTILINE).group(0)


def size_lines(stdout: str) -> list[str]:
    return re.findall(r"^num of arrays = .*$", stdout, re.MULTILINE)


def toolkit_size_line(*network_args: str) -> str:
    """The toolkit's own ``num of arrays = ...`` line for a network (measure.py --dry-run)."""
    proc = run_cli(*network_args, "--dry-run")
    assert proc.returncode == 0, proc.stderr
    return size_line(proc.stdout)


def launch(workers: int, servers: int, *measure_args: str, scheduler: bool = True,
           timeout: float = 150) -> subprocess.CompletedProcess:
    argv = [sys.executable, str(LAUNCH), "-n", str(workers), "-s", str(servers),
            "--timeout", "60", *(["--scheduler"] if scheduler else []),
            sys.executable, "bandwidth/measure.py", "--backend", "mxnet", "--timeout", "60",
            *measure_args]
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=timeout)


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


@pytest.mark.timeout(150)
@pytest.mark.parametrize("backend", ["mxnet", "toolkit"])
def test_a_single_host_mode_under_servers_and_a_scheduler_is_refused_at_once(backend):
    # Issue 5: every process imported mxnet, and a server or the scheduler then waited in
    # ps-lite's loop for ever. The refusal comes before any import of mxnet, so this runs (and
    # means the same) with or without MXNet installed.
    marker = "24681357" if backend == "mxnet" else "24681358"     # --seeds no other test uses
    argv = [sys.executable, str(LAUNCH), "-n", "1", "-s", "1", "--scheduler", sys.executable,
            "bandwidth/measure.py", "--backend", backend, "--kv-store", "local", "--cpus", "2",
            "--seed", marker, *LENET, "--num-batches", "2"]
    start = time.monotonic()
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert time.monotonic() - start < 90
    message = ("measure.py: error: --kv-store local runs on one host: local, device and nccl need "
               "no servers or scheduler, but launch.py started 1 server and a scheduler; run "
               "measure.py without launch.py, or with launch.py -s 0 and no --scheduler")
    lines = proc.stderr.splitlines()
    refusals = [line for line in lines
                if "measure.py: error:" in line and not line.startswith("launch: ")]
    assert refusals and all(line.endswith(message) for line in refusals), proc.stderr
    # Where several processes printed it, the launcher shows it once and says how many did.
    shown_once = [line for line in lines if "printed this line, shown once" in line]
    assert all(re.match(r"launch: [23] processes printed this line", line) for line in shown_once)
    assert "Traceback" not in proc.stderr and "iter 1" not in proc.stdout
    assert "FAIL:" in proc.stderr and "exited with status 2" in proc.stderr
    time.sleep(0.5)
    for role in ("worker", "server", "scheduler"):
        assert _pids_with(marker, role) == []


def test_one_worker_alone_may_run_a_single_host_mode_and_several_are_refused():
    from bandwidth.errors import ConfigError
    from bandwidth.launch.contract import Job
    from bandwidth.processes.distributed import check_single_host

    check_single_host(["local"], None)                                   # no launcher
    one_worker = Job(1, 0, "127.0.0.1", 4000, 4000, "local")
    check_single_host(["local", "device"], one_worker.role(0, "127.0.0.1", (0, 1)))
    workers_only = Job(2, 0, "127.0.0.1", 4000, 4000, "torchrun")
    with pytest.raises(ConfigError, match=r"this launch \(torchrun\) has 2 workers, which would "
                                          r"run as independent copies"):
        check_single_host(["local", "device"], workers_only.role(1, "127.0.0.1", (1, 2)))
    with_scheduler = Job(2, 0, "127.0.0.1", 4000, 4001, "local")
    with pytest.raises(ConfigError, match=r"started 0 servers and a scheduler; run"):
        check_single_host(["nccl"], with_scheduler.role(0, "127.0.0.1", (0, 2)))
    with_server = Job(1, 1, "127.0.0.1", 4000, 4000, "local")
    with pytest.raises(ConfigError, match=r"--kv-store device runs on one host.* 1 server; run"):
        check_single_host(["device"], with_server.role(0, "127.0.0.1", (0, 2)))


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


# ---------------------------------------------------------------------------------------------
# with MXNet: ps-lite through launch.py on loopback


@needs_mxnet
@pytest.mark.timeout(200)
def test_dist_sync_through_the_launcher_is_exact(tmp_path):
    out = tmp_path / "dist.json"
    proc = launch(2, 1, "--kv-store", "dist_sync", "--cpus", "2", "--num-batches", "3",
                  "--all-worker-lines", "--json", str(out), *LENET)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = iter_lines(proc.stdout)
    assert len(lines) == 6 and max(err for _, _, err in lines) == 0.0   # 3 lines per worker
    assert size_lines(proc.stdout) == [toolkit_size_line(*LENET)] * 2    # one per worker
    assert "mx.kv.create('dist_sync')" in proc.stdout and "ps-lite: 2 workers" in proc.stdout
    (result,) = json.loads(out.read_text())["results"]
    assert result["config"]["backend"] == "mxnet" and result["config"]["kv_store"] == "dist_sync"


@needs_mxnet
@pytest.mark.timeout(200)
def test_dist_sync_with_one_cpu_device_per_worker_is_exact():
    # One CPU context: MXNet's comm_buf is the gradient array, so the pull lands in it; without
    # the untimed refill the next push sends the last sum (errors 2, 6, 14).
    proc = launch(2, 1, "--kv-store", "dist_sync", "--cpus", "1", "--num-batches", "3",
                  "--all-worker-lines", *LENET)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = iter_lines(proc.stdout)
    assert len(lines) == 6 and max(err for _, _, err in lines) == 0.0


@needs_mxnet
@pytest.mark.timeout(200)
def test_dist_async_with_sgd_errs_only_by_staleness():
    workers, devices = 2, 2
    proc = launch(workers, 1, "--kv-store", "dist_async", "--optimizer", "sgd", "--cpus",
                  str(devices), "--num-batches", "3", "--all-worker-lines", *LENET)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert size_lines(proc.stdout) == [toolkit_size_line(*LENET)] * workers
    lines = iter_lines(proc.stdout)
    assert len(lines) == workers * 3
    for iteration, _, error in lines:
        # as tests/test_dist.py: the other worker's pushes are at most a step ahead or behind
        assert error <= 1.2 * devices * (workers - 1) / (iteration + 1)


@needs_mxnet
@pytest.mark.timeout(120)
def test_without_the_scheduler_every_process_says_add_it():
    proc = launch(1, 1, "--kv-store", "dist_sync", "--cpus", "2", *LENET, scheduler=False)
    assert proc.returncode == 2
    assert "needs ps-lite's scheduler, which the launcher starts with --scheduler" in proc.stderr
    assert "FAIL:" in proc.stderr


def _pids_with(marker: str, role: str) -> list[int]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if marker.encode() not in f.read():
                    continue
            with open(f"/proc/{pid}/environ", "rb") as f:
                if f"DMLC_ROLE={role}".encode() in f.read().split(b"\0"):
                    found.append(int(pid))
        except OSError:
            pass
    return found


@needs_mxnet
@pytest.mark.timeout(200)
def test_a_dead_server_ends_the_job_instead_of_hanging_ps_lite():
    marker = "13572468"                       # a --seed no other test uses
    argv = [sys.executable, str(LAUNCH), "-n", "2", "-s", "1", "--scheduler", "--timeout", "30",
            sys.executable, "bandwidth/measure.py", "--backend", "mxnet", "--kv-store",
            "dist_sync", "--cpus", "1", "--seed", marker, "--num-batches", "100000",
            "--timeout", "30", *LENET]
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        deadline = time.monotonic() + 60
        while not _pids_with(marker, "server") and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(4)                          # let it run
        (server,) = _pids_with(marker, "server")
        os.kill(server, signal.SIGKILL)
        start = time.monotonic()
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode != 0 and time.monotonic() - start < 60
    assert "FAIL: server 0" in err and "SIGKILL" in err
    time.sleep(0.5)
    for role in ("worker", "server", "scheduler"):
        assert _pids_with(marker, role) == []
