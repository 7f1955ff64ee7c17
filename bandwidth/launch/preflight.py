"""Start-up that scales: check a job before any of its processes starts.

* ``startup_timeout(processes)``: the rendezvous timeout when ``--timeout`` is not given. Every
  process imports torch before it joins; 110 of them on 2 cores took 61 s (issue 27), so the
  default grows by PER_PROCESS_S per process beyond the first DEFAULT_TIMEOUT_S.
* ``check_measure_command``: a ``measure.py`` command (``bandwidth/measure.py``, ``-m
  bandwidth.measure``, ``bandwidth-measure``) is run once on this host, as worker 0 would run it,
  with ``BANDWIDTH_PREFLIGHT=1``: measure.py parses and checks its command line and the plan,
  then exits without measuring. A bad flag then costs one process and prints one line, instead
  of one error from each of the job's processes after all of them started. Any other command is
  started as it is (the launcher starts any program). Jobs of fewer than PREFLIGHT_MIN_PROCESSES
  processes are not checked first: the check costs one torch import, about what the job's own
  start-up costs there, and their identical errors print once anyway (``repeats``).
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence
from pathlib import PurePath

from bandwidth.errors import ConfigError
from bandwidth.launch.planning.config import DEFAULT_TIMEOUT_S

PREFLIGHT_ENV = "BANDWIDTH_PREFLIGHT"
PER_PROCESS_S = 1.0
PREFLIGHT_MIN_PROCESSES = 8
PREFLIGHT_TIMEOUT_S = 300


def startup_timeout(processes: int) -> int:
    """Seconds to wait for every process to join, for a job of ``processes`` processes."""
    return int(DEFAULT_TIMEOUT_S + PER_PROCESS_S * max(0, processes - 1))


def is_measure_command(command: Sequence[str]) -> bool:
    """Whether ``command`` runs this toolkit's measure.py."""
    for i, word in enumerate(command):
        name = PurePath(word).name
        if name in ("measure.py", "bandwidth-measure"):
            return True
        if word == "-m" and i + 1 < len(command) and command[i + 1] == "bandwidth.measure":
            return True
    return False


def check_measure_command(command: Sequence[str], env: Mapping[str, str], cwd: str) -> None:
    """Run ``command`` once with PREFLIGHT_ENV set; raise ConfigError with its one-line error
    when it refuses. A command this host cannot start (a path that exists only on the remote
    hosts) is not checked here."""
    if not is_measure_command(command):
        return
    try:
        done = subprocess.run(list(command), env={**env, PREFLIGHT_ENV: "1"}, cwd=cwd,
                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, errors="replace",
                              timeout=PREFLIGHT_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired):
        return
    if done.returncode == 0:
        return
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    error = next((line for line in lines if "error:" in line), lines[-1] if lines else
                 f"exit status {done.returncode}")
    raise ConfigError(f"the command refused its arguments before any process started "
                      f"(checked once): {error.strip()[:400]}")
