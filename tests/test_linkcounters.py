"""A host's link counters (bandwidth.hardware.linkcounters: bytes, drops, retransmissions and
timeouts per step, the cores' busy share during the timed steps) and the summary's lines about a
run's hosts (bandwidth.hardware.linksummary)."""

import pytest


def test_link_counters_per_step_and_the_summary_line():
    from bandwidth.hardware.linkcounters import difference, snapshot
    from bandwidth.hardware.linksummary import summary_line

    def snap(tx, rx, drops, out, retrans):
        return {"interfaces": {"eth0": {"rx_bytes": rx, "tx_bytes": tx, "rx_dropped": 0,
                                        "tx_dropped": 0}},
                "tcp": {"out_segs": out, "retrans_segs": retrans}, "qdisc_drops": {"eth0": drops}}

    server = difference(snap(0, 0, 0, 0, 0), snap(400, 800, 2160, 1000, 0), steps=2)
    assert server == {"bytes_out": 200, "bytes_in": 400, "drops": 1080, "out_segs": 500,
                      "retrans_segs": 0, "steps": 2}
    worker = difference(snap(0, 0, 0, 0, 0), snap(10, 10, 0, 1000, 62), steps=2)
    line = summary_line({"h3": server, "h5": worker},
                        {"h3": ["server 0"], "h5": ["worker 4"]})
    assert line == ("#   link counters: 1,080 drops per step at h3 (server 0); h5 "
                    "(worker 4) retransmits 6.2 % of its segments (31 per step)")
    assert summary_line({"h1": difference(snap(0, 0, 0, 0, 0), snap(5, 5, 0, 10, 0), 1)},
                        {}) is None
    # a lab of 25 hosts: one clause per finding, the hosts as a span, the figures as a range
    lab, roles = {}, {}
    for i in range(1, 26):
        host = f"198.18.126.{i}"
        roles[host] = [f"worker {i - 1}"] + ([f"server {i - 1}"] if i <= 5 else [])
        if i <= 5:
            lab[host] = difference(snap(0, 0, 0, 0, 0), snap(9, 9, 1000 + 100 * i, 100, 2), 1)
        else:
            lab[host] = difference(snap(0, 0, 0, 0, 0), snap(9, 9, 0, 1000, 90 + i), 1)
    assert summary_line(lab, roles) == (
        "#   link counters: 1,100-1,500 drops per step at each of 5 server hosts "
        "(198.18.126.1-5); 5 server hosts (198.18.126.1-5) retransmit 2.0 % of their segments; "
        "20 worker-only hosts (198.18.126.6-25) retransmit 9.6-11.5 % of their segments")
    some = {h: c for i, (h, c) in enumerate(lab.items()) if i not in (7, 9, 10)}
    assert "20 worker-only hosts" not in summary_line(some, roles)
    assert ("17 worker-only hosts (198.18.126.6-7, 198.18.126.9, 198.18.126.12-25) retransmit"
            in summary_line(some, roles))
    few = {h: dict(c, retrans_segs=c["out_segs"] * 3e-4) for h, c in lab.items()}
    assert "retransmit 0.03 % of their segments" in summary_line(few, roles)
    # Retransmission timeouts (TcpExt TCPTimeouts), each at least the route's rto_min
    def timed_out(n, rto_min=None):
        tcp = {"out_segs": 0, "retrans_segs": 0, "timeouts": 0}
        after = dict(tcp, timeouts=n, **({"rto_min_ms": rto_min} if rto_min else {}))
        return difference({**snap(0, 0, 0, 0, 0), "tcp": tcp},
                          {**snap(0, 0, 0, 0, 0), "tcp": after}, 3)
    assert timed_out(12) == {"bytes_out": 0, "bytes_in": 0, "drops": 0, "out_segs": 0,
                             "retrans_segs": 0, "timeouts": 4, "rto_min_ms": 200, "steps": 3}
    stalled = {h: dict(c, **timed_out(3 * (i + 1), 20 if i else 200))
               for i, (h, c) in enumerate(lab.items()) if i < 5}
    assert summary_line(stalled, roles) == (
        "#   link counters: 5 server hosts (198.18.126.1-5) waited out 1.0-5.0 retransmission "
        "timeouts per step (20-200 ms or more each)")
    assert summary_line({"h3": timed_out(36)}, {"h3": ["server 0"]}) == (
        "#   link counters: h3 (server 0) waited out 12 retransmission timeouts per step (200 ms "
        "or more each)")
    real = snapshot()                       # this host's own: readable, never negative
    assert difference(real, snapshot(), 1)["bytes_out"] >= 0


