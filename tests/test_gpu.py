"""GPU paths: run on the GPU machine (benchmarks/gpu_all.sh); skipped without CUDA."""

import json

import pytest
import torch
from conftest import requires_cuda

from bandwidth.config.options import Config
from bandwidth.measurement import session as session_mod
from bandwidth.measurement.session import TRIAL_STEPS
from bandwidth.run import run
from bandwidth.stores import device as device_mode

pytestmark = [pytest.mark.gpu, requires_cuda]

GPUS = tuple(range(torch.cuda.device_count())) if torch.cuda.is_available() else ()
RESNET50 = dict(network="resnet", num_layers=50, num_batches=3)


@pytest.mark.parametrize("kv", ["device", "local", "nccl"])
def test_exact_on_gpus(kv):
    result = run(Config(kv_store=kv, gpus=GPUS, **RESNET50))
    assert [s.error for s in result.samples] == [0.0, 0.0, 0.0]
    assert result.summary.busbw_median > 0 or len(GPUS) == 1


@pytest.mark.parametrize("kv", ["device", "local", "nccl"])
@pytest.mark.parametrize("dtype, bound", [("float32", 1e-6), ("float16", 5e-3), ("bfloat16", 5e-2)])
def test_sgd_and_low_precision_on_gpus(kv, dtype, bound):
    # One step per iteration: the bounds are for warm-up + 3 updates of low-precision weights.
    # Graph steps (several replays per timed iteration, on by default where a graph is kept)
    # multiply the updates: on two H200s device's float16 weights drifted by 0.04-0.08.
    result = run(Config(kv_store=kv, gpus=GPUS, dtype=dtype, optimizer="sgd", reference=False,
                        graph_steps=1, **RESNET50))
    assert all(0 <= s.error < bound for s in result.samples), result.samples


@pytest.mark.parametrize("chunk_mb", [0.1, 3.0, 1000.0])
def test_device_mode_chunking_keeps_results_exact(chunk_mb):
    result = run(Config(kv_store="device", gpus=GPUS, chunk_mb=chunk_mb, reference=False,
                        **RESNET50))
    assert max(s.error for s in result.samples) == 0.0


@pytest.mark.skipif(len(GPUS) < 2, reason="needs two GPUs")
def test_device_mode_reports_peer_access():
    result = run(Config(kv_store="device", gpus=GPUS[:2], reference=False, **RESNET50))
    assert any("peer access" in note or "GPU pairs" in note for note in result.notes)


def test_gpu_that_does_not_exist_is_one_line(cli):
    proc = cli("--gpus", f"0,{len(GPUS)}", "--network", "mlp")
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0
    assert f"GPU {len(GPUS)} does not exist" in proc.stderr


def test_arrays_that_do_not_fit_say_how_much(cli, tmp_path):
    huge = tmp_path / "huge.json"
    huge.write_text(json.dumps([["w", [200_000, 1_000_000]]]))     # 800 GB in float32
    proc = cli("--network", str(huge), "--gpus", "0")
    assert proc.returncode == 2, proc.stderr
    assert "needs 2400" in proc.stderr and "GB is free" in proc.stderr   # grads, outputs, reference
    assert "Traceback" not in proc.stderr


