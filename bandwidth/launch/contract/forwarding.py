"""Which of the launcher's environment variables reach the processes it starts.

Nothing is inherited wholesale: a launcher's environment holds tokens and keys, and the ssh and
mpi launchers would copy them onto other machines. Forwarded are only

* the names in ``FORWARDED`` and those starting with a prefix in ``FORWARDED_PREFIXES`` (paths,
  thread counts, CUDA, NCCL/Gloo/torch/MXNet/ps-lite/UCX/libfabric tuning), except names that
  look like credentials (``SECRET``, ``TOKEN``, ``PASSW``, ``CREDENTIAL``, ``AUTH``,
  ``APIKEY``, ``ACCESSKEY``, ``PRIVATE``, ``COOKIE``, ``SIGNATURE``, a word ``KEY``);
* for processes on the launching host (local launcher, the scheduler, mpirun itself) also the
  session variables in ``SESSION`` (``HOME``, ``USER``, locale, ``TMPDIR``...): remote processes
  get those from their own login instead;
* the loader's and the interpreter's code-injection variables (``LOADER``: ``LD_PRELOAD``,
  ``LD_AUDIT``, ``PYTHONSTARTUP``...) only to processes on the launching host, which run with
  this launcher's own already: on another machine they would load a library or run a file of
  that machine's, named by this one. ``LD_LIBRARY_PATH`` is forwarded as ``PATH`` is (a search
  path that CUDA and NCCL installations need, not code that runs by itself);
* every variable named with ``--env NAME`` (the launcher's value) or ``--env NAME=VALUE``,
  whatever its name, because the user asked for it.

The launcher then adds the contract variables (``bandwidth.launch.contract.environment``) on top.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from bandwidth.errors import ConfigError
from bandwidth.launch.contract.environment import VARIABLES

FORWARDED = frozenset({
    "PATH", "PYTHONPATH", "LD_LIBRARY_PATH", "VIRTUAL_ENV", "CONDA_PREFIX",
    "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "CUDA_LAUNCH_BLOCKING", "CUDA_HOME",
    "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "KMP_AFFINITY",
    "PYTORCH_CUDA_ALLOC_CONF", "DMLC_INTERFACE", "DMLC_LOCAL"})
FORWARDED_PREFIXES = ("NCCL_", "GLOO_", "TORCH_", "MXNET_", "PS_", "UCX_", "FI_")
SESSION = frozenset({"HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ", "TMPDIR",
                     "TERM"})
SESSION_PREFIXES = ("LC_",)
LOADER = frozenset({"LD_PRELOAD", "LD_AUDIT", "LD_BIND_NOW", "LD_DEBUG", "LD_DEBUG_OUTPUT",
                    "LD_PROFILE", "PYTHONSTARTUP", "PYTHONINSPECT", "PYTHONHOME",
                    "PYTHONEXECUTABLE", "PYTHONBREAKPOINT"})
_CREDENTIAL = re.compile(r"SECRET|TOKEN|PASSW|CREDENTIAL|AUTH|APIKEY|ACCESSKEY|PRIVATE|COOKIE"
                         r"|SIGNATURE|(^|_)KEY($|_)|_KEY", re.IGNORECASE)
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def is_forwarded(name: str, same_host: bool) -> bool:
    """Whether the launcher passes its own ``name`` on without being asked with ``--env``."""
    if _CREDENTIAL.search(name):
        return False
    if name in FORWARDED or name.startswith(FORWARDED_PREFIXES):
        return True
    return same_host and (name in SESSION or name in LOADER or name.startswith(SESSION_PREFIXES))


def parse_env_flags(flags: Iterable[str],
                    environ: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """Resolve ``--env NAME`` / ``--env NAME=VALUE`` flags to ``(name, value)`` pairs."""
    pairs = []
    for flag in flags:
        name, sep, value = flag.partition("=")
        if not _NAME.match(name):
            raise ConfigError(f"--env {flag!r}: {name!r} is not a variable name "
                              "(expected NAME or NAME=VALUE)")
        if name in VARIABLES:
            raise ConfigError(f"--env {flag!r}: {name} is set by the launcher for every process "
                              "(see bandwidth.launch.contract.environment) and cannot be "
                              "overridden")
        if not sep:
            if name not in environ:
                raise ConfigError(f"--env {name}: {name} is not set in the launcher's "
                                  f"environment; export it or write --env {name}=VALUE")
            value = environ[name]
        pairs.append((name, value))
    return tuple(pairs)


def child_environ(environ: Mapping[str, str], env_flags: Iterable[tuple[str, str]], *,
                  same_host: bool) -> dict[str, str]:
    """The forwarded part of a child's environment (the contract variables come on top)."""
    env = {name: value for name, value in environ.items() if is_forwarded(name, same_host)}
    env.update(env_flags)
    return env
