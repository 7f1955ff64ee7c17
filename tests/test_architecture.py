"""The package's layout holds its rules: each top-level room imports only what one table
(``MAY_IMPORT``) allows, and the table is a house of floors; no import circles; package
``__init__`` files that hold only their rule and name each module; and the public entry points
where users find them.

The imports are read from the source (``ast``), every one of them: at module level, inside
functions (a lazy import is still a dependency) and under ``if TYPE_CHECKING``. Importing
``a.b.c`` also runs ``a`` and ``a.b``, so each module depends on its packages' ``__init__`` too.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "bandwidth"


def module_names() -> dict[str, Path]:
    mods = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        mods[".".join(parts)] = path
    return mods


def imports_of(name: str, path: Path, mods: dict[str, Path]) -> set[str]:
    """The toolkit's modules that ``name`` imports, resolved to modules (not names in them)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()

    def add(target: str) -> None:
        while target and target not in mods:
            target = target.rpartition(".")[0]
        if target:
            found.add(target)
            parent = target.rpartition(".")[0]
            while parent:                        # importing a.b.c runs a and a.b
                found.add(parent)
                parent = parent.rpartition(".")[0]

    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "bandwidth":
                    add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            if module.split(".")[0] != "bandwidth":
                continue
            for alias in node.names:
                add(f"{module}.{alias.name}" if f"{module}.{alias.name}" in mods else module)
    found.discard(name)
    return found


def import_graph() -> dict[str, set[str]]:
    mods = module_names()
    return {name: imports_of(name, path, mods) for name, path in mods.items()}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_reader_finds_a_circle_when_there_is_one():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert circles(graph) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_the_reader_sees_lazy_and_package_imports(tmp_path):
    mods = {"bandwidth": tmp_path / "__init__.py", "bandwidth.x": tmp_path / "x" / "__init__.py",
            "bandwidth.x.y": tmp_path / "x" / "y.py", "bandwidth.z": tmp_path / "z.py"}
    src = tmp_path / "z.py"
    src.write_text("def f():\n    from bandwidth.x.y import thing\n    from . import x\n")
    assert imports_of("bandwidth.z", src, mods) == {"bandwidth", "bandwidth.x", "bandwidth.x.y"}


def test_no_module_imports_itself_back():
    graph = import_graph()
    assert len(graph) > 60
    assert circles(graph) == []


# What each top-level room of ``bandwidth/`` may import: the house's floors, read from the bottom.
# A package's ``__init__`` says the same in words; this table is the rule the code is held to.
VOCABULARY = {"errors", "words", "formulas", "cliexit", "textformat", "arrays", "cliparse",
              "files", "thresholds", "gates", "links", "progress"}
MAY_IMPORT = {
    # the vocabulary: imports nothing above it
    "errors": set(), "words": set(), "formulas": set(), "cliexit": set(), "textformat": set(),
    "progress": set(),
    "arrays": set(), "cliparse": {"errors"}, "files": {"errors"}, "thresholds": {"errors"},
    "gates": {"files"}, "links": {"errors", "files", "textformat"},
    # what the machine is, how a step is cut, how each mode exchanges
    "hardware": {"errors"},
    "schedules": {"arrays", "errors", "formulas"},
    "stores": {"arrays", "errors", "formulas", "hardware", "words"},
    # the command line, the launcher, the lab
    "config": VOCABULARY | {"hardware", "schedules"},
    "launch": VOCABULARY,
    "netlab": VOCABULARY,
    "processes": VOCABULARY | {"launch"},
    "compute": VOCABULARY | {"config", "schedules"},
    "predict": VOCABULARY | {"config", "hardware", "launch", "stores"},
    # the ceilings, the plan, one measurement, its result, the report
    "ceiling": VOCABULARY | {"config", "hardware", "launch", "processes"},
    "plan": VOCABULARY | {"compute", "config", "hardware", "schedules"},
    "measurement": VOCABULARY | {"ceiling", "compute", "hardware", "launch", "plan", "schedules",
                                 "stores"},
    "results": VOCABULARY | {"ceiling", "hardware", "measurement", "plan"},
    "backends": VOCABULARY | {"config", "launch", "measurement", "plan", "processes", "results",
                              "stores"},
    "report": VOCABULARY | {"hardware", "plan", "results"},
    # the pipeline and the commands on top
    "run": VOCABULARY | {"backends", "ceiling", "config", "hardware", "launch", "measurement",
                         "plan", "processes", "results"},
    "compare": VOCABULARY | {"report", "results"},
    "hostgate": VOCABULARY | {"report"},
    "execution": VOCABULARY | {"backends", "ceiling", "compute", "config", "hardware", "launch",
                               "measurement", "plan", "predict", "processes", "report", "results",
                               "run", "schedules", "stores"},
    "measure": VOCABULARY | {"execution", "launch", "report"},
    "__main__": {"measure"},
}


