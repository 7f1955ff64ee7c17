"""Results are never silently lost, and no input blocks or slips through (issue 28, "Data and
security"): every case through the real command.

* Results files are written to a temporary file and renamed: on a really full filesystem (a
  64 KiB tmpfs this test mounts, as root; skipped otherwise) and on a read-only one, the command
  exits 2 with one line naming the file, the old file is intact and no temporary file is left.
* A FIFO given where a file is read or written is one line and exit 2, never a block.
* Hosts files: labels DNS refuses, broken or IPv4-mapped IPv6 addresses: one line, exit 2, and
  ssh is never started (a fake ``ssh`` on PATH would leave a mark).
* A baseline whose schema_version is ``true`` is refused (a bool is no version).
"""

import contextlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from resultdocs import make_document, make_result

ROOT = Path(__file__).resolve().parent.parent
MEASURE = [str(ROOT / "bandwidth" / "measure.py")]
LAUNCH = [str(ROOT / "launch.py")]
COMPARE = ["-m", "bandwidth.compare"]
SMALL_RUN = ["--kv-store", "local", "--cpus", "2", "--network", "mlp", "--num-batches", "2",
             "--no-reference"]
pytestmark = pytest.mark.timeout(120)


def _run(argv: list[str], cwd: Path, env: dict | None = None, timeout: float = 60
         ) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT), **(env or {}))
    return subprocess.run([sys.executable, *argv], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def _one_line_status_2(done: subprocess.CompletedProcess, *words: str) -> str:
    lines = done.stderr.splitlines()
    assert done.returncode == 2, done.stderr[-2000:]
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


@contextlib.contextmanager
def _tmpfs(folder: Path, size: str = "64k"):
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("needs root to mount a small tmpfs")
    folder.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs",
                           str(folder)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], capture_output=True)


def _fill(folder: Path) -> None:
    """Fill the filesystem up to its last byte (unbuffered: each write fails on its own)."""
    for name, chunk in (("filler", 1024), ("filler2", 1)):
        with open(folder / name, "wb", buffering=0) as f:
            with contextlib.suppress(OSError):
                while True:
                    f.write(b"\0" * chunk)


OLD = json.dumps({"old": "results"}) + "\n"


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


def test_json_on_a_full_filesystem_keeps_the_old_file_and_names_it(tmp_path):
    with _tmpfs(tmp_path / "full") as full:
        target = full / "results.json"
        target.write_text(OLD)
        _fill(full)
        done = _run(MEASURE + SMALL_RUN + ["--json", str(target)], tmp_path)
        _one_line_status_2(done, str(target), "No space left")
        assert target.read_text() == OLD
        assert _leftovers(full) == []


def test_every_results_writer_keeps_the_old_file_on_a_full_filesystem(tmp_path):
    """compare's --csv and --json (gates), and the library writers of the baseline, the plot,
    the JUnit report and the markdown summary."""
    from bandwidth.errors import ConfigError
    from bandwidth.report.baseline import save_baseline
    from bandwidth.report.table import write_csv
    from bandwidth.files import append_atomic, write_atomic

    doc = make_document([make_result(busbw=300.0)])
    (tmp_path / "now.json").write_text(json.dumps(doc))
    with _tmpfs(tmp_path / "full") as full:
        names = ["gates.json", "rows.csv", "base.json", "junit.xml", "summary.md"]
        for name in names:
            (full / name).write_text(OLD)
        _fill(full)
        for flag, name in (("--json", "gates.json"), ("--csv", "rows.csv")):
            done = _run(COMPARE + [str(tmp_path / "now.json"), "--min-gbps", "1", flag,
                                   str(full / name)], tmp_path)
            _one_line_status_2(done, str(full / name))
        for write in (lambda: save_baseline(doc, full / "base.json"),
                      lambda: write_csv([], full / "rows.csv"),
                      lambda: write_atomic(full / "junit.xml", "x" * 100_000, "JUnit"),
                      lambda: append_atomic(full / "summary.md", "y" * 100_000, "summary")):
            with pytest.raises(ConfigError, match="No space left"):
                write()
        for name in names:
            assert (full / name).read_text() == OLD, name
        assert _leftovers(full) == []


def test_a_read_only_folder_is_refused_before_measuring_and_the_old_file_kept(tmp_path):
    from bandwidth.errors import ConfigError
    from bandwidth.files import write_atomic

    with _tmpfs(tmp_path / "ro") as ro:
        (ro / "results.json").write_text(OLD)
        subprocess.run(["mount", "-o", "remount,ro", str(ro)], check=True)
        done = _run(MEASURE + SMALL_RUN + ["--json", str(ro / "results.json")], tmp_path)
        _one_line_status_2(done, str(ro / "results.json"))
        with pytest.raises(ConfigError, match="Read-only file system"):
            write_atomic(ro / "results.json", "new")
        assert (ro / "results.json").read_text() == OLD
        assert _leftovers(ro) == []


def test_a_successful_write_replaces_the_file_whole_and_keeps_its_mode(tmp_path):
    from bandwidth.files import write_atomic

    target = tmp_path / "r.json"
    target.write_text(OLD)
    target.chmod(0o640)
    write_atomic(target, "new\n")
    assert target.read_text() == "new\n"
    assert target.stat().st_mode & 0o777 == 0o640
    assert _leftovers(tmp_path) == []


