import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def run_cli(*args: str, cwd: Path = ROOT, script: str | None = None, timeout: float = 120):
    """Run measure.py as a user would; returns the CompletedProcess (text)."""
    argv = [sys.executable] + ([script] if script else ["-m", "bandwidth.measure"]) + list(args)
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    if script is None:
        env["PYTHONPATH"] = str(ROOT)
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def cli():
    return run_cli


requires_cuda = pytest.mark.skipif(
    not __import__("torch").cuda.is_available(), reason="needs CUDA GPUs")
