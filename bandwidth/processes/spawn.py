"""Start one worker process per rank on this host and supervise them.

The parent hosts the rendezvous (a torch.distributed TCPStore on a free loopback port, so there
is no port race and no other machine can reach it, behind a ``launch.storegate.Gate`` that
serves only clients proving they know a secret of the run, which the ranks get with their
payload on stdin and which every key also lives under), starts ``python -m
bandwidth.execution.rank`` for every rank with an argument list, forwards their stderr, and on
the first failure or when a rank stops answering stops them all and raises one WorkerError that
names the rank, its exit status and its last stderr line.

Nothing is left running and nothing is left on disk, whatever happens to the parent:

* No files: each rank reads its payload (one JSON line) from its stdin; rank 0 writes its result
  to a pipe (``--result-fd``). A parent killed by SIGKILL leaves no temporary folder behind.
* The parent keeps every rank's stdin open and never writes to it again. End-of-file on it (the
  parent stopping the ranks, exiting, or dying even by SIGKILL) makes the rank kill its own
  process group at once (``bandwidth.launch.supervision.lifeline``); on Linux the rank also asks the
  kernel for SIGKILL when its parent dies (PR_SET_PDEATHSIG), which works even while the rank's
  Python code cannot run.
* Ranks run in sessions of their own (a terminal's Ctrl-C reaches only the parent, which stops
  them); stopping is closing stdin, SIGTERM to the group, then SIGKILL.
"""

from __future__ import annotations

import collections
import json
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from bandwidth.errors import WorkerError
from bandwidth.launch.planning.plan import one_thread_where_crowded
from bandwidth.launch.rendezvous import open_store
from bandwidth.launch.supervision.lifeline import describe_stopped

PACKAGE_ROOT = str(Path(__file__).resolve().parent.parent)
POLL_S = 0.05


def run_ranks(payload: dict, world_size: int, timeout_s: float,
              total_s: float | None = None) -> dict:
    """Run ``payload`` on ``world_size`` local ranks; return what rank 0 wrote. A payload with a
    ``rendezvous`` (host, port, prefix, first_rank, world_size) joins a job-wide store instead of
    the one hosted here (the ``dist_nccl`` mode under launch.py).

    ``timeout_s`` is ``--timeout``'s one meaning: the longest a rank may wait for another or go
    without completing an iteration (each rank enforces it on itself: its store and collective
    timeouts and ``bandwidth.launch.supervision.lifeline.Watchdog``); a rank stopped by a signal for
    that long ends the run here, named as the cause. ``total_s``: a cap on the whole run as well
    (the ceiling's ``--timeout``, "seconds allowed to each child process")."""
    store = None
    if "rendezvous" not in payload:
        # Loopback only, behind a gate that serves only clients proving they know a secret of
        # this run (sent on stdin), which every key also lives under.
        payload = dict(payload, secret=secrets.token_hex(16))
        store = open_store(0, timeout_s, "127.0.0.1", payload["secret"])
    # The cores shared among the ranks (OMP_NUM_THREADS, unless set): each torch otherwise starts
    # a thread per core, and their threads spin on the cores the others need (the reference's
    # data of resnet-152 on 2 CPU devices took 6.4 s to fill with two threads a rank, against
    # 1 s with one).
    env = dict(one_thread_where_crowded(os.environ, (), ["here"] * world_size))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (PACKAGE_ROOT, env.get("PYTHONPATH")) if p)
    text = json.dumps(payload) + "\n"
    ranks: list[_Rank] = []
    try:
        for r in range(world_size):
            ranks.append(_Rank(r, [sys.executable, "-m", "bandwidth.execution.rank",
                                   "--rank", str(r), "--world-size", str(world_size),
                                   "--store-port", str(store.port if store else 0),
                                   "--parent-pid", str(os.getpid()),
                                   "--timeout", repr(float(timeout_s))], env, text))
        _supervise(ranks, timeout_s, total_s)
    finally:
        for rank in ranks:
            rank.close_lifeline()
        for rank in ranks:
            rank.stop()
        if store is not None:
            store.close()
    del store
    return ranks[0].result()


