"""Placement policies and what they put on each host's link
(bandwidth/launch/planning/placement.py), pure functions checked against values worked out by
hand."""

import pytest

from bandwidth.errors import ConfigError
from bandwidth.launch.planning.hostfile import Host
from bandwidth.launch.planning.placement import (better_placement, busiest, imbalance, parse_policy,
                                                 place, server_host_count)
from bandwidth.links.linkbound import host_bytes

HOSTS = [Host(f"h{i}") for i in range(4)]


def names(placed):
    return [h.name for h in placed]


def test_round_robin_deals_workers_then_servers_in_turn():
    assert names(place(HOSTS, 4, 2)) == ["h0", "h1", "h2", "h3", "h0", "h1"]


def test_servers_apart_gives_servers_hosts_of_their_own():
    placed = names(place(HOSTS, 6, 2, "servers-apart"))
    assert server_host_count(4, 6, 2) == 1
    assert placed[:6] == ["h0", "h1", "h2", "h0", "h1", "h2"] and placed[6:] == ["h3", "h3"]
    assert server_host_count(25, 50, 5) == 2 and server_host_count(2, 1, 9) == 1


def test_count_fills_each_host_and_refuses_beyond_its_slots():
    assert names(place(HOSTS, 5, 1, "count:2")) == ["h0", "h0", "h1", "h1", "h2", "h2"]
    with pytest.raises(ConfigError, match="slots=1"):
        place([Host("a", slots=1), Host("b")], 2, 0, "count:2")
    with pytest.raises(ConfigError, match="do not fit"):
        place(HOSTS[:1], 3, 0, "count:2")
    for bad in ("count:0", "count:x", "ring"):
        with pytest.raises(ConfigError, match="round-robin, servers-apart or count:N"):
            parse_policy(bad)


def test_host_bytes_count_every_process_on_a_host():
    # 2 workers on a, servers of 10 and 30 bytes on a and b: a's workers send b's share each;
    # a's server hears from no remote worker. b's server receives 30 from each of 2 workers.
    traffic = host_bytes(["a", "a", "a", "b"], 2, [10, 30])
    assert traffic == {"a": (60.0, 60.0), "b": (60.0, 60.0)}
    traffic = host_bytes(["a", "b", "c", "c"], 2, [10, 30])
    assert traffic["a"] == (40.0, 40.0) and traffic["c"] == (80.0, 80.0)
    assert busiest(traffic) == ("c", 80.0, 80.0)
    assert imbalance([10, 30]) == 1.5 and imbalance([]) == 1.0


def test_better_placement_moves_servers_off_the_workers_hosts():
    hosts = [Host(f"h{i}") for i in range(6)]
    shares = [1e6] * 2
    found = better_placement(hosts, 8, 2, shares)
    assert found is not None
    policy, nbytes = found
    current = busiest(host_bytes(place(hosts, 8, 2), 8, shares))
    assert nbytes < max(current[1:])
    assert better_placement(hosts, 8, 2, shares, current=policy) is None


def test_the_launcher_places_its_processes_by_the_policy():
    from bandwidth.launch.planning.config import LaunchConfig
    from bandwidth.launch.contract.environment import Job
    from bandwidth.launch.planning.plan import make_plan

    for policy, expected, local in [
            ("round-robin", ["h0", "h1", "h2", "h3", "h0", "h1"], [0, 0, 0, 0, 1, 1]),
            ("servers-apart", ["h0", "h1", "h2", "h0", "h3", "h3"], [0, 0, 0, 1, 0, 1])]:
        config = LaunchConfig(command=("prog",), num_workers=4, num_servers=2,
                              hosts=tuple(HOSTS), placement=policy)
        job = Job(4, 2, "10.0.0.1", 29500, 29500, "ssh", "f" * 32)
        plan = make_plan(config, job, HOSTS, place_scheduler=False, environ={})
        assert [role.node_host for role in plan.roles] == expected == names(plan.hosts)
        assert [role.local_rank for role in plan.roles] == local
