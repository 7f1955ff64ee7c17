"""The host check in rounds (bandwidth.links.rounds, ``ceiling --network --rounds``) on a lab of
real hosts: a host whose link is slow and a path slowed in one direction only are named, by the
launcher's real processes over shaped links, and the healthy hosts of the same lab pass.

The lab is slow on purpose (100 Mbit/s, the faults at 40): links, not the 2 cores of CI's
machine, bind, so the rates are the shaping's whatever else runs beside the test. Needs root, ip,
tc and sshd; skipped with the reason otherwise; removed on every exit path.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from launch_support import lab_leftovers, netlab_for_tests

ROOT = Path(__file__).resolve().parent.parent
NAME = "bwi40r"                       # no other lab or test uses this prefix
SUBNET = "198.18.142.0/24"

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def lab():
    with netlab_for_tests(NAME, 5, "100mbit", {"5": "40mbit"}, SUBNET,
                          paths={"1-2": "40mbit"}) as made:
        yield made


def rounds(lab, tmp_path, hosts, *extra) -> tuple[subprocess.CompletedProcess, str]:
    """Launch the host check in rounds on ``hosts`` (addresses) and judge it with hostgate."""
    hostfile = tmp_path / "hosts"
    hostfile.write_text("".join(f"{h}\n" for h in hosts))
    doc = tmp_path / "rounds.json"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    run = subprocess.run([sys.executable, "launch.py", "-H", str(hostfile), "--ssh-config",
                          str(lab.state_dir / "ssh_config"), "-n", str(len(hosts)), "-s", "0",
                          "--timeout", "90", "python3", "-m", "bandwidth.ceiling", "--network",
                          "--rounds", "--mb", "2", "--repeats", "2", "--json", str(doc), *extra],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=200)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    gate = subprocess.run([sys.executable, "-m", "bandwidth.hostgate", str(doc)], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=60)
    return gate, run.stdout


def test_the_slow_host_and_the_one_way_slow_path_are_named(lab, tmp_path):
    hosts = [h.address for h in lab.hosts]
    gate, _ = rounds(lab, tmp_path, hosts, "--screen-rounds", "all")
    assert gate.returncode == 1, gate.stdout + gate.stderr
    verdict = next(line for line in gate.stdout.splitlines() if line.startswith("# FAILED"))
    named = verdict.partition("): ")[2]
    # rank r runs on host r+1: host 5 is rank 4; the path from host 1 to host 2 is 0 -> 1
    assert f"host 4@{hosts[4]}" in named, gate.stdout
    assert f"path 0@{hosts[0]}->1@{hosts[1]}" in named, gate.stdout
    assert f"1@{hosts[1]}->0@{hosts[0]}" not in named, gate.stdout        # that way is fast
    for healthy in hosts[:4]:
        assert f"host {hosts.index(healthy)}@{healthy}" not in named, gate.stdout
    assert lab_leftovers(lab) == []


def test_the_healthy_hosts_of_the_same_lab_pass(lab, tmp_path):
    healthy = [h.address for h in lab.hosts][1:4]          # hosts 2-4: no slow link or path
    gate, out = rounds(lab, tmp_path, healthy)
    assert gate.returncode == 0, gate.stdout + gate.stderr
    assert "no slow host, no slow path" in gate.stdout, gate.stdout
    assert "Host check in rounds: 3 processes" in out, out


def test_the_lab_lists_and_refuses_slow_paths():
    from bandwidth.netlab.lab import NetlabError, plan_lab
    planned = plan_lab("bwz", SUBNET, 3, 10**8, {}, paths={"1-3": 4 * 10**7})
    assert planned.paths == ((1, 3, 4 * 10**7),)
    for bad in ("1-1", "1-9", "13", "0-2"):
        with pytest.raises(NetlabError, match="--slow-path"):
            plan_lab("bwz", SUBNET, 3, 10**8, {}, paths={bad: 10**7})