class _Rank:
    def __init__(self, rank: int, argv: list[str], env: dict, payload: str):
        self.rank = rank
        self.tail: collections.deque[str] = collections.deque(maxlen=20)
        self.output = bytearray()
        fds: tuple[int, ...] = ()
        read_end = write_end = -1
        if rank == 0:
            read_end, write_end = os.pipe()
            argv = argv + ["--result-fd", str(write_end)]
            fds = (write_end,)
        try:
            self.proc = subprocess.Popen(argv, env=env, stdin=subprocess.PIPE,
                                         stdout=None if rank == 0 else subprocess.DEVNULL,
                                         stderr=subprocess.PIPE, start_new_session=True,
                                         pass_fds=fds)
        finally:
            if write_end >= 0:
                os.close(write_end)
        self.readers = [threading.Thread(target=self._forward, daemon=True)]
        if read_end >= 0:
            self.readers.append(threading.Thread(target=self._collect, args=(read_end,),
                                                 daemon=True))
        for reader in self.readers:
            reader.start()
        # On a thread: a payload beyond the pipe's 64 KiB would otherwise wait for the rank to
        # import torch before the next rank starts.
        threading.Thread(target=self._send, args=(payload.encode(),), daemon=True).start()

    def _send(self, payload: bytes) -> None:
        try:
            self.proc.stdin.write(payload)
            self.proc.stdin.flush()             # stdin stays open: it is the rank's lifeline
        except (BrokenPipeError, ValueError, OSError):
            pass                                # the rank already died; its status says why

    def _forward(self) -> None:
        for raw in self.proc.stderr:
            line = raw.decode(errors="replace")
            self.tail.append(line.rstrip("\n"))
            try:
                sys.stderr.write(line if self.rank == 0 else f"[rank {self.rank}] {line}")
            except (BrokenPipeError, ValueError):
                pass

    def _collect(self, fd: int) -> None:
        with os.fdopen(fd, "rb") as pipe:
            for chunk in iter(lambda: pipe.read(65536), b""):
                self.output += chunk

    def result(self) -> dict:
        for reader in self.readers:
            reader.join(timeout=5.0)
        if not self.output:
            raise WorkerError(f"rank {self.rank} exited with status 0 but wrote no result")
        return json.loads(self.output)

    def close_lifeline(self) -> None:
        """End-of-file on the rank's stdin: it kills its own process group at once."""
        try:
            self.proc.stdin.close()
        except OSError:
            pass

    def stop(self) -> None:
        if self.proc.poll() is None:
            for sig, grace in ((signal.SIGTERM, 3.0), (signal.SIGKILL, 3.0)):
                try:
                    os.killpg(self.proc.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    self.proc.wait(grace)
                    break
                except subprocess.TimeoutExpired:
                    continue
        else:
            try:                                # helpers the rank left in its group
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        self.readers[0].join(timeout=2.0)

    def failure(self) -> str:
        code = self.proc.returncode
        how = (f"was killed by {signal.Signals(-code).name}" if code < 0
               else f"exited with status {code}")
        last = next((line for line in reversed(self.tail) if line.strip()), "")
        return (f"rank {self.rank} (pid {self.proc.pid}) {how}"
                + (f": {last.strip()}" if last else ""))


def _supervise(ranks: list[_Rank], timeout_s: float, total_s: float | None = None) -> None:
    """Return when every rank exited 0; WorkerError at the first failure. A rank stopped by a
    signal (SIGSTOP) is named as the cause, whichever rank gave up waiting for it first; one that
    stays stopped for ``timeout_s`` ends the run even if no other rank has given up yet."""
    stopped_since: dict[int, float] = {}
    deadline = None if total_s is None else time.monotonic() + total_s
    while True:
        codes = [r.proc.poll() for r in ranks]
        now = time.monotonic()
        stuck = None
        for r, code in zip(ranks, codes):
            state = describe_stopped(r.proc.pid) if code is None else ""
            if not state:
                stopped_since.pop(r.rank, None)
                continue
            stopped_since.setdefault(r.rank, now)
            stuck = stuck or (r, state)
        failed = [r for r, code in zip(ranks, codes) if code not in (None, 0)]
        if stuck and (failed or now - stopped_since[stuck[0].rank] > timeout_s):
            r, state = stuck
            raise WorkerError(f"rank {r.rank} (pid {r.proc.pid}) stopped answering: {state}; "
                              f"the run was stopped after {timeout_s:g} s without progress "
                              "(--timeout)")
        if failed:
            for r in failed:
                r.readers[0].join(timeout=2.0)
            raise WorkerError(failed[0].failure())
        if all(code == 0 for code in codes):
            return
        if deadline is not None and now > deadline:
            alive = [str(r.rank) for r, code in zip(ranks, codes) if code is None]
            raise WorkerError(f"ranks {', '.join(alive)} did not finish within {total_s:g} s "
                              "(raise --timeout if the run is just slow)")
        time.sleep(POLL_S)