def room_of(module: str) -> str | None:
    """The top-level room of ``bandwidth.x.y``: ``x`` (None for the package itself)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def test_every_room_imports_only_what_the_table_allows():
    graph = import_graph()
    rooms = {room_of(name) for name in graph} - {None}
    assert rooms == set(MAY_IMPORT), f"rooms not in MAY_IMPORT, or gone: {rooms ^ set(MAY_IMPORT)}"
    broken = sorted(f"{name} -> {target}" for name, targets in graph.items()
                    for target in targets
                    if room_of(name) and room_of(target) not in (None, room_of(name))
                    and room_of(target) not in MAY_IMPORT[room_of(name)])
    assert broken == [], "imports the table does not allow:\n" + "\n".join(broken)


def test_the_table_of_rooms_is_a_house_of_floors():
    """No two rooms may import each other, even through others: the table is a layering."""
    assert circles({room: set(allowed) for room, allowed in MAY_IMPORT.items()}) == []


def test_package_inits_hold_only_their_rule():
    """An ``__init__`` with code would be imported by each of its modules and tie them together;
    each says what the package owns and what it may import."""
    for init in sorted(PACKAGE.rglob("__init__.py")):
        tree = ast.parse(init.read_text())
        doc = ast.get_docstring(tree)
        assert doc and len(doc) > 60, f"{init.relative_to(ROOT)} has no rule in its docstring"
        code = [node for node in tree.body[1:]
                if not (isinstance(node, ast.Assign)
                        and [t.id for t in node.targets if isinstance(t, ast.Name)]
                        == ["__version__"])]
        assert code == [], f"{init.relative_to(ROOT)} holds code: move it to a module"



def test_every_package_names_each_of_its_modules():
    """A package's docstring says what each of its modules holds (``name``), so that a reader
    finds the module for a job from the package's face, and a new module is described where it
    lives."""
    for init in sorted(PACKAGE.rglob("__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        modules = sorted(p.stem for p in init.parent.glob("*.py")
                         if p.stem not in ("__init__", "__main__"))
        unnamed = [m for m in modules if f"``{m}``" not in doc]
        assert unnamed == [], f"{init.relative_to(ROOT)} does not name {unnamed}"

@pytest.mark.parametrize("argv", [
    ["bandwidth/measure.py", "--help"],
    ["-m", "bandwidth.measure", "--help"],
    ["-m", "bandwidth", "--help"],
    ["-m", "bandwidth.ceiling", "--help"],
    ["-m", "bandwidth.compare", "--help"],
    ["-m", "bandwidth.netlab", "--help"],
    ["-m", "bandwidth.hostgate", "--help"],
    ["launch.py", "--help"],
])
def test_the_public_entry_points_stay(argv):
    done = subprocess.run([sys.executable, *argv], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage:"), done.stdout[:200]


def test_measure_runs_from_inside_its_folder():
    done = subprocess.run([sys.executable, "measure.py", "--network", "mlp", "--dry-run"],
                          cwd=PACKAGE, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("num of arrays = 6,")


def test_the_kvstore_interface_stays_small():
    """A mode fills a few members (issue 41): its words and flags are ``traits``, its bus factor,
    traffic and memory ``costs``, each an object of its own."""
    from bandwidth.stores.base import KVStore
    public = sorted(name for name in vars(KVStore) if not name.startswith("_"))
    public += sorted(name for name in getattr(KVStore, "__annotations__", {})
                     if not name.startswith("_") and name not in public)
    assert len(public) <= 12, public
