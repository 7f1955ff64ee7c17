"""Measuring the model's parameters with the tool itself, on at most 4 hosts of a lab:

| run | processes (lab hosts) | network | gives |
| --- | --- | --- | --- |
| tiny | 1 worker, 1 server (h1, h2) | flat 256 KiB: one message | ``step_s`` (and ``message_s``) |
| pair | 1 worker, 1 server (h1, h2) | flat 8 MB | ``eff_one`` |
| spread | 1 worker (h1), 3 servers (h2-h4) | flat 12 MB | ``eff_several`` |
| fan-in 2, 4, 8, 16, 32 | 2-32 workers, 1 server | flat 4 MB | ``fanin`` at 2, 3, 6, 12, 24 remote senders |
| one in flight | 4 workers, 1 server, ``--max-in-flight 1`` | flat 4 MB | ``one_serial`` |

plus the server's summation rate, timed in this process (one thread, as a server sums). Each
parameter is the value at which the model (``bandwidth.predict.model``) gives its run's measured
median step, found by bisection with the parameters before it fixed. ``message_s`` is taken as a
quarter of ``step_s`` (a round trip: two messages, each sent by one process and received by
another); docs/formulas.md states it.
"""

from __future__ import annotations

import dataclasses
import time

import networks
from bandwidth.predict import labrun
from bandwidth.predict.jobs import make_job
from bandwidth.predict.model import predict
from bandwidth.predict.params import Params

# (name, workers, servers, hosts in dealing order with slots, network, the parameter it gives,
# messages in flight per server or None for all). The fan-in runs reach 24 remote senders so
# that the 48 of 50 x 5 are one octave beyond the last point, not three.
RUNS = (
    ("tiny", 1, 1, [(1, None), (2, None)], "flat:65536", "step_s", None),
    ("pair", 1, 1, [(1, None), (2, None)], "flat:2000000", "eff_one", None),
    ("spread", 1, 3, [(1, 1), (2, None), (3, None), (4, None)], "flat:3000000", "eff_several",
     None),
    ("fan-in 2", 2, 1, [(1, None), (2, None), (3, None)], "flat:1000000", "fanin", None),
    ("fan-in 4", 4, 1, [(1, 2), (2, 1), (3, 1), (4, None)], "flat:1000000", "fanin", None),
    ("fan-in 8", 8, 1, [(1, None), (2, None), (3, None), (4, 1)], "flat:1000000", "fanin", None),
    ("fan-in 16", 16, 1, [(1, None), (2, None), (3, None), (4, None)], "flat:1000000", "fanin",
     None),
    ("fan-in 32", 32, 1, [(1, None), (2, None), (3, None), (4, None)], "flat:1000000", "fanin",
     None),
    ("one in flight", 4, 1, [(1, 2), (2, 1), (3, 1), (4, None)], "flat:1000000", "one_serial",
     1),
)

# The runs measure the fan-in of message by message (every remote sender pushing at once), whatever
# --server-takes auto would choose for their workers per server.
MESSAGE_ORDER = {"server_takes": "message", "server_keys": "mxnet"}


def summation_rate(nbytes: int = 64 * 10**6, repeats: int = 5) -> float:
    """Bytes of pushes a server adds per second: ``a.add_(b)`` in 1 MB pieces, one thread."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        a = torch.zeros(nbytes // 4)
        b = torch.ones(nbytes // 4)
        piece = 250_000
        best = float("inf")
        for _ in range(repeats):
            start = time.perf_counter()
            for i in range(0, a.numel(), piece):
                a[i:i + piece].add_(b[i:i + piece])
            best = min(best, time.perf_counter() - start)
        return nbytes / best
    finally:
        torch.set_num_threads(threads)


def job_of(run: labrun.Measured, mode: str, network: str, rate_bits: float, in_flight=None,
           **settings):
    """The model's Job of a lab run; ``settings``: server_takes and server_keys as the run had
    them (default: measure.py's defaults)."""
    shapes = networks.get_shapes(network)
    workers, servers = len(run.worker_hosts), len(run.server_hosts)
    return make_job(mode, shapes, workers, servers, rate_bits=rate_bits, in_flight=in_flight,
                    placed=(run.worker_hosts, run.server_hosts), **settings)


def solve(params: Params, field: str, job, seconds: float, key: int | None = None) -> Params:
    """``params`` with ``field`` (``fanin``: its point ``key``) set so that the model's step of
    ``job`` is ``seconds``; clamped to the field's range when no value reaches it."""
    low, high = {"step_s": (0.0, seconds), "one_serial": (0.0, 1.0)}.get(field, (0.02, 1.0))
    grows = field in ("step_s", "one_serial")      # a larger value, a longer step

    def with_value(value: float) -> Params:
        if field == "fanin":
            return dataclasses.replace(params, fanin={**params.fanin, key: value})
        extra = {"message_s": value / 4} if field == "step_s" else {}
        return dataclasses.replace(params, **{field: value}, **extra)

    for _ in range(40):
        middle = (low + high) / 2
        longer = predict(job, with_value(middle)).seconds > seconds
        # step_s, one_serial: a longer prediction wants less; an efficiency: a longer one more
        if grows == longer:
            high = middle
        else:
            low = middle
    return with_value((low + high) / 2)


def calibrate(lab, rate_bits: float, progress=print, done: dict | None = None,
              keep=lambda name, run: None) -> tuple[Params, list]:
    """Run RUNS on ``lab`` (its links at ``rate_bits``) and fit; runs already in ``done`` (name ->
    Measured) are not repeated, and ``keep`` is called with each new one. Returns the parameters
    and (name, Measured) of every run."""
    params = Params(rate_bits=rate_bits, sum_bytes_per_s=summation_rate())
    measured = []
    for name, workers, servers, hosts, network, _, flight in RUNS:
        found = (done or {}).get(name)
        if found is None:
            extra = ("--server-takes", MESSAGE_ORDER["server_takes"], "--server-keys",
                     MESSAGE_ORDER["server_keys"])
            extra += () if flight is None else ("--max-in-flight", str(flight))
            found = labrun.run(lab, hosts, workers, servers, "dist_sync", network, extra)
            keep(name, found)
        progress(f"# calibration run {name}: {workers} x {servers} {network}: "
                 f"{found.seconds:.4f} s per step (load {found.load[0]:.2f})")
        measured.append((name, found))
    return fit(params, measured), measured


def fit(params: Params, measured: list) -> Params:
    """The parameters from the runs (twice over, as step_s and eff_one depend on each other)."""
    table = {name: (network, field, flight) for name, _, _, _, network, field, flight in RUNS}
    runs = {name: (run, *table[name]) for name, run in measured}    # missing runs: left out
    for _ in range(2):
        for name, (run, network, field, flight) in runs.items():
            job = job_of(run, "dist_sync", network, params.rate_bits, flight, **MESSAGE_ORDER)
            key = None
            if field == "fanin":
                host = run.server_hosts[0]
                key = sum(1 for w in run.worker_hosts if w != host)
            params = solve(params, field, job, run.seconds, key)
    return params
