"""The lab's network: namespaces as hosts, a veth from each to one bridge, ``tc tbf`` shaping.

Everything is named from the lab's name ``NAME`` (``bwlab`` by default), so that ``down`` finds it
again after a crash without any record, and two labs of different names never touch each other:

* host ``i`` (1..N): the network namespace ``NAME-hI``, holding the interface ``NAMEvI`` with the
  address ``SUBNET.i`` (interface names differ from host to host, as on real clusters);
* its link: the other end of that veth, ``NAMEpI``, a port of the bridge ``NAMEbr`` in the root
  namespace; the bridge holds the subnet's last usable address, so that a launcher in the root
  namespace reaches every host;
* the shaping: a ``tbf`` qdisc on both ends of each veth at the host's rate, so that the host's
  link carries RATE out and RATE in at once, as a full-duplex Ethernet port does;
* where asked (``--rto-min MS``), each host's route to the subnet carries ``rto_min`` (TCP's
  least retransmission timeout, 200 ms by default), as datacenter hosts tune it against incast;
* the files: ``/run/bandwidth-netlab/NAME/`` (keys, ssh and sshd configurations, the hosts file,
  ``lab.json``, logs).

Only 198.18.0.0/15 (RFC 2544's benchmarking range) is accepted for the subnet. Every ``ip``/``tc``
failure is one NetlabError line that names the command.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import json
import os
import re
import shutil
import signal
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from bandwidth.errors import BandwidthError


STATE_ROOT = Path("/run/bandwidth-netlab")
BENCHMARK_RANGE = ipaddress.ip_network("198.18.0.0/15")
DEFAULT_NAME = "bwlab"
DEFAULT_SUBNET = "198.18.0.0/24"
TBF_LATENCY_MS = 10                 # queueing a tbf allows before it drops
# TCP Small Queues' per-socket limit inside every host (net.ipv4.tcp_limit_output_bytes, per
# namespace; this kernel's default is 4 MiB). tbf's queue is one FIFO (fq and fq_codel, which keep
# a real host's NIC queue short and fair, are missing from our kernel), so with a socket allowed
# MiBs in it a host's ACKs waited behind its own outgoing data and the other direction of the
# duplex link starved: iperf3 --bidir between two lab hosts at 1 Gbit/s, 962 and 217 Mbit/s; with
# 128 KiB, 954 and 954. A shallower tbf instead (2 ms) dropped packets and cost 200 ms
# retransmission timeouts. Measured effect on dist_sync 2 x 2 resnet-50: BENCHMARKS.md, 2026-11-23.
TSQ_BYTES = 128 * 1024
_NAME = re.compile(r"^[a-z][a-z0-9]{0,7}$")


class NetlabError(BandwidthError):
    """The lab cannot be made, found or removed; the message says why and what to do."""


def format_rate(bits_per_s: int | None) -> str:
    if bits_per_s is None:
        return "unshaped"
    for unit, scale in (("Gbit/s", 1e9), ("Mbit/s", 1e6), ("kbit/s", 1e3)):
        if bits_per_s >= scale:
            return f"{bits_per_s / scale:g} {unit}"
    return f"{bits_per_s} bit/s"


@dataclass(frozen=True)
class Host:
    index: int                       # 1..N
    namespace: str
    interface: str                   # inside the namespace
    port: str                        # the bridge's end, in the root namespace
    address: str
    rate_bits: int | None            # None: unshaped


@dataclass(frozen=True)
class Lab:
    name: str
    subnet: str
    prefixlen: int
    bridge: str
    bridge_address: str
    hosts: tuple[Host, ...]
    sshd_pids: dict = field(default_factory=dict)   # host index (str) -> pid
    rto_min_ms: int | None = None                   # every host's route's rto_min (None: 200)
    paths: tuple = ()           # (from index, to index, bits/s): one direction between two hosts

    @property
    def state_dir(self) -> Path:
        return STATE_ROOT / self.name

    def host(self, key: str | int) -> Host:
        """A host by index (1..N), address, or namespace name."""
        for host in self.hosts:
            if str(key) in (str(host.index), host.address, host.namespace):
                return host
        raise NetlabError(f"no host {key!r} in lab {self.name} (hosts: "
                          f"{', '.join(h.address for h in self.hosts)})")

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1)

    @classmethod
    def load(cls, name: str) -> "Lab":
        path = STATE_ROOT / name / "lab.json"
        try:
            doc = json.loads(path.read_text())
        except OSError:
            raise NetlabError(f"no lab {name!r} is up (no {path}); start one with: python -m "
                              f"bandwidth.netlab up --name {name} --hosts N --rate RATE") from None
        doc["hosts"] = tuple(Host(**h) for h in doc["hosts"])
        doc["paths"] = tuple(tuple(p) for p in doc.get("paths", ()))
        return cls(**doc)


def plan_lab(name: str, subnet: str, count: int, rate_bits: int | None,
             rates_of: dict[str, int], rto_min_ms: int | None = None,
             paths: dict[str, int] | None = None) -> Lab:
    """The lab's names and addresses, checked; nothing is made. ``paths``: "FROM-TO" (indices or
    addresses) -> bits/s, one direction of the path between two hosts slowed."""
    if rto_min_ms is not None and not 1 <= rto_min_ms <= 200:
        raise NetlabError(f"--rto-min {rto_min_ms}: between 1 and 200 ms (200 is TCP's default)")
    if not _NAME.match(name):
        raise NetlabError(f"--name {name!r}: 1 to 8 lower-case letters and digits, starting with a "
                          "letter (interface names are limited to 15 characters)")
    try:
        net = ipaddress.ip_network(subnet)
    except ValueError as err:
        raise NetlabError(f"--subnet {subnet!r}: {err}") from None
    if net.version != 4 or not net.subnet_of(BENCHMARK_RANGE):
        raise NetlabError(f"--subnet {subnet}: the lab uses only 198.18.0.0/15, the range set "
                          "aside for benchmarking (RFC 2544), e.g. 198.18.7.0/24")
    usable = net.num_addresses - 3                  # network, bridge, broadcast
    if not 1 <= count <= min(usable, 99):
        raise NetlabError(f"--hosts {count}: between 1 and {min(usable, 99)} in {subnet}")
    hosts = []
    for i in range(1, count + 1):
        address = str(net.network_address + i)
        rate = rate_bits
        for key, value in rates_of.items():
            if key in (str(i), address):
                rate = value
        hosts.append(Host(i, f"{name}-h{i}", f"{name}v{i}", f"{name}p{i}", address, rate))
    unknown = [k for k in rates_of if k not in {str(h.index) for h in hosts}
               | {h.address for h in hosts}]
    if unknown:
        raise NetlabError(f"--rate-of {unknown[0]}=...: no such host (hosts: 1..{count} or "
                          f"{hosts[0].address}..{hosts[-1].address})")
    slow_paths = []
    by_key = {k: h for h in hosts for k in (str(h.index), h.address)}
    for key, bits in (paths or {}).items():
        src, sep, dst = key.partition("-")
        if not sep or src not in by_key or dst not in by_key or by_key[src] is by_key[dst]:
            raise NetlabError(f"--slow-path {key}=...: expected FROM-TO, two different hosts "
                              f"(1..{count} or their addresses), e.g. 1-2=50mbit")
        slow_paths.append((by_key[src].index, by_key[dst].index, bits))
    return Lab(name, str(net), net.prefixlen, f"{name}br", str(net.broadcast_address - 1),
               tuple(hosts), rto_min_ms=rto_min_ms, paths=tuple(slow_paths))


def missing_prerequisites() -> list[str]:
    """What this machine lacks to make a lab (empty: nothing)."""
    missing = []
    if os.geteuid() != 0:
        missing.append("root (network namespaces and tc need it: run with sudo)")
    for program in ("ip", "tc", "ssh", "ssh-keygen"):
        if shutil.which(program) is None:
            missing.append(f"{program} (apt-get install "
                           f"{'iproute2' if program in ('ip', 'tc') else 'openssh-client'})")
    if sshd_path() is None:
        missing.append("sshd (apt-get install openssh-server)")
    return missing


def sshd_path() -> str | None:
    found = shutil.which("sshd") or "/usr/sbin/sshd"
    return found if Path(found).exists() else None


def sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    """Run one ``ip``/``tc`` command; a failure is one NetlabError line naming it."""
    proc = subprocess.run(argv, capture_output=True, text=True)
    if check and proc.returncode != 0:
        message = (proc.stderr or proc.stdout).strip().splitlines()
        raise NetlabError(f"`{' '.join(argv)}` failed: {message[-1] if message else proc.returncode}")
    return proc


def inbound_drops(lab: Lab) -> dict[str, int]:
    """Packets the bridge's port toward each host (its address) has dropped so far: what the
    host's link lost on the way in (its tbf's queue full), which the host's own counters
    (bandwidth.hardware.linkcounters) cannot see, as a real host cannot see its switch's."""
    drops = {}
    for host in lab.hosts:
        proc = sh("tc", "-s", "qdisc", "show", "dev", host.port, check=False)
        drops[host.address] = sum(int(n) for n in re.findall(r"dropped (\d+)", proc.stdout))
    return drops


