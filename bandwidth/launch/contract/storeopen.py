"""Opening a store that no launcher of ours hosts (torchrun's variables,
``bandwidth.launch.contract.torchenv``), with one line for what goes wrong and a deadline for what
never answers.

Rank 0 hosts the store on ``MASTER_PORT`` and the other ranks connect to it. torch's store says
what went wrong on stderr from C++ (a warning and a 20-frame stack per attempt) and, given a
port that another program holds, its client may wait in a read forever whatever its timeout. So
the store is opened here with the process's stderr taken aside (file descriptor 2, which C++
writes to) and on a thread the caller waits for at most ``timeout_s``; on failure the cause is
raised as one ``ContractError`` line, on success what was taken aside is written out again.
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import threading
from datetime import timedelta

from bandwidth.errors import ConfigError

# torch's own words for why a store could not be opened, most telling first.
_CAUSES = (re.compile(r"name: (EADDRINUSE|EADDRNOTAVAIL|EACCES)"),
           re.compile(r"(Connection refused|Connection reset by peer|Name or service not known|"
                      r"No address associated with hostname|timed out|Broken pipe)"))


class StoreOpenError(ConfigError):
    """The job's store could not be opened or reached (one line)."""


def _cause(text: str) -> str:
    for pattern in _CAUSES:
        found = pattern.search(text)
        if found:
            return found.group(1)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:200] if lines else "no reason given"


def open_store(host: str, port: int, hosting: bool, timeout_s: float, who: str):
    """A TCPStore at ``host``:``port`` (``hosting``: this process's server on ``port``, every
    address); StoreOpenError in one line naming ``who`` and the cause."""
    from torch.distributed import TCPStore

    try:
        socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as err:
        raise StoreOpenError(f"{who} cannot resolve MASTER_ADDR {host[:80]} here "
                             f"({getattr(err, 'strerror', None) or err}): give rank 0's "
                             "address, or a name every host resolves") from None
    opened: list = []
    failed: list[str] = []

    def attempt() -> None:
        try:
            opened.append(TCPStore(host, port, is_master=hosting, wait_for_workers=False,
                                   timeout=timedelta(seconds=timeout_s)))
        except Exception as err:     # noqa: BLE001 - torch's store errors have no common base
            failed.append(str(err))

    with _stderr_aside() as aside:
        thread = threading.Thread(target=attempt, daemon=True, name="store-open")
        thread.start()
        thread.join(timeout_s + 5.0)
    said = aside.text()
    if opened:
        if said:
            os.write(2, said.encode())
        return opened[0]
    where = f"MASTER_ADDR:MASTER_PORT {host}:{port}"
    if hosting:
        cause = _cause("\n".join(failed) or said)
        advice = ("the port is taken on this host: choose another MASTER_PORT"
                  if cause == "EADDRINUSE" else "give an address and a free port of rank 0's host")
        raise StoreOpenError(f"{who} cannot host the job's store at {where} ({cause}): {advice}")
    if failed:
        cause = _cause(failed[0] + "\n" + said)
    else:
        cause = f"no answer within {timeout_s:g} s (--timeout)"
    raise StoreOpenError(f"{who} cannot use the job's store at {where} ({cause}): rank 0 hosts "
                         "it there; check that MASTER_PORT is the same for every rank and that "
                         "no other program holds it on rank 0's host")


class _Aside:
    def __init__(self):
        self.chunks: list[bytes] = []

    def text(self) -> str:
        return b"".join(self.chunks).decode(errors="replace")


@contextlib.contextmanager
def _stderr_aside():
    """File descriptor 2 into a pipe for the block (C++ writes there, not to sys.stderr)."""
    aside = _Aside()
    read_end, write_end = os.pipe()
    saved = os.dup(2)

    def drain() -> None:
        for chunk in iter(lambda: os.read(read_end, 65536), b""):
            aside.chunks.append(chunk)

    reader = threading.Thread(target=drain, daemon=True, name="stderr-aside")
    reader.start()
    os.dup2(write_end, 2)
    os.close(write_end)
    try:
        yield aside
    finally:
        os.dup2(saved, 2)            # the pipe's last writer goes: the reader sees its end
        os.close(saved)
        reader.join(timeout=2.0)
        os.close(read_end)