def test_busy_cores_are_named_once_per_machine():
    """/proc/stat's busy share over the window, per machine (boot id): 25 lab hosts on one
    machine are one line; a machine below CPU_BUSY is not named."""
    from bandwidth.hardware.linkcounters import difference
    from bandwidth.hardware.linksummary import cores_line

    def snap(busy, total, machine):
        return {"interfaces": {}, "tcp": {}, "qdisc_drops": {},
                "cpu": {"busy": busy, "total": total, "cores": 2, "machine": machine}}

    lab = {f"h{i}": difference(snap(100, 1000, "m1"), snap(1090, 2000, "m1"), 1)
           for i in range(1, 26)}
    assert lab["h7"]["cpu_busy"] == pytest.approx(0.99) and lab["h7"]["machine"] == "m1"
    assert cores_line(lab) == ("#   cores: 99 % busy during the steps on the machine of h1-h25 "
                               "(2 cores, shared by 25 hosts): the cores, not the links, bound "
                               "these steps")
    apart = {"a": difference(snap(0, 100, "m1"), snap(95, 200, "m1"), 1),
             "b": difference(snap(0, 100, "m2"), snap(50, 200, "m2"), 1)}
    assert cores_line(apart) == ("#   cores: 95 % busy during the steps on the machine of a "
                                 "(2 cores): the cores, not the links, bound these steps")
    assert cores_line({"b": apart["b"]}) is None
    # links at their bound as well: the line says both
    assert cores_line(lab, link_pct=92.4).endswith(
        "(2 cores, shared by 25 hosts), and the links carried 92 % of their bound: both were at "
        "their limit")
    assert cores_line(lab, link_pct=42.3).endswith("the cores, not the links, bound these steps")
    addresses = {f"198.18.126.{i}": lab["h1"] for i in range(1, 26)}    # a lab's host names
    assert "on the machine of 198.18.126.1-25 (2 cores, shared by 25 hosts)" in \
        cores_line(addresses)
    # The CPU time inside timed steps, where the process timed any, is the figure (the rest of
    # the window is untimed refills and checks); a machine's is taken from such hosts.
    steps = dict(snap(1090, 2000, "m1"), cpu_steps={"busy": 60, "total": 200, "count": 3})
    timed = difference(snap(100, 1000, "m1"), steps, 1)
    assert timed["cpu_busy"] == pytest.approx(0.3) and timed["cpu_window"] == "steps"
    assert lab["h7"]["cpu_window"] == "run"
    assert cores_line({"h1": timed, **{h: lab[h] for h in ("h2", "h3")}}) is None


def test_congested_server_links_are_named_where_no_cores_were_busy():
    from bandwidth.hardware.linksummary import cores_line

    # Cores not busy, the run short of its bound and drops at the server hosts: their congested
    # links are named as what held the steps; not where the links were full or no server host
    # dropped.
    def host(drops, busy):
        return {"drops": drops, "cpu_busy": busy, "cpu_window": "steps", "cores": 2,
                "machine": "m1"}
    held = {"h1": host(1200, 0.61), "h2": host(900, 0.55), "h3": host(0, 0.58)}
    roles = {"h1": ["worker 0", "server 0"], "h2": ["server 1"], "h3": ["worker 1"]}
    assert cores_line(held, 41.7, roles) == (
        "#   bound: the links carried 42 % of their bound, with the cores at most 61 % busy "
        "during the steps: the 2 server hosts' links (h1-h2), congested (their drops above; what "
        "they lose on the way in shows as the senders' retransmissions), not the cores, held "
        "the steps")
    one = {h: held[h] for h in ("h1", "h3")}
    assert ": the server host's link (h1), congested (its drops above; what it loses" in \
        cores_line(one, 41.7, roles)
    # Several workers on other hosts pushing into a server host's link at once: incast, named
    crowd = dict(roles, **{f"h{i}": [f"worker {i - 2}"] for i in range(4, 8)})
    assert (": incast into the 2 server hosts' links (h1-h2), 5-6 workers on other hosts pushing "
            "into each at once, congested (their drops above;") in cores_line(held, 41.7, crowd)
    assert (": incast into the server host's link (h1), 5 workers on other hosts pushing into it "
            "at once, congested (its drops above;") in cores_line(one, 41.7, crowd)
    # servers that took one worker's share after another had one sender at a time: not incast
    assert (": the 2 server hosts' links (h1-h2), taking one worker's share after another (not "
            "incast), congested (their drops above;") in cores_line(held, 41.7, crowd,
                                                              one_at_a_time=True)
    stalls = dict(held, h1=dict(held["h1"], timeouts=4.0, rto_min_ms=200),
                  h3=dict(held["h3"], timeouts=1.5, rto_min_ms=200))
    assert cores_line(stalls, 41.7, roles).endswith(
        "shows as the senders' retransmissions and 5.5 timeouts per step in all (200 ms or more "
        "each)), not the cores, held the steps")
    assert cores_line(held, 91.0, roles) is None
    assert cores_line(held, 41.7, {"h1": ["worker 0"], "h2": ["worker 1"]}) is None
    assert cores_line(held, None, roles) is None


def test_this_machines_cores_and_its_timed_steps_are_counted():
    from bandwidth.hardware.linkcounters import difference, snapshot

    real = snapshot()["cpu"]                # this machine's own
    assert real["total"] >= real["busy"] > 0 and real["cores"] >= 1 and real["machine"]
    # a busy loop of 0.3 s on this machine shows in the difference
    import time
    start, end = snapshot(), time.perf_counter() + 0.3
    while time.perf_counter() < end:
        pass
    assert difference(start, snapshot(), 1)["cpu_busy"] > 0
    # Timed steps (the protocol's step_began and step_ended) are counted from a snapshot on: a
    # busy step keeps at least one of the machine's cores busy.
    from bandwidth.hardware.linkcounters import step_began, step_ended
    start = snapshot()
    for _ in range(3):
        began, end = step_began(), time.perf_counter() + 0.1
        while time.perf_counter() < end:
            pass
        step_ended(began)
    time.sleep(0.2)
    after = snapshot()
    assert after["cpu_steps"]["count"] == 3
    found = difference(start, after, 3)
    assert found["cpu_window"] == "steps"
    assert found["cpu_busy"] >= 0.8 / found["cores"]
    assert "cpu_steps" not in snapshot()    # counted afresh from each snapshot
