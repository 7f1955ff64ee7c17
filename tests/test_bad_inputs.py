"""Bad input, fuzz style: every case through the real command, each checked for the contract.

measure.py, launch.py, ``python -m bandwidth.ceiling`` and ``python -m bandwidth.compare`` (its
flags; malformed result documents are tests/test_compare.py's) get out-of-range numbers (NaN,
infinity, 5000 digits), sweeps that would never end, broken shape and hosts files, unusable output
paths and argparse errors. Each must: exit with status 2, write exactly one line on stderr, no
traceback, within 10 s, and leave no process behind (every process it started carries a marker
in its environment, looked for in /proc afterwards). Each case is a process of its own, forked
from one that imported torch and the package once (tests/forkrun.py), one after another.
"""

import json
import os
import time
import uuid
from pathlib import Path

import pytest
from forkrun import Forker

ROOT = Path(__file__).resolve().parent.parent
LIMIT_S = 10.0
MARK = "BANDWIDTH_FUZZ_MARK"

MEASURE = [str(ROOT / "bandwidth" / "measure.py")]
CEILING = ["-m", "bandwidth.ceiling", "--cpus", "2"]
LAUNCH = [str(ROOT / "launch.py")]
COMPARE = ["-m", "bandwidth.compare"]
DIGITS = "9" * 5000


def _files(folder: Path) -> dict[str, str]:
    """The malformed input files, by the name the cases use."""
    files = {
        "deep.json": "[" * 100000 + "]" * 100000,
        "huge.json": '[["a", [1' + "0" * 200 + "]]]",
        "newline.json": json.dumps([["a\nnum of arrays = 1, total size = 0 MB", [3]]]),
        "digits.json": '[["a", [1' + "0" * 5000 + "]]]",
        "float.json": '[["a", [1e200]]]',
        "empty.json": "[]",
        "hosts-v6-junk": "[::1]]\n",
        "hosts-name": "a" * 1_000_000 + "\n",
        "hosts-port": f"node1:{DIGITS}\n",
        "hosts-slots": "node1 slots=0\n",
        "hosts-option": "-oProxyCommand=touch\n",
        "hosts-ok": "127.0.0.1\n",
    }
    paths = {}
    for name, text in files.items():
        (folder / name).write_text(text)
        paths[name] = str(folder / name)
    (folder / "binary.json").write_bytes(bytes(range(256)) * 4)
    (folder / "hosts-binary").write_bytes(bytes(range(256)) * 4)
    paths["binary.json"] = str(folder / "binary.json")
    paths["hosts-binary"] = str(folder / "hosts-binary")
    paths["dir"] = str(folder)
    return paths


