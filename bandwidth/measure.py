"""Measure the bandwidth of exchanging a network's parameter arrays under one kvstore mode.

Usage (from the repository root, from inside bandwidth/ as with MXNet's tool, or installed)::

    python bandwidth/measure.py --kv-store device --gpus 0,1 --network resnet --num-layers 200
    python measure.py --kv-store nccl --network inception-v3 --image-shape 3,299,299
    python -m bandwidth.measure --kv-store local --cpus 4 --network mlp      # no GPU needed
    bandwidth-measure --network resnet --num-layers 200 --dry-run

Prints MXNet's lines (``num of arrays = ...``, ``iter 1, ... GB/sec per gpu, error ...``), then a
summary with the median, min and max, algbw, and a flat all-reduce of the same bytes measured in the
same run as a reference. Exit status: 0 done, 1 a worker process failed or a gate failed
(--baseline, --min-gbps, --min-percent-of-ceiling), 2 bad input or a request this machine cannot
carry out (a busy GPU under a gate without --force), 141 (128 + SIGPIPE) the reader of stdout went
away (``| head``).
"""

if __package__ in (None, ""):
    # Started as a script: put the repository root, not this folder, on the import path, so that
    # the package imports the same way as when installed (and this folder's modules shadow nothing).
    import pathlib
    import sys

    _here = pathlib.Path(__file__).resolve().parent
    sys.path[:] = [p for p in sys.path if pathlib.Path(p or ".").resolve() != _here]
    sys.path.insert(0, str(_here.parent))

import logging  # noqa: E402
import os  # noqa: E402
import signal  # noqa: E402
import sys  # noqa: E402

from bandwidth import cliexit  # noqa: E402

if __name__ == "__main__":
    cliexit.quiet_interrupt_while_importing("measure.py")    # Ctrl-C while torch imports
    cliexit.require("measure.py")

# Nothing imported before the flags are checked imports torch (2 s of CPU): --help,
# --list-networks and bad input answer at once; the job imports it (bandwidth.execution.job).
import networks  # noqa: E402
from bandwidth.errors import BandwidthError  # noqa: E402
from bandwidth.execution.commandline import build_parser, job_from_args  # noqa: E402
from bandwidth.report.stream import whole_lines  # noqa: E402


class Stopped(BaseException):
    """SIGTERM or SIGHUP (what `timeout`, CI runners, schedulers and launch.py send): unwind, so
    that the per-device ranks are stopped and nothing is left behind, then exit 128 + N."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


_stopping = {"armed": False}


def _stop_on_signal(signum, frame):
    if not _stopping["armed"]:
        return          # main has its status: a late SIGTERM (the launcher stopping the rest)
    signal.signal(signum, signal.SIG_DFL)       # a second one ends the process at once
    raise Stopped(signum)


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s: %(message)s")
    whole_lines()                  # the job's processes share stdout: no line split by another's
    args = build_parser().parse_args(argv)
    _stopping["armed"] = True
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _stop_on_signal)
    try:
        try:
            return _main(args)
        finally:
            # From here the status is decided: a signal that lands while main returns, or in
            # the exit handlers after it, is ignored; one that landed just before is caught below.
            _stopping["armed"] = False
    except Stopped as stop:
        # A signal that arrived while an error was being handled (a collective blocked in C++
        # runs the handler only when it returns, often with its own timeout error): one line.
        print(f"measure.py: stopped by {signal.Signals(stop.signum).name}", file=sys.stderr)
        return 128 + stop.signum


def _main(args) -> int:
    try:
        if args.list_networks:
            cliexit.restore_interrupt()
            status = list_networks()
        else:
            # The launcher's contract, read once here: a process started by launch.py, or by
            # torchrun (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), has a role.
            import socket

            from bandwidth.launch.contract.torchenv import role_from_environ
            job = job_from_args(args)
            # torch, 2 s: a Ctrl-C while it imports still ends the process at once (the quiet
            # handler: torch's import may swallow a KeyboardInterrupt); ours from here on.
            from bandwidth.execution.job import execute
            cliexit.restore_interrupt()
            role = role_from_environ(os.environ, job.num_servers, socket.gethostname())
            status = execute(job, role)
        sys.stdout.flush()         # a closed pipe shows here, inside these handlers, not at exit
        return status
    except BrokenPipeError:
        # The reader of stdout went away (measure.py --dry-run | head -1): quietly, 141
        # (bandwidth.cliexit says why).
        return cliexit.broken_pipe()
    except BandwidthError as exc:
        _tell_launcher(str(exc), _peer_failure(exc, str(exc)))
        cliexit.error(f"measure.py: error: {exc}")
        return exc.exit_code
    except cliexit.out_of_memory() as exc:
        print(f"measure.py: error: out of device memory: {str(exc).splitlines()[0]}",
              file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"measure.py: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return cliexit.interrupted("measure.py")
    except RuntimeError as exc:
        first = next((line.strip() for line in str(exc).splitlines() if line.strip()), "")
        if not _peer_failure(exc, first):
            raise
        # Another process of the job is gone or stopped answering (a Gloo or store timeout, a
        # closed connection): one line; the launcher names the process at fault.
        line = f"a peer process is gone or stopped answering: {first[:300]}"
        _tell_launcher(line, consequence=True)
        cliexit.error(f"measure.py: error: {line}")
        return 1
    except Stopped as stop:
        _tell_launcher(f"stopped by {signal.Signals(stop.signum).name}", consequence=False)
        print(f"measure.py: stopped by {signal.Signals(stop.signum).name}", file=sys.stderr)
        return 128 + stop.signum


def _peer_failure(exc: Exception, first: str) -> bool:
    """torch.distributed's errors for a peer that is gone or hung (DistError, or Gloo's
    RuntimeError), as opposed to a bug; for a failed per-device rank (WorkerError), whether it
    failed that way rather than being killed or stopped itself."""
    if any(word in first for word in ("was killed by", "stopped answering")):
        return False
    dist = sys.modules.get("torch.distributed")      # not imported: the error is not its
    return (dist is not None and isinstance(exc, dist.DistError)) or any(
        word in first for word in ("gloo", "Timed out", "Connection closed by peer",
                                   "Connection reset by peer", "a peer process is gone",
                                   "DistStoreError", "wait timeout"))


def _tell_launcher(reason: str, consequence: bool) -> None:
    """Under launch.py: say why this process fails (a consequence: another failed first)."""
    from bandwidth.launch.contract.heartbeat import report_end

    report_end(reason.splitlines()[0] if reason else "", consequence)


def list_networks() -> int:
    for name in networks.names():
        print(f"{name:<22} {networks.NETWORKS[name].summary}")
    return 0


if __name__ == "__main__":
    status = main()
    cliexit.exiting()
    sys.exit(status)
