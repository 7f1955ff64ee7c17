"""What the tests of --backend mxnet share (test_mxnet_backend.py, test_mxnet_pslite.py): whether
MXNet can be imported here (``needs_mxnet`` skips a test, saying why, where it cannot), the small
network they run, and readers of measure.py's MXNet-style lines.
"""

import os
import re
import subprocess
import sys

import pytest

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
