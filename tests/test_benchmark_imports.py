"""The benchmark scripts run on the GPU machine only, where a broken import costs a device call:
every name they import from the toolkit (bandwidth, networks) must exist, checked here without
running them (their ``--help`` would import torch once per script)."""

import ast
import importlib
from pathlib import Path

import pytest

BENCHMARKS = sorted((Path(__file__).resolve().parent.parent / "benchmarks").glob("*.py"))


def toolkit_imports(path: Path):
    """(module, name or None) of every import of the toolkit's modules in ``path``."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 \
                and node.module.split(".")[0] in ("bandwidth", "networks"):
            for alias in node.names:
                yield node.module, alias.name
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in ("bandwidth", "networks"):
                    yield alias.name, None


def test_the_scripts_are_found():
    assert len(BENCHMARKS) >= 10 and any(p.name == "gpu_bench.py" for p in BENCHMARKS)


@pytest.mark.parametrize("path", BENCHMARKS, ids=lambda p: p.name)
def test_every_toolkit_name_a_benchmark_imports_exists(path):
    missing = []
    for module, name in toolkit_imports(path):
        try:
            imported = importlib.import_module(module)
        except ImportError as exc:
            missing.append(f"{module}: {exc}")
            continue
        if name is not None and not hasattr(imported, name):
            try:
                importlib.import_module(f"{module}.{name}")
            except ImportError:
                missing.append(f"{module}.{name}")
    assert not missing, f"{path.name} imports what is not there: {missing}"
