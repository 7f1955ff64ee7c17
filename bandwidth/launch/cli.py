"""Start a distributed job: MXNet's ``tools/launch.py``, re-created with supervision.

Usage (``python launch.py`` from the repository root, or ``bandwidth-launch`` once installed)::

    python launch.py -n 2 -s 2 python3 train.py                     # 4 processes on this host
    python launch.py -n 4 -s 0 python3 -m bandwidth.measure ...      # all-reduce only, no servers
    python launch.py -H hosts -n 4 -s 2 python3 train.py             # ssh (the default with -H)
    python launch.py -H hosts -n 4 --sync-dst-dir /tmp/job python3 train.py
    python launch.py -H hosts -n 4 --launcher mpi python3 train.py   # one Open MPI mpirun
    python launch.py -n 2 --scheduler python3 mxnet_dist_script.py  # + a ps-lite scheduler
    salloc -n 4 python launch.py --launcher slurm -n 2 -s 2 python3 train.py   # one srun step
    python launch.py -n 2 --env OMP_NUM_THREADS=4 --env HF_HOME --timeout 30 python3 prog.py

Every process gets the environment contract of ``bandwidth.launch.contract`` (``DMLC_ROLE``,
``RANK``, ``MASTER_ADDR``...) and only the forwarded variables of ``bandwidth.launch.environ``.
Children's stderr is shown live with a ``[worker 0@host]`` prefix; stdout passes through.

Exit status: 0 when every process exited with 0; otherwise the first failing process's status
(128+N if signal N killed it; 255 for an ssh connection failure; 130 after Ctrl-C), after one
``FAIL:`` report on stderr naming its role, rank, host, status and last stderr lines; 2 for bad
input (flags, hosts file, a taken --port), with one line on stderr.
"""

from __future__ import annotations

import logging
import os
import signal
import sys

from bandwidth.errors import BandwidthError
from bandwidth.launch.config import build_parser, config_from_args
from bandwidth.launch.driver import run


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="launch: %(levelname)s: %(message)s")
    args = build_parser().parse_args(argv)
    try:
        run(config_from_args(args, os.environ, os.getcwd()), dict(os.environ))
    except BandwidthError as err:
        print(err if str(err).startswith("FAIL:") else f"launch.py: error: {err}",
              file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        # Ctrl-C before any process started (while torch imports, say); once processes run,
        # the supervisor catches the signal itself, stops them and reports.
        print("launch.py: interrupted (no process was running)", file=sys.stderr)
        return 128 + signal.SIGINT
    return 0


if __name__ == "__main__":
    sys.exit(main())