def _cases(f: dict[str, str]) -> list[tuple[str, list[str]]]:
    dry = ["--dry-run"]
    m = [(f"measure {' '.join(a)[:50]}", MEASURE + a + dry) for a in [
        ["--chunk-mb", "nan"], ["--chunk-mb", "-1"], ["--timeout", "nan"], ["--timeout", "inf"],
        ["--timeout", "1e20"], ["--network", "flat", "-b", "1e400"],
        ["--network", "flat", "-b", "1", "-e", "1G", "-f", "1.001"],
        ["--network", "flat", "-f", "nan"], ["--network", "flat", "-b", "1", "-e", "2", "-f", "1"],
        ["--network", "flat", "-b", "1G", "-e", "1M"], ["--network", "flat", "-b", DIGITS],
        ["--num-batches", "abc"], ["--num-batches", "0"], ["--num-batches", DIGITS],
        ["--frobnicate"], ["--kv-store", "nosuch"], ["--network", "nosuch"],
        ["--network", f["deep.json"]], ["--network", f["huge.json"]],
        ["--network", f["newline.json"]], ["--network", f["binary.json"]],
        ["--network", f["digits.json"]], ["--network", f["float.json"]],
        ["--network", "/nonexistent/shapes.json"], ["--image-shape", "3,x,224"],
        ["--dtype", "float64"], ["--gpus", "0,1", "--cpus", "2"], ["--cpus", "0"],
        ["--json", ""], ["--plot", f["dir"]], ["--plot", f["dir"] + "/plot.txt"],
        ["--csv", "/nonexistent/x.csv"], ["--disp-batches", "10", "--num-batches", "5"],
        ["--cpu-threads", "0"], ["--tolerance", "abc"], ["--gpus", "99"],
        ["--kv-store", "local", "--network-ceiling", "/nonexistent.json"],
        ["--seed", "9" * 30], ["--num-classes", "9" * 30],
        ["--graph-steps", "0"], ["--graph-steps", DIGITS], ["--graph-steps", "2", "--cpus", "2"],
        ["--graph-steps", "2", "--launch", "eager"],
    ]]
    c = [(f"ceiling {' '.join(a)[:50]}", CEILING + a) for a in [
        ["--mb", "nan"], ["--mb", "1e300"], ["--p2p-mb", "inf"], ["--cpu-threads", "0"],
        ["--timeout", "inf"], ["-b", "1e400"], ["-b", "1", "-e", "1G", "-f", "1.001"],
        ["-b", "1", "-e", "2", "-f", "nan"], ["--repeats", "0"], ["--iters", "0"],
        ["--skip", "nosuch"], ["--frob"], ["--latency-repeat", DIGITS],
    ]]
    host = ["-H", f["hosts-ok"], "--launcher", "ssh"]
    la = [(f"launch {' '.join(a)[:50]}", LAUNCH + a) for a in [
        ["-n", "0", "true"], ["-n", "x", "true"], ["-n", "1", "-s", "-1", "true"],
        ["-n", "1", "--timeout", "1e20", "true"], ["-n", "1", "--timeout", "99999999999", "true"],
        ["-n", "1", "--port", "70000", "true"], ["-n", "1", "--port", DIGITS, "true"],
        ["-n", "1", "--master-addr", "a" * 100_000, "true"],
        ["-n", "1", "-H", f["hosts-binary"], "true"], ["-n", "1", "-H", f["hosts-name"], "true"],
        ["-n", "1", "-H", f["hosts-port"], "true"], ["-n", "1", "-H", f["hosts-option"], "true"],
        ["-n", "1", "-H", f["hosts-v6-junk"], "true"],
        ["-n", "1", "-H", "/nonexistent/hosts", "true"], ["-n", "1", "--env", "BAD NAME=1", "true"],
        ["-n", "1", "--env", "MASTER_ADDR=x", "true"],
        ["-n", "1", *host, "--ssh-option", "StrictHostKeyChecking=false", "true"],
        ["-n", "1", *host, "--ssh-option", "-oProxyCommand=x", "true"],
        ["-n", "1", "--launcher", "nosuch", "true"], ["-n", "1"],
        ["-n", "1", "-H", f["hosts-ok"], "--launcher", "local", "true"],
        ["-n", "1", "--sync-dst-dir", "/tmp/x", "true"],
    ]]
    p = [(f"compare {' '.join(a)[:50]}", COMPARE + a) for a in [
        [], ["--tolerance"], ["--frob", "x.json"], ["/nonexistent/a.json"],
        ["/nonexistent/a.json", "--baseline-row"], [f["dir"]],
    ]]
    return m + c + la + p


def _leftovers(mark: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if mark.encode() in Path(f"/proc/{entry}/environ").read_bytes():
                    found.append(int(entry))
            except OSError:
                pass
    return found


def _run(forker: Forker, argv: list[str], folder: str) -> dict:
    mark = f"{MARK}={uuid.uuid4().hex}"
    env = dict(os.environ, PYTHONPATH=str(ROOT), **dict([mark.split("=")]))
    start = time.monotonic()
    code, _, stderr = forker.run(argv, folder, env, timeout_s=60)
    seconds = time.monotonic() - start
    time.sleep(0.2)
    return {"code": code, "stderr": stderr, "seconds": seconds, "left": _leftovers(mark)}


_FOLDER: dict = {}


def _folder(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    if not _FOLDER:
        folder = tmp_path_factory.mktemp("bad-inputs")
        _FOLDER["folder"], _FOLDER["files"] = folder, _files(folder)
    return _FOLDER["folder"], _FOLDER["files"]


CASES = _cases({name: f"<{name}>" for name in (
    "deep.json", "huge.json", "newline.json", "digits.json", "float.json", "empty.json",
    "binary.json", "hosts-v6-junk", "hosts-name", "hosts-port", "hosts-slots", "hosts-option",
    "hosts-ok", "hosts-binary", "dir")})


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    folder, files = _folder(tmp_path_factory)
    cases = _cases(files)                 # the same cases, with the real file names
    forker = Forker()
    try:
        return {label: _run(forker, argv, str(folder)) for label, (_, argv) in zip(LABELS, cases)}
    finally:
        forker.close()


LABELS = [f"{i:02d} {label}" for i, (label, _) in enumerate(CASES)]


def test_there_are_at_least_60_cases_over_the_four_commands():
    assert len(CASES) >= 60 and len(set(LABELS)) == len(LABELS)
    for command in ("measure", "ceiling", "launch", "compare"):
        assert any(label.startswith(command) for label, _ in CASES)


@pytest.mark.timeout(900)
@pytest.mark.parametrize("label", LABELS)
def test_bad_input_is_one_line_and_status_2(outcomes, label):
    out = outcomes[label]
    lines = out["stderr"].splitlines()
    assert out["code"] == 2, out["stderr"][-1500:]
    assert len(lines) == 1, out["stderr"][-1500:]
    assert "Traceback" not in out["stderr"]
    assert ": error: " in lines[0] and len(lines[0]) <= 1000
    assert out["seconds"] < LIMIT_S, f"took {out['seconds']:.1f} s"
    assert out["left"] == [], f"processes left: {out['left']}"
