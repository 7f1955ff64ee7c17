"""Memory that does not grow with the job (issue 27 item 2): a distributed worker's reference
sum is computed chunk by chunk at each check instead of kept, with the same values, and a
parameter-server worker with one CPU device holds its arrays once."""

import json
import subprocess
import sys

import pytest
import torch
from conftest import ROOT

from bandwidth.arrays import data
from bandwidth.arrays.data import Reference, fill_gradient
from bandwidth.hardware.memory import job_memory, memory_line


def test_a_streamed_reference_checks_exactly_as_a_kept_one(monkeypatch):
    monkeypatch.setattr(data, "CHUNK_ELEMENTS", 1000)        # several chunks
    numel, replicas = 4321, 5
    kept = Reference(numel, replicas, 3, torch.device("cpu"))
    streamed = Reference(numel, replicas, 3, torch.device("cpu"), keep=False)
    assert streamed.sum is None and streamed.abs_total == kept.abs_total > 0
    assert torch.equal(torch.cat([streamed.chunk(s, e) for s, e in data._chunks(numel)]),
                       kept.sum)
    total = torch.zeros(numel)
    for rank in range(replicas):
        grad = torch.empty(numel)
        fill_gradient(grad, rank, 3)
        total += grad
    assert streamed.error_terms([total], None, 1) == kept.error_terms([total], None, 1)
    assert streamed.error_terms([total], None, 1)[0] == 0.0
    total[7] += 1.0
    assert streamed.error_terms([total], None, 1)[0] == 1.0


def test_the_memory_line_and_document():
    memory = job_memory([300e6, 320e6], [100e6])
    assert memory["total_peak_rss"] == 720e6
    assert memory_line(memory) == ("#   memory, peak RSS: per worker 0.32 GB (max; min 0.30 GB), "
                                   "per server 0.10 GB (max; min 0.10 GB); all 3 processes "
                                   "0.72 GB (sum of peaks)")


def _workers_peak_rss(tmp_path, name: str, *network: str) -> list[float]:
    out = tmp_path / f"{name}.json"
    argv = [sys.executable, str(ROOT / "launch.py"), "-n", "2", "-s", "1", "--timeout", "60",
            sys.executable, "bandwidth/measure.py", "--kv-store", "dist_sync", "--cpus", "1",
            "--num-batches", "2", "--json", str(out), *network]
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=150)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (result,) = json.loads(out.read_text())["results"]
    assert [e for w in result["workers"] for e in w["errors"]] == [0.0] * 4
    return result["memory"]["workers_peak_rss"]


@pytest.mark.timeout(320)
def test_a_parameter_server_worker_holds_its_gradients_once(tmp_path):
    """One CPU device: the pull lands in the gradients (refilled before each step) and the raw
    exchange uses one buffer both ways, so 100 MB of arrays add about 100 MB to a worker's peak,
    not 200 MB (the gradients and an outputs buffer), in a run that stays exact."""
    small = _workers_peak_rss(tmp_path, "small", "--network", "flat:1000")
    large = _workers_peak_rss(tmp_path, "large", "--network", "flat:25000000")     # 100 MB
    added = [b - a for a, b in zip(small, large)]
    assert all(0.9e8 < extra < 1.4e8 for extra in added), added
