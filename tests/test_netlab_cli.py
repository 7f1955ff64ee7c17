"""bandwidth.netlab's refusals: one line on stderr, exit status 2, nothing made (no root needed)."""

import shutil

import pytest

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
