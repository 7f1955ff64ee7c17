"""Read a hosts file: which machines the ssh and mpi launchers start processes on.

Format (one host per line; see ``hosts.example`` at the top of the repository)::

    # comments and blank lines are ignored
    node1                 # ssh port from ~/.ssh/config or 22, no slot limit
    node2:2222            # ssh port 2222
    node3 slots=4         # at most 4 processes on node3
    [fe80::1]:22 slots=2  # IPv6 addresses in brackets

``host`` is a host name or address (letters, digits, ``.``, ``-``, ``_``), so a line can never
smuggle an ssh option such as ``-oProxyCommand=...``; user names and aliases belong in
``~/.ssh/config`` or the file given with ``--ssh-config``. A malformed line raises
``HostfileError`` naming ``file:line`` and the text.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from pathlib import Path

from bandwidth.errors import ConfigError

_NAME = r"[A-Za-z0-9_][A-Za-z0-9._-]{0,252}"          # DNS names are at most 253 characters
_LINE = re.compile(rf"^(?:(?P<name>{_NAME})|\[(?P<v6>[0-9A-Fa-f:.]{{2,45}})\])"
                   r"(?::(?P<port>\d{1,5}))?(?:\s+slots=(?P<slots>\d{1,6}))?$")
MAX_FILE_BYTES = 1 << 20


class HostfileError(ConfigError):
    """A hosts file that cannot be read or has a malformed line."""


@dataclass(frozen=True)
class Host:
    """One machine: ``name`` as written (brackets removed), ``port`` the ssh port (None: ssh's
    default), ``slots`` the most processes placed on it (None: no limit)."""

    name: str
    port: int | None = None
    slots: int | None = None

    def __str__(self) -> str:
        return f"[{self.name}]" if ":" in self.name else self.name


LOCALHOST = Host("127.0.0.1")


def parse_hostfile(path: str | Path) -> list[Host]:
    """The hosts of ``path`` in file order; raises HostfileError on the first bad line."""
    from bandwidth.files import check_regular_file

    try:
        check_regular_file(path, "hosts file")          # a FIFO would block the read
    except ConfigError as err:
        raise HostfileError(str(err)) from None
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_FILE_BYTES + 1)
    except OSError as err:
        raise HostfileError(f"cannot read hosts file {path}: {err.strerror}") from None
    if len(data) > MAX_FILE_BYTES:
        raise HostfileError(f"hosts file {path} is larger than {MAX_FILE_BYTES >> 20} MiB; "
                            "expected one short line per host")
    try:
        text = data.decode()
    except UnicodeDecodeError as err:
        raise HostfileError(f"hosts file {path} is not UTF-8 text (byte {err.start}); expected "
                            "lines like 'node1', 'node2:2222 slots=4'") from None
    if "\0" in text:
        raise HostfileError(f"hosts file {path} holds NUL bytes: not a text file")
    hosts: list[Host] = []
    seen: dict[tuple[str, int | None], int] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        host = _parse_line(line, f"{path}:{number}", raw)
        key = (host.name, host.port)
        if key in seen:
            raise HostfileError(f"{path}:{number}: {_shown(raw)}: host already listed on line "
                                f"{seen[key]}; list each host once and give it slots=N")
        seen[key] = number
        hosts.append(host)
    if not hosts:
        raise HostfileError(f"{path}: no hosts (expected lines like 'node1', 'node2:2222 slots=4')")
    return hosts


def _shown(raw: str) -> str:
    """A line as an error message quotes it: repr'd (no control character reaches the
    terminal) and cut to 60 characters."""
    text = raw.strip()
    return repr(text if len(text) <= 60 else text[:60] + "...")


def _parse_line(line: str, where: str, raw: str) -> Host:
    match = _LINE.match(line)
    if match is None:
        raise HostfileError(f"{where}: malformed line {_shown(raw)}: expected 'host[:port] "
                            "[slots=N]' (IPv6 as '[addr]:port')")
    port = None if match["port"] is None else int(match["port"])
    slots = None if match["slots"] is None else int(match["slots"])
    if port is not None and not 0 < port < 65536:
        raise HostfileError(f"{where}: {_shown(raw)}: port {port} is not in 1..65535")
    if slots == 0:
        raise HostfileError(f"{where}: {_shown(raw)}: slots=0 places nothing; remove the line")
    problem = _v6_problem(match["v6"]) if match["v6"] else _name_problem(match["name"])
    if problem:
        raise HostfileError(f"{where}: {_shown(raw)}: {problem}")
    return Host(match["name"] or match["v6"], port, slots)


def _name_problem(name: str) -> str | None:
    """Why ``name`` is no host name or IPv4 address ssh could reach (None: it is one). Checked
    here, so that a name the resolver refuses (a label of 64 characters) or ssh cannot use (a
    trailing dot) is one line before any process starts."""
    if re.fullmatch(r"[0-9.]+", name):
        try:
            ipaddress.IPv4Address(name)
        except ValueError:
            return "not an IPv4 address (four numbers 0..255 separated by dots)"
        return None
    if name.endswith("."):
        return "a host name ending in a dot; write it without the dot"
    for label in name.split("."):
        if not label:
            return "a host name with an empty label (two dots in a row, or a leading dot)"
        if len(label) > 63:
            return (f"the label {label[:20]!r}... has {len(label)} characters; DNS allows at "
                    "most 63 between dots")
        if label.startswith("-") or label.endswith("-"):
            return f"the label {label!r} starts or ends with '-'"
    return None


def _v6_problem(text: str) -> str | None:
    """Why ``[text]`` is no IPv6 address to reach a host by (None: it is one)."""
    try:
        address = ipaddress.IPv6Address(text)
    except ValueError:
        return "not an IPv6 address"
    if address.ipv4_mapped is not None:
        return (f"an IPv4 address written as IPv6; write it as {address.ipv4_mapped} "
                "(without brackets)")
    return None
