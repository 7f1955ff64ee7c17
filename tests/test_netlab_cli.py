"""bandwidth.netlab's refusals: one line on stderr, exit status 2, nothing made (no root needed)."""

import shutil
import signal
import subprocess
import sys
import time

import pytest
from conftest import ROOT

from bandwidth.netlab import cli, lab


def run(capsys, *argv):
    status = cli.main(list(argv))
    err = capsys.readouterr().err
    return status, err


def test_without_root_it_refuses_naming_root(capsys, monkeypatch):
    monkeypatch.setattr(lab.os, "geteuid", lambda: 1000)
    status, err = run(capsys, "up", "--hosts", "2", "--rate", "1gbit", "--name", "zzcli")
    assert status == 2 and err.count("\n") == 1
    assert err.startswith("netlab: error: the lab needs root")


def test_without_tc_or_sshd_it_names_them(capsys, monkeypatch):
    real = shutil.which
    monkeypatch.setattr(lab.os, "geteuid", lambda: 0)
    monkeypatch.setattr(lab.shutil, "which",
                        lambda name: None if name in ("tc", "sshd") else real(name))
    monkeypatch.setattr(lab, "sshd_path", lambda: None)
    status, err = run(capsys, "up", "--hosts", "2", "--name", "zzcli")
    assert status == 2 and err.count("\n") == 1
    assert "tc (apt-get install iproute2)" in err and "sshd (apt-get install openssh-server)" in err


@pytest.mark.parametrize("args, words", [
    (["--rate", "fast"], "rate 'fast'"),
    (["--subnet", "10.0.0.0/24"], "198.18.0.0/15"),
    (["--name", "Bad-Name"], "--name 'Bad-Name'"),
    (["--rate-of", "9=1gbit"], "--rate-of 9"),
    (["--rate-of", "2"], "HOST=RATE"),
    (["--rto-min", "0"], "--rto-min 0: between 1 and 200 ms"),
    (["--rto-min", "250"], "--rto-min 250"),
])
def test_bad_input_is_one_line(capsys, monkeypatch, args, words):
    monkeypatch.setattr(lab, "missing_prerequisites", lambda: [])
    monkeypatch.setattr(lab, "namespaces_of", lambda name: [])
    status, err = run(capsys, "up", "--hosts", "2", *args)
    assert status == 2 and err.count("\n") == 1 and words in err, err


def test_plan_names_and_addresses():
    planned = lab.plan_lab("bwx", "198.18.7.0/24", 3, 10**9, {"3": 5 * 10**8})
    assert [h.address for h in planned.hosts] == ["198.18.7.1", "198.18.7.2", "198.18.7.3"]
    assert [h.interface for h in planned.hosts] == ["bwxv1", "bwxv2", "bwxv3"]
    assert [h.rate_bits for h in planned.hosts] == [10**9, 10**9, 5 * 10**8]
    assert planned.bridge_address == "198.18.7.254"


def test_status_without_a_lab(capsys):
    status, err = run(capsys, "status", "--name", "zzcli")
    assert status == 2 and "no lab 'zzcli' is up" in err


@pytest.mark.timeout(120)
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_part_way_through_up_removes_what_was_made(sig):
    """`netlab up` stopped while it makes the hosts: everything it made is removed (was, on
    SIGTERM: 4 namespaces, 5 links, 16 files and 4 root sshds left, exit 143 and no message)."""
    missing = lab.missing_prerequisites() if sys.platform.startswith("linux") else ["Linux"]
    if missing:
        pytest.skip(f"the lab needs {', '.join(missing)}")
    name = "zzsig"
    lab.remove(name)
    try:
        proc = subprocess.Popen([sys.executable, "-m", "bandwidth.netlab", "up", "--name", name,
                                 "--hosts", "4", "--subnet", "198.18.141.0/24"], cwd=ROOT,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 30       # part-way: once its first namespace exists
        while not lab.namespaces_of(name) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
        planned = lab.plan_lab(name, "198.18.141.0/24", 4, None, {})
        assert proc.returncode == 128 + sig, err
        assert err.endswith("(what was made is removed)\n") and err.count("\n") == 1, err
        assert lab.namespaces_of(name) == [] and not planned.state_dir.exists()
        links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
        assert planned.bridge not in links and planned.hosts[0].port not in links
        daemons = subprocess.run(["pgrep", "-f", str(planned.state_dir)], capture_output=True,
                                 text=True).stdout
        assert daemons == ""
    finally:
        lab.remove(name)
