"""Start one worker process per rank on this host and supervise them.

The parent hosts the rendezvous (a torch.distributed TCPStore on a free loopback port, so there is
no port race), starts ``python -m bandwidth.worker`` for every rank with an argument list, forwards
their stderr, and on the first failure or at the deadline stops them all and raises one WorkerError
that names the rank, its exit status and its last stderr line. Nothing is left running.
"""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from datetime import timedelta
from pathlib import Path

from bandwidth.errors import WorkerError

PACKAGE_ROOT = str(Path(__file__).resolve().parent.parent)


def run_ranks(payload: dict, world_size: int, timeout_s: float) -> dict:
    """Run ``payload`` on ``world_size`` local ranks; return what rank 0 wrote. A payload with a
    ``rendezvous`` (host, port, prefix, first_rank, world_size) joins a job-wide store instead of
    the one hosted here (the ``dist_nccl`` mode under launch.py)."""
    import torch.distributed as dist

    store = None if "rendezvous" in payload else dist.TCPStore(
        "127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=timeout_s))
    with tempfile.TemporaryDirectory(prefix="bandwidth-") as tmp:
        payload_path = Path(tmp, "payload.json")
        result_path = Path(tmp, "result.json")
        payload_path.write_text(json.dumps(payload))
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (PACKAGE_ROOT, env.get("PYTHONPATH")) if p)
        ranks = [_Rank(r, [sys.executable, "-m", "bandwidth.worker", "--rank", str(r),
                           "--world-size", str(world_size),
                           "--store-port", str(store.port if store else 0),
                           "--payload", str(payload_path), "--result", str(result_path),
                           "--timeout", str(timeout_s)], env) for r in range(world_size)]
        try:
            _supervise(ranks, timeout_s)
        finally:
            for rank in ranks:
                rank.stop()
        del store
        return json.loads(result_path.read_text())


class _Rank:
    def __init__(self, rank: int, argv: list[str], env: dict):
        self.rank = rank
        self.tail: collections.deque[str] = collections.deque(maxlen=20)
        self.proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL,
                                     stdout=None if rank == 0 else subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True, start_new_session=True)
        self.reader = threading.Thread(target=self._forward, daemon=True)
        self.reader.start()

    def _forward(self) -> None:
        for line in self.proc.stderr:
            self.tail.append(line.rstrip("\n"))
            sys.stderr.write(line if self.rank == 0 else f"[rank {self.rank}] {line}")

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
        self.reader.join(timeout=2.0)

    def failure(self) -> str:
        code = self.proc.returncode
        how = (f"was killed by {signal.Signals(-code).name}" if code < 0
               else f"exited with status {code}")
        last = next((line for line in reversed(self.tail) if line.strip()), "")
        return f"rank {self.rank} {how}" + (f": {last.strip()}" if last else "")


def _supervise(ranks: list[_Rank], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        codes = [r.proc.poll() for r in ranks]
        failed = [r for r, code in zip(ranks, codes) if code not in (None, 0)]
        if failed:
            for r in failed:
                r.reader.join(timeout=2.0)
            raise WorkerError(failed[0].failure())
        if all(code == 0 for code in codes):
            return
        if time.monotonic() > deadline:
            alive = [str(r.rank) for r, code in zip(ranks, codes) if code is None]
            raise WorkerError(f"ranks {', '.join(alive)} did not finish within {timeout_s:g} s "
                              "(raise --timeout if the run is just slow)")
        time.sleep(0.05)
