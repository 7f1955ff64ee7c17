"""The link bound of a distributed step (bandwidth/links/linkbound.py, docs/formulas.md)."""

import pytest

from bandwidth.links.linkbound import link_bound, parse_rate, ps_host_bytes, ring_host_bytes
from bandwidth.errors import ConfigError


def test_parse_rate():
    assert parse_rate("1gbit") == 10**9
    assert parse_rate("2.5gbit") == 2_500_000_000
    assert parse_rate("500mbit") == 500 * 10**6
    assert parse_rate("10G") == 10**10
    assert parse_rate("1Gbit/s") == 10**9
    for bad in ("", "fast", "-1gbit", "0"):
        with pytest.raises(ConfigError):
            parse_rate(bad)


def test_two_workers_two_servers_on_four_hosts():
    traffic = ps_host_bytes(["a", "b"], ["c", "d"], [40.0, 60.0])
    assert traffic == {"a": (100.0, 100.0), "b": (100.0, 100.0), "c": (80.0, 80.0),
                       "d": (120.0, 120.0)}
    bound = link_bound(traffic, 8, step_seconds=240.0)       # 8 bit/s: 1 byte per second
    assert (bound.host, bound.seconds, bound.pct) == ("d", 120.0, 50.0)


def test_same_host_transfers_cross_no_link():
    # worker and server 0 on a, worker and server 1 on b: each worker crosses only to the other
    traffic = ps_host_bytes(["a", "b"], ["a", "b"], [50.0, 50.0])
    assert traffic == {"a": (100.0, 100.0), "b": (100.0, 100.0)}
    assert link_bound(ps_host_bytes(["a"], ["a"], [10.0]), 8) is None


def test_ring():
    assert ring_host_bytes(["a", "b", "c"], 30.0) == {h: (40.0, 40.0) for h in "abc"}
    # two ranks per host, adjacent: one edge leaves each host
    assert ring_host_bytes(["a", "a", "b", "b"], 40.0) == {"a": (60.0, 60.0), "b": (60.0, 60.0)}
