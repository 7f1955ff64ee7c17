"""``netlab up`` on a loaded host: a login that does not answer in time is one failed attempt of
wait_ready, ending in one NetlabError line, never subprocess's TimeoutExpired traceback. No root
needed: the login is a real process that does not finish (``sleep``)."""

import time
from types import SimpleNamespace

import pytest

from bandwidth.netlab import sshd
from bandwidth.netlab.lab import NetlabError


def test_a_login_that_never_answers_ends_in_one_line(tmp_path, monkeypatch):
    lab = SimpleNamespace(state_dir=tmp_path)
    host = SimpleNamespace(index=1, address="198.18.0.2", namespace="h1fc-test")
    (tmp_path / "sshd.1.log").write_text("")
    monkeypatch.setattr(sshd, "ssh_argv", lambda lab, host, *cmd, timeout_s=5: ["sleep", "30"])
    started = time.monotonic()
    with pytest.raises(NetlabError) as err:
        sshd.wait_ready(lab, host, timeout_s=2.0)
    assert time.monotonic() - started < 10
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith("sshd on 198.18.0.2 (h1fc-test) did not accept the lab's key "
                              "within 2 s: a login did not finish within")


def test_up_waits_longer_than_a_loaded_first_login():
    assert sshd.READY_TIMEOUT_S >= 60
