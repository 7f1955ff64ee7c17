"""Result documents (bandwidth.results.document, schema version 1) built by hand for the
reporting tests."""

from __future__ import annotations

import json
from pathlib import Path

RESNET200_BYTES = 257_991_328


def make_result(kv_store: str = "device", network: str = "resnet-200", n: int = 2,
                busbw: float = 300.0, nbytes: int = RESNET200_BYTES, spread: float = 0.05,
                error: float = 0.0, dtype: str = "float32", optimizer: str = "none",
                ceiling: tuple[str, float] | None = None, kind: str = "cuda") -> dict:
    """One entry of ``results``: busbw is the median GB/s per GPU; min and max are +-spread of it;
    algbw and seconds follow from the all-reduce bus factor 2(n-1)/n."""
    factor = 2 * (n - 1) / n
    devices = [f"{kind}:{i}" for i in range(n)]
    algbw = busbw / factor if factor else 50.0 * busbw or 1000.0
    seconds = nbytes / (algbw * 1e9)
    summary = {"iterations": 5, "nbytes": nbytes, "bus_factor": factor,
               "seconds_median": seconds, "busbw_median": busbw,
               "busbw_min": busbw * (1 - spread), "busbw_max": busbw * (1 + spread),
               "algbw_median": algbw, "error_max": error}
    return {
        "config": {"network": network, "kv_store": kv_store, "dtype": dtype,
                   "optimizer": optimizer, "num_batches": 5, "warmup": 1},
        "network": {"name": network, "arrays": 1, "bytes": nbytes},
        "kv_store": {"name": kv_store, "bound": "test", "notes": []},
        "devices": devices,
        "iterations": [{"iteration": i + 1, "seconds": seconds, "error": error} for i in range(5)],
        "reports": [],
        "summary": summary,
        "reference": None,
        "ceiling": None if ceiling is None else {"name": ceiling[0], "gbps": ceiling[1]},
    }


def make_document(results: list[dict], device_name: str = "NVIDIA H200", device_count: int = 2,
                  driver: str | None = "580.159.04", links: dict | None = None) -> dict:
    environment = {
        "toolkit": "0.1.0", "host": "testhost", "torch": "2.11.0", "cuda": "13.0",
        "nccl": "2.28.9", "driver": driver,
        "devices": [{"label": f"cuda:{i}", "name": device_name} for i in range(device_count)],
        "peer_access": [[True] * device_count for _ in range(device_count)],
        "links": links,
    }
    from bandwidth.results.document import fingerprint

    return {"schema_version": 1, "tool": "bandwidth 0.1.0", "created": "2026-11-22T05:00:00Z",
            "environment": environment, "fingerprint": fingerprint(environment),
            "results": results}


def h200_links(nvlinks: int = 18, width: int = 16) -> dict:
    """The environment's links (topology.compact_links) of 2 x H200: NVLinks between GPU 0 and 1,
    PCIe gen5 x16 to each, GPU 1's PCIe link trained at ``width`` lanes."""
    return {"nvlinks": {"0-1": nvlinks},
            "pcie": {"0": {"gen": 5, "width": 16}, "1": {"gen": 5, "width": width}}}


def write_document(path: Path, doc: dict) -> Path:
    path.write_text(json.dumps(doc, indent=1))
    return path


def three_modes(scale: float = 1.0) -> list[dict]:
    """device, nccl and local on resnet-200 over 2 GPUs, as BENCHMARKS.md's 2 x H200 figures."""
    return [make_result("device", busbw=346.6 * scale, ceiling=("p2p unidirectional copy", 384.8)),
            make_result("nccl", busbw=285.6 * scale),
            make_result("local", busbw=21.6 * scale, ceiling=("host path", 23.7))]


def scaling(busbw_by_n: dict[int, float], kv_store: str = "nccl") -> list[dict]:
    return [make_result(kv_store, n=n, busbw=b) for n, b in busbw_by_n.items()]


def flat_sweep(kv_store: str = "nccl", n: int = 2, peak: float = 370.0) -> list[dict]:
    """1 MiB .. 1 GiB by factors of 2 with a latency-bound start, as nccl-tests sweeps look."""
    results = []
    for k in range(11):
        nbytes = (1 << 20) << k
        busbw = peak * nbytes / (nbytes + 64 * (1 << 20))
        results.append(make_result(kv_store, network=f"flat {nbytes >> 20}M", n=n,
                                   busbw=busbw, nbytes=nbytes,
                                   ceiling=("p2p unidirectional copy", 384.8)))
    return results


def doctor(doc: dict, factor: float) -> dict:
    """A copy of ``doc`` with every bandwidth multiplied (and every time divided) by ``factor``."""
    doc = json.loads(json.dumps(doc))
    for result in doc["results"]:
        s = result["summary"]
        for key in ("busbw_median", "busbw_min", "busbw_max", "algbw_median"):
            s[key] *= factor
        s["seconds_median"] /= factor
    return doc


MEASURE_SMALL = ["--network", "mlp", "--image-shape", "1,28,28", "--num-classes", "10",
                 "--cpus", "2", "--num-batches", "2", "--no-reference"]


def measure_document(path: Path) -> dict:
    """Run measure.py as a user would (2 CPU devices, the tiny mlp) and return its --json
    document; pytest.skip when --json does not yet write the schema-v1 document."""
    import os
    import subprocess
    import sys

    import pytest

    root = Path(__file__).resolve().parent.parent
    env = dict(os.environ, PYTHONPATH=str(root))
    proc = subprocess.run([sys.executable, "-m", "bandwidth.measure", *MEASURE_SMALL,
                           "--json", str(path)], cwd=root, env=env, capture_output=True,
                          text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(path.read_text())
    if "results" not in doc:
        pytest.skip("measure.py --json still writes a single result object, not the schema-v1 "
                    "document with 'results' (bandwidth/results/document.py)")
    return doc
