"""CI's selection stays what conftest says: every test that conftest.SLOW_IN_CI leaves out of
CI's run exists under that name and is marked slow (a renamed test would otherwise fall out of
the list silently and run in CI again, or a typo leave a heavy test in)."""

import subprocess
import sys

import pytest
from conftest import ROOT, SLOW_IN_CI


@pytest.mark.timeout(120)
def test_every_test_left_out_of_ci_exists_and_is_marked_slow():
    files = sorted({name.split("::")[0] for name in SLOW_IN_CI})
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "slow",
                           "-p", "no:cacheprovider", *(f"tests/{f}" for f in files)],
                          cwd=ROOT, capture_output=True, text=True, timeout=110)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    collected = {line.removeprefix("tests/") for line in done.stdout.splitlines()
                 if line.startswith("tests/")}
    assert SLOW_IN_CI <= collected, sorted(SLOW_IN_CI - collected)