def shape(device: str, rate_bits: int | None, namespace: str | None = None) -> None:
    """A tbf on ``device``'s egress at ``rate_bits`` (None: none). The bucket holds at least a
    64 KiB GSO packet (tbf would split bigger ones) and 1 ms at the rate."""
    if rate_bits is None:
        return
    burst = max(128 * 1024, rate_bits // 8 // 1000)
    where = ["ip", "netns", "exec", namespace] if namespace else []
    proc = sh(*where, "tc", "qdisc", "replace", "dev", device, "root", "tbf", "rate",
              f"{rate_bits}bit", "burst", str(burst), "latency", f"{TBF_LATENCY_MS}ms",
              check=False)
    if proc.returncode != 0:
        raise NetlabError(f"cannot shape {device} with tc tbf ({proc.stderr.strip()}): this kernel "
                          "may lack sch_tbf (modprobe sch_tbf); the lab shapes with tbf only "
                          "(netem, for delay and loss, is not used)")


def make_network(lab: Lab) -> None:
    """The bridge, the namespaces, their links and shaping."""
    sh("ip", "link", "add", lab.bridge, "type", "bridge")
    sh("ip", "addr", "add", f"{lab.bridge_address}/{lab.prefixlen}", "dev", lab.bridge)
    sh("ip", "link", "set", lab.bridge, "up")
    for host in lab.hosts:
        sh("ip", "netns", "add", host.namespace)
        sh("ip", "link", "add", host.interface, "type", "veth", "peer", "name", host.port)
        sh("ip", "link", "set", host.interface, "netns", host.namespace)
        sh("ip", "link", "set", host.port, "master", lab.bridge, "up")
        sh("ip", "-n", host.namespace, "addr", "add", f"{host.address}/{lab.prefixlen}", "dev",
           host.interface)
        sh("ip", "-n", host.namespace, "link", "set", host.interface, "up")
        sh("ip", "-n", host.namespace, "link", "set", "lo", "up")
        if lab.rto_min_ms is not None:
            sh("ip", "-n", host.namespace, "route", "replace", lab.subnet, "dev", host.interface,
               "proto", "kernel", "scope", "link", "src", host.address, "rto_min",
               f"{lab.rto_min_ms}ms")
        sh("ip", "netns", "exec", host.namespace, "sh", "-c",
           f"echo {TSQ_BYTES} > /proc/sys/net/ipv4/tcp_limit_output_bytes", check=False)
        shape(host.interface, host.rate_bits, host.namespace)     # what the host sends
        shape(host.port, host.rate_bits)                          # what it receives
    for src in {path[0] for path in lab.paths}:
        shape_paths(lab, lab.host(src))


# An unshaped host's link, where one of its paths is slowed: htb needs a rate for the whole link.
UNSHAPED_BITS = 100 * 10**9


def shape_paths(lab: Lab, host: Host) -> None:
    """What ``host`` sends to the hosts of its slow paths at their rates, the rest at the host's
    own: an htb on its interface (in place of its tbf), one class per slow path under one for the
    whole link, a u32 filter on the destination address choosing the class."""
    link = host.rate_bits or UNSHAPED_BITS
    slow = [(lab.host(dst), bits) for src, dst, bits in lab.paths if src == host.index]
    tc = ["ip", "netns", "exec", host.namespace, "tc"]
    dev = ["dev", host.interface]
    sh(*tc, "qdisc", "del", *dev, "root", check=False)
    proc = sh(*tc, "qdisc", "add", *dev, "root", "handle", "1:", "htb", "default", "10",
              check=False)
    if proc.returncode != 0:
        raise NetlabError(f"cannot slow a path with tc htb ({proc.stderr.strip()}): this kernel "
                          "may lack sch_htb (modprobe sch_htb)")
    sh(*tc, "class", "add", *dev, "parent", "1:", "classid", "1:1", "htb", "rate", f"{link}bit",
       "ceil", f"{link}bit")
    rest = max(link - sum(bits for _, bits in slow), link // 100)
    sh(*tc, "class", "add", *dev, "parent", "1:1", "classid", "1:10", "htb", "rate",
       f"{rest}bit", "ceil", f"{link}bit")
    for k, (dst, bits) in enumerate(slow, start=20):
        sh(*tc, "class", "add", *dev, "parent", "1:1", "classid", f"1:{k}", "htb", "rate",
           f"{bits}bit", "ceil", f"{bits}bit")
        sh(*tc, "filter", "add", *dev, "parent", "1:", "protocol", "ip", "prio", "1", "u32",
           "match", "ip", "dst", f"{dst.address}/32", "flowid", f"1:{k}")


def namespaces_of(name: str) -> list[str]:
    """The namespaces of lab ``name`` that exist now (found by name, not from any record)."""
    proc = sh("ip", "netns", "list", check=False)
    found = [line.split()[0] for line in proc.stdout.splitlines() if line.strip()]
    return [ns for ns in found if re.fullmatch(rf"{re.escape(name)}-h\d+", ns)]


def pids_in(namespace: str) -> list[int]:
    proc = sh("ip", "netns", "pids", namespace, check=False)
    return [int(p) for p in proc.stdout.split() if p.isdigit()]


def stop_processes(namespaces: list[str], grace_s: float = 3.0) -> int:
    """SIGTERM, then SIGKILL, every process in ``namespaces``; returns how many there were."""
    pids = [pid for ns in namespaces for pid in pids_in(ns)]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and any(Path(f"/proc/{p}").exists() for p in pids):
            time.sleep(0.05)
        pids = [p for p in pids if alive(p)]
        if not pids:
            break
    return len(pids)


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def remove(name: str) -> list[str]:
    """Remove everything of lab ``name`` that exists, whatever state it was left in; returns
    what was removed."""
    removed = []
    namespaces = namespaces_of(name)
    stop_processes(namespaces)
    for ns in namespaces:
        sh("ip", "netns", "del", ns, check=False)
        removed.append(f"namespace {ns}")
    links = sh("ip", "-o", "link", "show", check=False).stdout
    for line in links.splitlines():
        parts = line.split(":")
        if len(parts) > 1:
            link = parts[1].strip().split("@")[0]
            if re.fullmatch(rf"{re.escape(name)}(br|p\d+|v\d+)", link):
                sh("ip", "link", "del", link, check=False)
                removed.append(f"link {link}")
    state = STATE_ROOT / name
    if state.exists():
        shutil.rmtree(state, ignore_errors=True)
        removed.append(f"files {state}")
    return removed


def reshape(lab: Lab, rate_bits: int) -> Lab:
    """Every host's link (both ends) to ``rate_bits``, in place (``tc qdisc replace``)."""
    hosts = []
    for host in lab.hosts:
        shape(host.interface, rate_bits, host.namespace)
        shape(host.port, rate_bits)
        hosts.append(dataclasses.replace(host, rate_bits=rate_bits))
    changed = dataclasses.replace(lab, hosts=tuple(hosts))
    for src in {path[0] for path in changed.paths}:
        shape_paths(changed, changed.host(src))
    (lab.state_dir / "lab.json").write_text(changed.to_json())
    return changed
