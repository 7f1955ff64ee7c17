"""The interface each process of a job uses (bandwidth/launch/contract/interface.py) and the
launcher's once-only explanation of torch's per-connection warnings
(bandwidth/launch/supervision/noise.py). Across real hosts with different interface names:
tests/test_netlab.py."""

import socket

import pytest

from bandwidth.launch.contract.interface import (Choice, RendezvousUnreachable, export_choice,
                                                 interface_of, towards_rendezvous)
from bandwidth.launch.supervision.noise import NoiseFilter


def test_loopback_is_found_on_lo():
    assert interface_of("127.0.0.1") == "lo"
    assert interface_of("198.19.255.254") is None          # no interface holds it


def test_the_route_to_a_listening_rendezvous():
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        assert towards_rendezvous("127.0.0.1", port, host="node1") == Choice("127.0.0.1", "lo")


def test_an_unreachable_rendezvous_is_one_line_naming_host_and_address():
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
    with pytest.raises(RendezvousUnreachable) as err:
        towards_rendezvous("127.0.0.1", port, host="node7")
    message = str(err.value)
    assert message.startswith(f"node7: cannot reach the rendezvous at 127.0.0.1:{port} from "
                              "127.0.0.1 (") and "\n" not in message
    with pytest.raises(RendezvousUnreachable, match="node7: cannot resolve the rendezvous"):
        towards_rendezvous("no-such-host.invalid", port, host="node7")


def test_the_users_choice_is_kept():
    environ = {"GLOO_SOCKET_IFNAME": "ib0"}
    assert export_choice(Choice("10.0.0.2", "eth1"), environ) == {"NCCL_SOCKET_IFNAME": "eth1"}
    assert environ == {"GLOO_SOCKET_IFNAME": "ib0", "NCCL_SOCKET_IFNAME": "eth1"}
    assert export_choice(Choice("10.0.0.2", None), {}) == {}


def test_torchs_reverse_lookup_warning_is_explained_once():
    noise = NoiseFilter()
    line = ("[W1123 20:18:39.13 socket.cpp:207] [c10d] The hostname of the client socket "
            "cannot be retrieved. err=-3")
    assert "harmless" in noise.explain(line)
    assert noise.explain(line) == ""                      # hidden from then on
    assert noise.explain("Traceback (most recent call last):") is None