@pytest.mark.parametrize("flag", ["--json", "--save-baseline"])
def test_an_output_onto_a_symlink_goes_to_its_target_and_the_link_stays(tmp_path, flag):
    (tmp_path / "real.json").write_text(OLD)
    (tmp_path / "link.json").symlink_to("real.json")
    done = _run(MEASURE + SMALL_RUN + [flag, "link.json"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert (tmp_path / "link.json").is_symlink()
    assert json.loads((tmp_path / "real.json").read_text())["results"]
    assert _leftovers(tmp_path) == []


def test_an_output_onto_a_symlink_loop_is_one_line(tmp_path):
    (tmp_path / "a.json").symlink_to("b.json")
    (tmp_path / "b.json").symlink_to("a.json")
    _one_line_status_2(_run(MEASURE + SMALL_RUN + ["--json", "a.json"], cwd=tmp_path),
                       "symlink loop")
    assert (tmp_path / "a.json").is_symlink() and (tmp_path / "b.json").is_symlink()


# ----- FIFOs: one line, exit 2, never a block -----

@pytest.fixture
def fifo(tmp_path) -> Path:
    path = tmp_path / "pipe.json"
    os.mkfifo(path)
    return path


def _fifo_cases(fifo: Path, doc: Path) -> list[list[str]]:
    return [
        MEASURE + SMALL_RUN + ["--baseline", str(fifo)],       # refused before measuring
        MEASURE + ["--json", str(fifo), "--dry-run"],
        MEASURE + ["--network", str(fifo), "--dry-run"],
        MEASURE + ["--kv-store", "dist_sync", "--network-ceiling", str(fifo), "--dry-run"],
        LAUNCH + ["-n", "1", "-H", str(fifo), "true"],
        COMPARE + [str(fifo)],
        COMPARE + [str(doc), "--baseline", str(fifo)],
        COMPARE + [str(doc), "--min-gbps", "1", "--json", str(fifo)],
    ]


@pytest.mark.parametrize("case", range(8))
def test_a_fifo_is_refused_in_one_line_and_never_blocks(tmp_path, fifo, case):
    doc = tmp_path / "doc.json"
    doc.write_text(json.dumps(make_document([make_result()])))
    argv = _fifo_cases(fifo, doc)[case]
    done = _run(argv, tmp_path, timeout=30)
    _one_line_status_2(done, "pipe.json")


# ----- hosts files -----

@pytest.mark.parametrize("line, words", [
    ("a" * 64 + ".example", "64 characters"),
    ("node1..example", "empty label"),
    ("node1.", "ending in a dot"),
    ("[::1::2]", "not an IPv6 address"),
    ("[::ffff:198.18.48.1]", "198.18.48.1"),
    ("300.1.2.3", "not an IPv4 address"),
])
def test_a_bad_host_name_is_one_line_and_ssh_never_starts(tmp_path, line, words):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    mark = tmp_path / "ssh-ran"
    (bin_dir / "ssh").write_text(f"#!/bin/sh\ntouch {mark}\nexit 255\n")
    (bin_dir / "ssh").chmod(0o755)
    (tmp_path / "hosts").write_text(f"127.0.0.1\n{line}\n")
    done = _run(LAUNCH + ["-n", "2", "-H", str(tmp_path / "hosts"), "--launcher", "ssh", "true"],
                tmp_path, env={"PATH": f"{bin_dir}:{os.environ['PATH']}"})
    _one_line_status_2(done, "hosts:2", words)
    assert not mark.exists()


# ----- the schema version -----

def test_a_baseline_whose_schema_version_is_true_is_refused(tmp_path):
    doc = make_document([make_result()])
    doc["schema_version"] = True
    (tmp_path / "base.json").write_text(json.dumps(doc))
    (tmp_path / "now.json").write_text(json.dumps(make_document([make_result()])))
    done = _run(COMPARE + [str(tmp_path / "now.json"), "--baseline",
                           str(tmp_path / "base.json")], tmp_path)
    _one_line_status_2(done, "base.json", "schema version")


# ----- the loader's variables stay home -----

def test_ld_preload_and_pythonstartup_are_not_sent_to_remote_hosts(tmp_path):
    from bandwidth.launch.launchers import ssh
    from bandwidth.launch.planning.config import LaunchConfig
    from bandwidth.launch.contract.environment import Job
    from bandwidth.launch.contract.forwarding import child_environ
    from bandwidth.launch.planning.hostfile import parse_hostfile
    from bandwidth.launch.planning.plan import make_plan

    (tmp_path / "hosts").write_text("node1\n")
    hosts = tuple(parse_hostfile(tmp_path / "hosts"))
    config = LaunchConfig(command=("python3", "prog.py"), num_workers=1, num_servers=0,
                          hosts=hosts)
    job = Job(1, 0, "10.0.0.1", 29500, 29500, "ssh", "f" * 32)
    environ = {"LD_PRELOAD": "/tmp/evil.so", "LD_AUDIT": "/tmp/audit.so",
               "PYTHONSTARTUP": "/tmp/x.py", "LD_LIBRARY_PATH": "/opt/cuda/lib64",
               "PATH": "/usr/bin"}
    (child,) = ssh.build(make_plan(config, job, hosts, place_scheduler=False, environ=environ))
    sent = child.remote_env.decode()
    assert "evil.so" not in sent and "audit.so" not in sent and "x.py" not in sent
    assert "/opt/cuda/lib64" in sent and "/usr/bin" in sent
    # on the launching host they are the launcher's own already, and pass
    assert child_environ(environ, (), same_host=True)["LD_PRELOAD"] == "/tmp/evil.so"