def test_cli_on_gpus_prints_mxnet_lines(cli, tmp_path):
    out = tmp_path / "r.json"
    proc = cli("--kv-store", "device", "--network", "resnet", "--num-layers", "200",
               "--num-batches", "3", "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "num of arrays = 205, total size = 257.991328 MB" in proc.stdout
    assert proc.stdout.count("GB/sec per gpu, error 0.000000") == 3
    doc = json.loads(out.read_text())
    assert doc["environment"]["devices"][0]["name"].startswith("NVIDIA")
    # One GPU: the default measures 2 replicas on it (bandwidth.plan.onegpu), so 2 devices.
    assert doc["fingerprint"]["device_count"] == max(len(GPUS), 2)
    (data,) = doc["results"]
    assert len(data["iterations"]) == 3
    if len(GPUS) > 1:
        assert data["ceiling"]["gbps"] > 0 and "p2p" in data["ceiling"]["name"]
    # Several GPUs: the p2p links; one GPU: its memory bounds the 2 replicas' step.
    assert "% of" in proc.stdout
    # The default (auto) captures the step, times trial steps both ways and names its choice.
    assert data["launch"] in ("graph", "eager") and data["summary"]["host_seconds_median"] > 0
    assert f"launch {data['launch']}" in proc.stdout and "host time per step" in proc.stdout
    assert f"launch auto: {TRIAL_STEPS} trial steps each way" in proc.stdout


@pytest.mark.parametrize("launch", ["graph", "eager", "auto"])
@pytest.mark.parametrize("owners", ["balanced", "greedy"])
def test_two_replicas_sharing_gpu_0_are_exact(launch, owners):
    result = run(Config(kv_store="device", gpus=(0, 0), launch=launch, owners=owners,
                        **RESNET50))
    assert [s.error for s in result.samples] == [0.0, 0.0, 0.0]
    assert result.plan.launch == launch
    assert result.launch == launch if launch != "auto" else result.launch in ("graph", "eager")
    assert result.summary.busbw_median > 0 and result.reference is None
    assert "one GPU's memory" in result.ceiling.name and result.ceiling.gbps > 0
    assert all(s.host_seconds > 0 for s in result.samples)


@pytest.mark.parametrize("schedule", ["sequential", "parallel", "concurrent"])
@pytest.mark.parametrize("copy", ["memcpy", "kernel"])
@pytest.mark.parametrize("chunk_mb", [None, 7.0])
def test_every_shared_gpu_graph_schedule_is_exact(monkeypatch, schedule, copy, chunk_mb):
    # The graph of replicas sharing one GPU, each schedule and kind of copy it can be captured
    # with (several chunks per owner with --chunk-mb 7): exact on every step.
    monkeypatch.setattr(device_mode, "SHARED_GRAPH_SCHEDULE", schedule)
    monkeypatch.setattr(device_mode, "SHARED_GRAPH_COPY", copy)
    result = run(Config(kv_store="device", gpus=(0, 0, 0), launch="graph", chunk_mb=chunk_mb,
                        reference=False, **RESNET50))
    assert [s.error for s in result.samples] == [0.0, 0.0, 0.0], result.samples
    assert result.launch == "graph"


def test_auto_choosing_eager_runs_the_eager_plan_after_capture(monkeypatch):
    # The capture of a shared GPU plans its own schedule; the eager steps after it (auto's trial,
    # and every step when auto keeps eager, forced here by a negative margin) run the eager plan
    # again, on its own streams, and stay exact.
    monkeypatch.setattr(session_mod, "EAGER_MARGIN", -1.0)
    result = run(Config(kv_store="device", gpus=(0, 0), launch="auto", optimizer="sgd",
                        reference=False, **RESNET50))
    assert result.launch == "eager"
    assert all(0 <= s.error < 1e-6 for s in result.samples), result.samples


@pytest.mark.parametrize("kv", ["device", "local"])
def test_four_replicas_on_one_gpu_with_sgd_in_bfloat16(kv):
    # One step per iteration: bf16 weights lose precision with every update, and the bound below
    # is for warm-up + 3 of them (graph steps would multiply the updates).
    result = run(Config(kv_store=kv, gpus=(0, 0, 0, 0), dtype="bfloat16", optimizer="sgd",
                        reference=False, graph_steps=1, **RESNET50))
    assert all(0 <= s.error < 5e-2 for s in result.samples), result.samples


@pytest.mark.parametrize("kv", ["device", "nccl"])
def test_eager_launch_still_exact(kv):
    result = run(Config(kv_store=kv, gpus=GPUS, launch="eager", reference=False, **RESNET50))
    assert [s.error for s in result.samples] == [0.0, 0.0, 0.0]
    assert result.plan.launch == "eager"


@pytest.mark.parametrize("launch", ["graph", "auto"])
@pytest.mark.parametrize("kv", ["device", "nccl"])
def test_graph_with_sgd_counts_every_step_once(kv, launch):
    # Neither the capture nor auto's trial steps may leave an update behind: after warm-up + 3
    # steps the weights are exactly 4 updates from zero, which the error check verifies.
    gpus = (0, 0) if kv == "device" else GPUS
    result = run(Config(kv_store=kv, gpus=gpus, optimizer="sgd", reference=False, launch=launch,
                        **RESNET50))
    assert all(0 <= s.error < 1e-6 for s in result.samples), result.samples


@pytest.mark.parametrize("kv", ["device", "nccl"])
def test_graph_steps_replay_every_set_exactly(kv):
    # --graph-steps 3: each timed iteration replays the step on three sets of buffers; with sgd
    # every set's weights are exactly warm-up + 3 updates from zero, which the check verifies.
    gpus = (0, 0) if kv == "device" else GPUS
    result = run(Config(kv_store=kv, gpus=gpus, optimizer="sgd", reference=False, launch="graph",
                        graph_steps=3, **RESNET50))
    assert all(0 <= s.error < 1e-6 for s in result.samples), result.samples
    assert any("graph steps: 3 replays per timed iteration" in n for n in result.notes)
    assert result.graph_steps == 3


def test_graph_steps_auto_queues_several_replays_of_a_small_step(cli, tmp_path):
    out = tmp_path / "r.json"
    proc = cli("--kv-store", "device", "--gpus", "0,0", "--network", "mlp", "--launch", "graph",
               "--num-batches", "3", "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("GB/sec per gpu, error 0.000000") == 3
    line = next(x for x in proc.stdout.splitlines() if "graph steps auto:" in x)
    count = int(line.split("graph steps auto: ")[1].split()[0])
    assert 1 < count <= session_mod.GRAPH_MAX_STEPS, line
    (data,) = json.loads(out.read_text())["results"]
    assert data["launch"] == "graph" and data["graph_steps"] == count


def test_error_check_covers_every_set_of_buffers():
    # A wrong value in the third set alone must show in the error.
    from bandwidth.hardware.devices import DeviceSet
    from bandwidth.processes.group import LocalGroup
    s = session_mod.Session("device", [("w", (1000, 300))], DeviceSet("cuda", (0, 0)), [0, 1],
                            LocalGroup(), dtype="float32", optimizer="none", seed=0,
                            chunk_mb=None, launch="graph", graph_steps=3)
    try:
        assert s.graph_steps == 3
        s.prepare()
        s.step()
        s.synchronize()
        assert s.error() == 0.0
        s.more_sets[1][0][1].outputs[7] += 1.0
        assert s.error() > 0.0
    finally:
        s.close()


def test_nccl_with_one_gpu_twice_is_one_line(cli):
    proc = cli("--kv-store", "nccl", "--gpus", "0,0", "--network", "mlp")
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "Traceback" not in proc.stderr
    assert "NCCL cannot hold one GPU twice" in proc.stderr


def test_cli_with_gpu_0_twice(cli):
    proc = cli("--kv-store", "device", "--gpus", "0,0", "--network", "mlp", "--num-batches", "3")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("GB/sec per gpu, error 0.000000") == 3
    assert "# devices: 1 x " in proc.stdout and "(2 replicas)" in proc.stdout
    assert "on 2 replicas on 1 GPU (0,0):" in proc.stdout
    assert "0<->0" not in proc.stdout                 # no link of a GPU with itself
    assert ("launch graph" in proc.stdout or "launch eager" in proc.stdout)
    assert "launch auto:" in proc.stdout and "one GPU's memory" in proc.stdout


def test_dist_nccl_workers_on_one_host_split_its_gpus_or_are_refused(tmp_path):
    """Issue 11 item 6, real processes: two dist_nccl workers launched on this one host with the
    same --gpus. With an even number of GPUs each worker takes its own half (as torchrun's
    LOCAL_RANK would) and the job is exact; with one GPU the two cannot split it, and the job is
    refused in one line naming the workers, never NCCL's "Duplicate GPU detected"."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    ids = GPUS[:2] if len(GPUS) >= 2 else GPUS[:1]
    proc = subprocess.run(
        [sys.executable, "launch.py", "-n", "2", "-s", "0", sys.executable, "bandwidth/measure.py",
         "--kv-store", "dist_nccl", "--gpus", ",".join(map(str, ids)), "--network", "mlp",
         "--num-batches", "3", "--timeout", "60"],
        cwd=root, capture_output=True, text=True, timeout=240)
    assert "Duplicate GPU" not in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    if len(ids) == 2:
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert proc.stdout.count("GB/sec per gpu, error 0.000000") >= 3
    else:
        assert proc.returncode != 0
        assert "worker 0, worker 1 on" in proc.stderr and "do not split evenly" in proc.stderr, \
            proc.stderr[-2000:]
