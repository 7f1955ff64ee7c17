"""Hosts files and the placement rule."""

import pytest
from launch_support import launch

from bandwidth.errors import ConfigError
from bandwidth.launch.planning.hostfile import Host, HostfileError, parse_hostfile
from bandwidth.launch.planning.plan import deal, local_ranks, slot_counts


def write(tmp_path, text):
    path = tmp_path / "hosts"
    path.write_text(text)
    return path


def test_hosts_ports_slots_comments_and_blank_lines(tmp_path):
    path = write(tmp_path, "# cluster\n\nnode1\nnode2:2222   # ssh port\n  node3 slots=4\n"
                           "[fe80::1]:22 slots=2\n10.0.0.5:22 slots=1\n")
    assert parse_hostfile(path) == [Host("node1"), Host("node2", 2222), Host("node3", None, 4),
                                    Host("fe80::1", 22, 2), Host("10.0.0.5", 22, 1)]


@pytest.mark.parametrize("line, why", [
    ("node1 slots=x", "malformed line"),
    ("node1:22:33", "malformed line"),
    ("-oProxyCommand=evil", "malformed line"),
    ("node1 max_slots=2", "malformed line"),
    ("user@node1", "malformed line"),
    ("node1:70000", "port 70000 is not in 1..65535"),
    ("node1 slots=0", "slots=0 places nothing"),
])
def test_a_malformed_line_is_named_with_file_line_and_text(tmp_path, line, why):
    path = write(tmp_path, f"# hosts\nnode0\n{line}\n")
    with pytest.raises(HostfileError) as err:
        parse_hostfile(path)
    assert str(err.value).startswith(f"{path}:3:") and why in str(err.value)
    assert repr(line) in str(err.value)


def test_a_host_listed_twice_and_an_empty_file_are_errors(tmp_path):
    with pytest.raises(HostfileError, match="already listed on line 1"):
        parse_hostfile(write(tmp_path, "a\nb\na\n"))
    with pytest.raises(HostfileError, match="no hosts"):
        parse_hostfile(write(tmp_path, "# nothing\n\n"))


def test_the_cli_reports_a_malformed_hosts_file_in_one_line_with_status_2(tmp_path):
    path = write(tmp_path, "node1\nnode2 slots=two\n")
    result = launch("-H", str(path), "-n", "2", "true")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"launch.py: error: {path}:2: malformed line 'node2 slots=two': expected "
        "'host[:port] [slots=N]' (IPv6 as '[addr]:port')"]


def test_the_shipped_example_parses():
    from launch_support import ROOT

    hosts = parse_hostfile(ROOT / "hosts.example")
    assert hosts == [Host("node1"), Host("node2", 2222, 1), Host("gpu-box", None, 8)]
    # the placement its comment describes for -n 4 -s 2
    assert [h.name for h in deal(hosts, 6)] == ["node1", "node2", "gpu-box", "node1", "gpu-box",
                                                "node1"]


def test_placement_deals_round_robin_and_skips_full_hosts():
    a, b, c = Host("a", slots=1), Host("b"), Host("c")
    assert deal([a, b, c], 5) == [a, b, c, b, c]     # -n 3 -s 2: servers on b and c
    placed = deal([Host("x"), Host("y")], 4)
    assert [h.name for h in placed] == ["x", "y", "x", "y"]
    assert local_ranks(placed) == [(0, 2), (0, 2), (1, 2), (1, 2)]
    assert slot_counts(deal([a, b, c], 5)) == [(a, 1), (b, 2), (c, 2)]


def test_more_processes_than_slots_is_an_error():
    with pytest.raises(ConfigError, match="5 processes do not fit in the hosts file's 3 slots"):
        deal([Host("a", slots=1), Host("b", slots=2)], 5)
