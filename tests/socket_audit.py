"""Who can reach a job's sockets: every listening socket of a set of processes (from /proc),
whether an address is loopback, and a stranger (a torch TCPStore client of another process, in
this network namespace or a lab host's) trying each of them; ``audit_one_host_job`` puts them
together for a job on this host (tests/test_job_listeners.py, the ps-lite audit)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time

from launch_support import ROOT, descendants

def socket_inodes(pids) -> set[str]:
    """The inodes of every socket the processes ``pids`` hold."""
    inodes = set()
    for pid in pids:
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
        except OSError:
            continue
    return inodes


def listening(inodes: set[str], table_of: int | str = "self") -> list[tuple[str, int]]:
    """(address, port) of every TCP socket in LISTEN (state 0A) among ``inodes``, from the TCP
    tables of the network namespace of process ``table_of``."""
    found = []
    for table, width in ((f"/proc/{table_of}/net/tcp", 8), (f"/proc/{table_of}/net/tcp6", 32)):
        with open(table) as rows:
            next(rows)
            for row in rows:
                fields = row.split()
                if fields[3] != "0A" or fields[9] not in inodes:
                    continue
                address, port = fields[1].split(":")
                found.append((_address(address, width), int(port, 16)))
    return found


def _address(hexed: str, width: int) -> str:
    import ipaddress
    raw = bytes.fromhex(hexed)
    if width == 8:
        return str(ipaddress.IPv4Address(raw[::-1]))
    words = b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4))
    return str(ipaddress.IPv6Address(words))


def is_loopback(address: str) -> bool:
    import ipaddress
    ip = ipaddress.ip_address(address)
    if getattr(ip, "ipv4_mapped", None):
        ip = ip.ipv4_mapped
    return ip.is_loopback


# A stranger: torch's own store client, from a process that is not the job's, at every listener
# at once (threads), each given STRANGER_S to connect and count the keys.
STRANGER_S = 3
STRANGER = """
import sys, threading
from datetime import timedelta
from torch.distributed import TCPStore
print("ready", flush=True)
def try_one(address, port):
    try:
        store = TCPStore(address, port, is_master=False, timeout=timedelta(seconds=%d))
        print(f"SERVED {address}:{port} {store.num_keys()} keys", flush=True)
    except Exception as err:
        print(f"refused {address}:{port}: {type(err).__name__}", flush=True)
threads = [threading.Thread(target=try_one, args=(a, int(p)), daemon=True) for a, p in
           (w.rsplit(":", 1) for w in sys.argv[1:])]
for t in threads: t.start()
for t in threads: t.join()
""" % STRANGER_S


def strangers_served(probes) -> list[str]:
    """What strangers were served: one stranger per probe ``(listeners, netns, refusals)`` (in
    network namespace ``netns``, or this one), all at once. Returns the ``SERVED address:port N
    keys`` lines, none where the job is closed to them. A listener that is not a store may take
    the connection and never answer: each stranger is stopped STRANGER_S + 3 s after it is
    ready (torch imported), and what it was not served by then, it never got. ``refusals``: at
    least one listener must have refused it (the stranger did try)."""
    import threading

    wildcard = {"0.0.0.0": "127.0.0.1", "::": "::1"}
    runs = []
    for listeners, netns, refusals in probes:
        argv = [sys.executable, "-c", STRANGER] + \
            [f"{wildcard.get(address, address)}:{port}" for address, port in listeners]
        if netns is not None:
            argv = ["ip", "netns", "exec", netns] + argv
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                text=True)
        lines: list[str] = []
        ready = threading.Event()
        ready_at: list[float] = []

        def read(proc=proc, lines=lines, ready=ready, ready_at=ready_at):
            for line in proc.stdout:
                lines.append(line.strip())
                if not ready_at:
                    ready_at.append(time.monotonic())
                ready.set()
            ready.set()

        threading.Thread(target=read, daemon=True).start()
        runs.append((proc, lines, ready, ready_at, refusals))
    served = []
    for proc, lines, ready, ready_at, refusals in runs:
        ready.wait(90)
        try:
            proc.wait(max(0.0, (ready_at or [time.monotonic()])[0] + STRANGER_S + 3
                          - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        answers = "\n".join(lines)
        assert "refused" in answers or not refusals, answers
        served += [a for a in lines if a.startswith("SERVED")]
    return served


def stranger_served(listeners, netns: str | None = None, refusals: bool = True) -> list[str]:
    """strangers_served for one stranger."""
    return strangers_served([(listeners, netns, refusals)])


def audit_one_host_job(argv, kind: str, running=lambda line: line.startswith("iter "),
                       also=None) -> list[tuple[str, int]]:
    """Start the job ``argv`` (from the repository root, in a session of its own); once a line
    of its output satisfies ``running``, list every listening socket of it and its descendants,
    and assert that each is on loopback and serves a stranger no key; ``also(listeners)`` checks
    more before the job is stopped (SIGTERM to its group, SIGKILL after 30 s). Returns the
    listeners."""
    job = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, start_new_session=True)
    try:
        for line in job.stdout:                 # mid-run: once the first iteration is printed
            if running(line):
                break
        else:
            raise AssertionError(f"{kind}: no iteration printed (exit {job.wait()})")
        read_on(job)
        listeners = listening(socket_inodes({job.pid} | descendants(job.pid)))
        public = [(address, port) for address, port in listeners if not is_loopback(address)]
        assert not public, f"{kind} listens beyond loopback: {public}"
        served = stranger_served(listeners)
        assert not served, f"{kind} served a stranger: {served}"
        if also is not None:
            also(listeners)
        return listeners
    finally:
        stop_group(job)
        time.sleep(0.1)


def read_on(proc: subprocess.Popen) -> None:
    """Read the rest of ``proc``'s stdout in the background: a full pipe would block the job's
    next lines, and with them its way out when it is stopped (30 s, then SIGKILL: a test's time
    lost)."""
    threading.Thread(target=proc.stdout.read, daemon=True).start()


def stop_group(proc: subprocess.Popen) -> None:
    """SIGTERM to the process group of ``proc`` (started in a session of its own), SIGKILL if it
    has not ended within 30 s (a job that ended already: its end is what the caller reports)."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
    except ProcessLookupError:
        proc.wait()
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
