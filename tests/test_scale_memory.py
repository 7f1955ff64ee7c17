"""Memory that does not grow with the job (issue 27 item 2): a distributed worker's reference
sum is computed chunk by chunk at each check instead of kept, with the same values."""

import torch

from bandwidth.hardware.memory import job_memory, memory_line
from bandwidth.plan import data
from bandwidth.plan.data import Reference, fill_gradient


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
