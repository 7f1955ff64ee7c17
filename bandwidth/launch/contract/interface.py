"""Which local address and interface a process of a distributed job uses: the one it reaches the
rendezvous from.

    from bandwidth.launch.contract.interface import towards_rendezvous
    choice = towards_rendezvous("198.18.19.254", 29500, host="198.18.19.2")
    choice.address, choice.interface        # ("198.18.19.2", "bwi19v2")

Gloo (and NCCL's bootstrap) pick their own address from the host's name unless told: on Debian,
Ubuntu and most containers that name resolves to 127.0.1.1 or 127.0.0.1, so every process
advertises loopback to its peers and the job dies in ``connectFullMesh ... Connection refused,
remote=[127.0.0.1]``. The route the kernel takes to ``MASTER_ADDR`` is the one interface known to
reach the other hosts (they all reach that same address), so every process asks the kernel for
the source address of that route (a UDP ``connect``, which sends nothing), finds the interface that
holds the address, checks with one TCP connection that the rendezvous answers there, and sets
``GLOO_SOCKET_IFNAME`` and ``NCCL_SOCKET_IFNAME`` to that interface unless the user set them (on
the launcher: ``--env GLOO_SOCKET_IFNAME=eth1``). Gloo and NCCL read only the environment, so
``export_choice`` writes the process's own environment, before the process group is made.

A host without a route, or whose connection is refused or times out, fails with
``RendezvousUnreachable``: one line naming the host and the address tried.
"""

from __future__ import annotations

import ipaddress
import socket
import struct
from collections.abc import MutableMapping
from dataclasses import dataclass
from pathlib import Path

from bandwidth.errors import BandwidthError

IFNAME_VARIABLES = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")
_SIOCGIFADDR = 0x8915


class RendezvousUnreachable(BandwidthError):
    """This host cannot reach the launcher's rendezvous."""


@dataclass(frozen=True)
class Choice:
    """The local side of the route to the rendezvous."""

    address: str          # this host's source address towards MASTER_ADDR
    interface: str | None  # the interface holding it (None: not found; Gloo then guesses)


def towards_rendezvous(master_addr: str, master_port: int, *, host: str,
                       probe_timeout_s: float = 10.0) -> Choice:
    """The address and interface this host reaches ``master_addr:master_port`` from; raises
    RendezvousUnreachable (naming ``host`` and the address) when it cannot."""
    where = f"{master_addr}:{master_port}"
    try:
        infos = socket.getaddrinfo(master_addr, master_port, type=socket.SOCK_STREAM)
    except socket.gaierror as err:
        raise RendezvousUnreachable(f"{host}: cannot resolve the rendezvous address "
                                    f"{master_addr} ({err.strerror})") from None
    family, _, _, _, target = infos[0]
    try:
        with socket.socket(family, socket.SOCK_DGRAM) as udp:
            udp.connect(target)              # picks the route and source address; sends nothing
            address = udp.getsockname()[0]
    except OSError as err:
        raise RendezvousUnreachable(f"{host}: cannot reach the rendezvous at {where} "
                                    f"({err.strerror or err}; no route from this host)") from None
    try:
        with socket.create_connection(target[:2], timeout=probe_timeout_s,
                                      source_address=(address, 0)):
            pass
    except OSError as err:
        reason = "timed out" if isinstance(err, TimeoutError) else (err.strerror or str(err))
        raise RendezvousUnreachable(f"{host}: cannot reach the rendezvous at {where} from "
                                    f"{address} ({reason})") from None
    return Choice(address, interface_of(address))


def interface_of(address: str) -> str | None:
    """The name of the local interface that holds ``address`` (None when none does)."""
    ip = ipaddress.ip_address(address.split("%")[0])
    if ip.version == 6:
        return _interface_of_v6(ip)
    for _, name in socket.if_nameindex():
        if _ipv4_of(name) == str(ip):
            return name
    return None


def _ipv4_of(name: str) -> str | None:
    import fcntl

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            packed = fcntl.ioctl(sock.fileno(), _SIOCGIFADDR,
                                 struct.pack("256s", name.encode()[:15]))
        except OSError:
            return None                       # no IPv4 address on this interface
    return socket.inet_ntoa(packed[20:24])


def _interface_of_v6(ip: ipaddress.IPv6Address) -> str | None:
    try:
        lines = Path("/proc/net/if_inet6").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        fields = line.split()
        if len(fields) >= 6 and ipaddress.IPv6Address(int(fields[0], 16)) == ip:
            return fields[5]
    return None


def export_choice(choice: Choice, environ: MutableMapping[str, str]) -> dict[str, str]:
    """Set GLOO_SOCKET_IFNAME and NCCL_SOCKET_IFNAME in ``environ`` to the chosen interface where
    the user has not set them; returns what was set."""
    if choice.interface is None:
        return {}
    chosen = {name: choice.interface for name in IFNAME_VARIABLES if not environ.get(name)}
    environ.update(chosen)
    return chosen
