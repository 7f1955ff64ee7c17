"""MXNet's own kvstore measured with the toolkit's protocol, output and error check.

    python bandwidth/measure.py --backend mxnet --kv-store local --cpus 2 --network lenet
    python launch.py -n 2 -s 1 --scheduler python bandwidth/measure.py --backend mxnet \\
        --kv-store dist_sync --cpus 2 --network lenet

Arrays: one NDArray per key and device, on ``mx.cpu(i)`` or ``mx.gpu(i)``, holding the closed-form
test data of ``bandwidth.arrays.data`` for the global replica ``worker * devices + device``. Each
step pushes and then pulls every key with its own call and ``priority = key``, as MXNet's
``tools/bandwidth/measure.py`` did (MXNet's Python overhead is in the time, as it was there); the
step ends when ``mx.nd.waitall()`` returns. Timing and reports are
``bandwidth.measurement.protocol``'s, the
error is ``bandwidth.arrays.data.Reference``'s (with sgd: ``-steps x lr x sum``, MXNet's SGD with
rescale_grad 1 and no weight decay).

Under launch.py (``--scheduler``): the scheduler and the servers import mxnet, which runs
ps-lite's loop inside the import until the workers finish. ps-lite has no heartbeat by default,
so every worker runs a watchdog: when the set-up, one step or the shutdown makes no progress for
``--timeout`` seconds, it prints one line and exits 1, and the launcher stops the rest. An
exception on a worker ends the process at once, because MXNet's kvstore destructor would otherwise
wait at a barrier for ever.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
import traceback
from datetime import timedelta
from typing import Callable, NoReturn

import numpy as np
import torch

from bandwidth.arrays import optimizers
from bandwidth.arrays.data import Reference, fill_gradient
from bandwidth.arrays.layout import Layout
from bandwidth.backends.mxnet_backend import import_mxnet
from bandwidth.errors import BandwidthError, UnsupportedError
from bandwidth.launch.contract.environment import SCHEDULER, SERVER, Role, join_store
from bandwidth.measurement.tasks import measure_session
from bandwidth.plan.plan import Plan
from bandwidth.processes.group import LocalGroup
from bandwidth.results.result import Result

NUMPY_DTYPES = {"float32": np.float32, "float16": np.float16}
STORE_PREFIX = "bandwidth/mxnet/"        # the workers' Gloo group inside the launcher's store


class MXNetFailed(BandwidthError):
    """MXNet raised during the measurement (the message is MXNet's own first line)."""

    exit_code = 1


class MXNetSession:
    """One process's part: its devices' arrays, MXNet's kvstore exchanging them, and the error
    check. It plugs into ``bandwidth.measurement.protocol.measure`` like
    ``bandwidth.measurement.session.Session``."""

    def __init__(self, mx, plan: Plan, group, *, first_replica: int = 0,
                 replicas: int | None = None, on_progress: Callable[[str], None] | None = None):
        c = plan.config
        self.mx, self.group = mx, group
        self.on_progress = on_progress or (lambda what: None)
        self.optimizer = optimizers.make(c.optimizer)
        self.contexts = [mx.gpu(i) if plan.devices.is_cuda else mx.cpu(i)
                         for i in plan.devices.ids]
        self.kv = mx.kv.create(c.kv_store)
        # MXNet's measure.py order: compression, optimizer, then init (zeros, on the CPU).
        if c.gc_type != "none":
            self.kv.set_gradient_compression({"type": c.gc_type})
        if self.optimizer is not None:
            self.kv.set_optimizer(mx.optimizer.create(
                self.optimizer.name, learning_rate=self.optimizer.lr, momentum=0.0, wd=0.0,
                rescale_grad=1.0))
        dtype = NUMPY_DTYPES[c.dtype]
        for key, (_, shape) in enumerate(plan.shapes):
            self.kv.init(key, mx.nd.zeros(shape, dtype=dtype))
        # Key k holds elements [offset_k, offset_k + size_k) of the replica's flat test data.
        self.layout = Layout.build(plan.shapes)
        self.grads = [[] for _ in plan.shapes]
        self.outputs = [[] for _ in plan.shapes]
        self.first_replica, self.seed, self.dtype = first_replica, c.seed, dtype
        for index, ctx in enumerate(self.contexts):
            flat = self._gradient(index)
            for key, shape in enumerate(self.layout.shapes):
                host = self.layout.view(flat, key).numpy()
                self.grads[key].append(mx.nd.array(host, ctx=ctx, dtype=dtype))
                self.outputs[key].append(mx.nd.zeros(shape, ctx=ctx, dtype=dtype))
            del flat
        # A dist kvstore with one CPU context merges nothing: its comm_buf is the gradient array
        # itself, and the pull lands there before the broadcast to the outputs
        # (mxnet-kvstore-spec.md, dist push step 2). A backward pass rewrites the gradients
        # before the next push; here the untimed prepare does.
        self.refill = (c.kv_store.startswith("dist") and len(self.contexts) == 1
                       and not plan.devices.is_cuda)
        self.reference = (Reference(self.layout.numel, replicas or len(self.contexts), c.seed,
                                    torch.device("cpu")) if c.test_results else None)
        self.steps = 0
        self.synchronize()

    def notes(self) -> list[str]:
        contexts = ", ".join(str(ctx) for ctx in self.contexts)
        notes = [f"MXNet {self.mx.__version__}: mx.kv.create({self.kv.type!r}) on {contexts}; "
                 "one push and one pull call per key (priority = key), as MXNet's measure.py"]
        if getattr(self.kv, "num_workers", 1) > 1:
            notes.append(f"ps-lite: {self.kv.num_workers} workers, this one MXNet rank "
                         f"{self.kv.rank}")
        return notes

    def _gradient(self, index: int) -> torch.Tensor:
        flat = torch.empty(self.layout.numel, dtype=torch.float32)
        fill_gradient(flat, rank=self.first_replica + index, seed=self.seed)
        return flat

    def prepare(self) -> None:
        # The gradients stay in place between steps, as a backward pass would leave them, unless
        # the pull landed in them (refill).
        self.on_progress(f"step {self.steps + 1}")
        if self.refill and self.steps:
            flat = self._gradient(0)
            for key in range(len(self.grads)):
                self.grads[key][0][:] = self.layout.view(flat, key).numpy().astype(self.dtype)
            self.synchronize()

    def step(self) -> None:
        for key, grads in enumerate(self.grads):
            self.kv.push(key, grads, priority=key)
        for key, outputs in enumerate(self.outputs):
            self.kv.pull(key, out=outputs, priority=key)
        self.steps += 1

    def synchronize(self) -> None:
        self.mx.nd.waitall()

    def error(self) -> float:
        wrong, total = 0.0, 0.0
        for index in range(len(self.contexts)):
            flat = np.concatenate([self.outputs[key][index].asnumpy().ravel()
                                   for key in range(len(self.outputs))])
            w, total = self.reference.error_terms([torch.from_numpy(flat)], self.optimizer,
                                                  self.steps)
            wrong += w
        wrong = self.group.sum(wrong)
        return wrong / total if total else 0.0

    def close(self) -> None:
        """Free the arrays and the kvstore. A dist kvstore's destructor is a barrier of the
        workers, after which worker 0 stops the servers (and so the scheduler)."""
        self.on_progress("shutdown")
        self.synchronize()
        self.grads.clear()
        self.outputs.clear()
        self.kv = None


def measure_task(plan: Plan, on_report) -> dict:
    """A single-process run: every device of ``plan`` as an MXNet context in this process."""
    with failures(plan.config.kv_store):
        session = open_session(plan)
        try:
            return measure_session(plan, session, on_report, None, session.notes())
        finally:
            session.close()


def open_session(plan: Plan) -> MXNetSession:
    """Every device of ``plan`` as an MXNet context in this process (a single-process run)."""
    return MXNetSession(import_mxnet(), plan, LocalGroup())


@contextlib.contextmanager
def failures(kv_store: str):
    """MXNet's errors inside (its C++ text) as one line: MXNetFailed."""
    mx = import_mxnet()
    try:
        yield
    except mx.base.MXNetError as exc:
        raise MXNetFailed(f"MXNet failed on --kv-store {kv_store}: {mxnet_message(exc)}") from None


def mxnet_message(exc: Exception) -> str:
    """MXNet's own reason out of its multi-line error text (C++ stack traces included)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    for line in reversed(lines):
        if line.startswith("MXNetError:") or "Check failed" in line:
            return line.removeprefix("MXNetError:").strip()
    return lines[-1] if lines else type(exc).__name__


# ---------------------------------------------------------------------------------------------
# under launch.py


def check_role(kv_store: str, role: Role | None, servers_needed: bool = True) -> None:
    """MXNet's dist kvstores need the launcher, at least one server and ps-lite's scheduler."""
    example = (f"python launch.py -n 2 -s 1 --scheduler python bandwidth/measure.py "
               f"--backend mxnet --kv-store {kv_store} ...")
    if role is None:
        raise UnsupportedError(f"MXNet's --kv-store {kv_store} runs under the launcher, which "
                               f"starts the scheduler, servers and workers: {example}")
    if role.job.num_servers < 1:
        raise UnsupportedError(f"MXNet's --kv-store {kv_store} needs at least one server (-s 1): "
                               f"{example}")
    if not role.job.has_scheduler:
        raise UnsupportedError(f"MXNet's --kv-store {kv_store} needs ps-lite's scheduler, which "
                               f"the launcher starts with --scheduler: {example}")


def run_distributed(plan: Plan, role: Role, on_report, stages=None) -> Result | None:
    """This process's part of a dist_* job: the Result on workers, None on servers and the
    scheduler (after MXNet's loop ends). ``stages``: unused (ps-lite's set-up happens inside
    ``import mxnet``, where nothing can say it)."""
    c = plan.config
    check_role(c.kv_store, role)
    if role.name == SCHEDULER:
        return serve(role)                 # not a rank of the launcher's rendezvous
    store = join_store(role, c.timeout_s)  # the launcher names the ranks that never arrive
    if role.name == SERVER:
        return serve(role)
    watchdog = Watchdog(c.timeout_s, f"MXNet worker {role.task_id}")
    try:
        return _work(plan, role, store, on_report, watchdog)
    except BaseException as exc:           # noqa: B902 - the process must end here, see below
        # MXNet's kvstore destructor waits at a barrier for the other workers, so a normal exit
        # with the kvstore alive would hang: report and leave at once.
        end_process(exc, role)


def serve(role: Role) -> None:
    """Scheduler and servers: ``import mxnet`` runs ps-lite's loop and leaves by sys.exit()."""
    try:
        import_mxnet()
    except SystemExit as exc:
        if exc.code not in (None, 0):
            raise MXNetFailed(f"MXNet's {role.name} loop exited with status {exc.code}") from None
        return None
    raise UnsupportedError(f"importing mxnet with DMLC_ROLE={role.name} did not run MXNet's "
                           f"{role.name} loop; is this MXNet built with USE_DIST_KVSTORE?")


def _work(plan: Plan, role: Role, store, on_report, watchdog: Watchdog) -> Result:
    import torch.distributed as dist
    from torch.distributed import PrefixStore

    from bandwidth.processes.group import DistGroup
    from bandwidth.results.gathered import worker_result

    c, workers = plan.config, role.job.num_workers
    watchdog.kick("joining the other workers")
    dist.init_process_group("gloo", store=PrefixStore(STORE_PREFIX, store), rank=role.task_id,
                            world_size=workers, timeout=timedelta(seconds=c.timeout_s))
    group = DistGroup(torch.device("cpu"))
    mx = import_mxnet()
    per_worker = plan.devices.n
    watchdog.kick("starting ps-lite and the kvstore")
    session = MXNetSession(mx, plan, group, first_replica=role.task_id * per_worker,
                           replicas=workers * per_worker, on_progress=watchdog.kick)
    measured = measure_session(plan, session, on_report, workers * per_worker, session.notes())
    session.close()
    result = worker_result(plan, measured, group, workers * per_worker)
    result.environment["mxnet"] = mx.__version__
    dist.destroy_process_group()
    watchdog.stop()
    return result


def end_process(exc: BaseException, role: Role) -> NoReturn:
    mx = sys.modules.get("mxnet")
    if isinstance(exc, BandwidthError):
        print(f"measure.py: error: {exc}", file=sys.stderr, flush=True)
        code = exc.exit_code
    elif mx is not None and isinstance(exc, mx.base.MXNetError):
        print(f"measure.py: error: MXNet failed on {role.title}: {mxnet_message(exc)}",
              file=sys.stderr, flush=True)
        code = 1
    elif isinstance(exc, KeyboardInterrupt):
        print("measure.py: interrupted", file=sys.stderr, flush=True)
        code = 130
    elif getattr(exc, "signum", None):      # measure.py's Stopped: SIGTERM or SIGHUP
        print(f"measure.py: stopped by {signal.Signals(exc.signum).name}", file=sys.stderr,
              flush=True)
        code = 128 + exc.signum
    elif isinstance(exc, RuntimeError) and str(exc).strip():
        # Gloo's or the store's own error (a peer closed its connection, a timeout): its first
        # line; the launcher names the process at fault.
        first = next(line.strip() for line in str(exc).splitlines() if line.strip())
        print(f"measure.py: error: a peer process is gone or stopped answering: {first[:300]}",
              file=sys.stderr, flush=True)
        code = 1
    else:
        traceback.print_exception(exc, file=sys.stderr)
        sys.stderr.flush()
        code = 1
    sys.stdout.flush()
    os._exit(code)


class Watchdog:
    """Ends this process (one line on stderr, exit 1) when ``kick`` is not called for ``seconds``:
    a ps-lite node that died or hangs otherwise leaves every worker waiting for ever."""

    def __init__(self, seconds: float, who: str):
        self.seconds, self.who, self.what = seconds, who, "starting"
        self.deadline = time.monotonic() + seconds
        self.stopped = threading.Event()
        threading.Thread(target=self._watch, name="mxnet-watchdog", daemon=True).start()

    def kick(self, what: str) -> None:
        self.what, self.deadline = what, time.monotonic() + self.seconds

    def stop(self) -> None:
        self.stopped.set()

    def _watch(self) -> None:
        while not self.stopped.wait(min(1.0, self.seconds / 10)):
            if time.monotonic() > self.deadline:
                print(f"measure.py: error: {self.who}: no progress in {self.what} for "
                      f"{self.seconds:g} s (--timeout); a ps-lite node is gone or stuck, and "
                      "ps-lite has no heartbeat", file=sys.stderr, flush=True)
                os._exit(1)
