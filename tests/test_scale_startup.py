"""Start-up that scales (issue 27 items 1 and 8): a bad measure.py flag under a 55-process launch
is refused once, before any process starts; what this host cannot start is refused naming the
limit; the rendezvous timeout grows with the job."""

import subprocess
import sys

import pytest
from conftest import ROOT

from bandwidth.errors import ConfigError
from bandwidth.launch.cli import build_parser, config_from_args
from bandwidth.launch.supervision.limits import HostLimits, check_startable
from bandwidth.launch.preflight import is_measure_command, startup_timeout

LAUNCH = [sys.executable, str(ROOT / "launch.py")]


def run(*argv, shell_prefix=""):
    command = " ".join([*(f"'{a}'" for a in LAUNCH), *argv])
    return subprocess.run(f"{shell_prefix}{command}", shell=True, cwd=ROOT, capture_output=True,
                          text=True, timeout=120)


@pytest.mark.timeout(150)
def test_a_bad_flag_at_fifty_by_five_is_one_line_before_anything_starts():
    proc = run("-n", "50", "-s", "5", sys.executable, "bandwidth/measure.py", "--kv-store",
               "dist_sync", "--no-such-flag")
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "before any process started" in lines[0] and "--no-such-flag" in lines[0]
    assert "[worker" not in proc.stderr and proc.stdout == ""


@pytest.mark.timeout(150)
def test_a_plan_error_is_caught_too_and_other_commands_are_not_run_twice(tmp_path):
    proc = run("-n", "9", "-s", "0", sys.executable, "bandwidth/measure.py", "--kv-store",
               "dist_sync", "--cpus", "1", "--network", "mlp")
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert "needs at least one server" in proc.stderr
    marker = tmp_path / "ran"
    proc = run("-n", "1", "-s", "0", sys.executable, "-c",
               f"'open(\"{marker}\", \"a\").write(\"x\")'")
    assert proc.returncode == 0 and marker.read_text() == "x"      # started once, not checked
    assert is_measure_command(["python3", "-m", "bandwidth.measure"])
    assert is_measure_command(["/opt/x/bandwidth/measure.py"])
    assert not is_measure_command(["python3", "train.py", "-m", "measure"])


@pytest.mark.timeout(60)
def test_what_this_host_cannot_start_is_refused_naming_the_limit():
    proc = run("-n", "50", "-s", "5", sys.executable, "-c", "pass", shell_prefix="ulimit -n 200; ")
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert "RLIMIT_NOFILE" in proc.stderr and "ulimit -n 284" in proc.stderr
    roomy = HostLimits(mem_available=10**12, nproc=None, pid_max=None, nofile=None)
    check_startable(110, 110, roomy)
    with pytest.raises(ConfigError, match="MemAvailable.*at most 20 fit"):
        check_startable(30, 30, HostLimits(3 * 10**9, None, None, None))
    with pytest.raises(ConfigError, match=r"ulimit -u \(RLIMIT_NPROC\) = 100"):
        check_startable(30, 30, HostLimits(None, 100, None, None))
    with pytest.raises(ConfigError, match="kernel.pid_max"):
        check_startable(30, 30, HostLimits(None, None, 200, None))


def test_the_rendezvous_timeout_grows_with_the_job():
    def config(*argv):
        return config_from_args(build_parser().parse_args([*argv, "prog"]), {}, str(ROOT))

    assert config("-n", "2", "-s", "2").timeout_s == startup_timeout(4) == 63
    big = config("-n", "100", "-s", "10")
    assert big.timeout_s == 169 and not big.timeout_given
    given = config("-n", "100", "-s", "10", "--timeout", "30")
    assert given.timeout_s == 30 and given.timeout_given


@pytest.mark.timeout(60)
def test_the_same_error_from_many_processes_prints_once_with_the_count():
    program = "import sys; print('the same error', file=sys.stderr); print('own', sys.argv, " \
              "file=sys.stderr); sys.exit(0)"
    proc = run("-n", "6", "-s", "0", sys.executable, "-c", f'"{program}"')
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count("] the same error") == 1
    assert "launch: 6 processes printed this line, shown once (from worker " in proc.stderr
    assert proc.stderr.count("] own ") == 1           # identical too: argv is the same


@pytest.mark.timeout(150)
def test_the_check_runs_the_command_as_a_launch_with_a_scheduler_would(tmp_path):
    """With --scheduler the checked command sees a ps-lite scheduler of its own port, as every
    process of the launch does (MXNet's dist modes refused a 55-process launch without it)."""
    script = tmp_path / "measure.py"        # the check runs commands named measure.py
    script.write_text("import os, sys\n"
                      "if os.environ['DMLC_PS_ROOT_PORT'] == os.environ['MASTER_PORT']:\n"
                      "    sys.exit('measure.py: error: no scheduler')\n")
    proc = run("-n", "8", "-s", "1", "--scheduler", sys.executable, str(script))
    assert proc.returncode == 0, proc.stderr
    proc = run("-n", "8", "-s", "1", sys.executable, str(script))
    assert proc.returncode == 2 and "before any process started" in proc.stderr
    assert "no scheduler" in proc.stderr
