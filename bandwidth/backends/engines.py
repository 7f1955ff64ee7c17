"""The one interface through which a run carries out a measurement, whatever exchanges the arrays
(``--backend``): each backend says how it measures every device in this process, and which
module plays its roles (worker, server, scheduler) under launch.py. The run and measure.py call
``engine(config)`` and never test a backend's name; nothing here imports the run.

An engine gives: ``measure_here(plan, on_report)``, every device of the plan measured in this
process (the plain dict of bandwidth.measurement.tasks); ``open_here(plan, stack)``, a ready session
on every device for a run that interleaves backends (its clean-ups entered on ``stack``), and its
notes; ``roles()``, the module whose ``check_role`` and ``run_distributed`` play this process's
part under launch.py (None for the toolkit: its own roles are the distributed pipeline,
bandwidth.execution.roles, which sits above the backends); ``environment()``, what the preamble
adds about the backend (its version).

MXNet's engine is imported only when it is asked for (bandwidth.backends.mxnet_session), and it
imports ``mxnet`` itself only when it measures.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType

from bandwidth.config.options import Config
from bandwidth.measurement.tasks import measure_task, open_session
from bandwidth.plan.plan import Plan
from bandwidth.processes.group import LocalGroup


@dataclass(frozen=True)
class Engine:
    name: str
    # every device of the plan in this process: the measured dict of measurement.tasks
    measure_here: Callable[[Plan, Callable | None], dict]
    # every device of the plan in this process: (session, notes), clean-ups entered on the stack
    open_here: Callable[[Plan, contextlib.ExitStack], tuple[object, list[str]]]
    # the module whose check_role(kv_store, role, servers_needed) and
    # run_distributed(plan, role, on_report) play this process's part under launch.py;
    # None: the toolkit's own (bandwidth.execution.roles, a floor above the backends)
    roles: Callable[[], ModuleType] | None
    # entries for the run's environment (the preamble, JSON); may fail in one line first
    environment: Callable[[], dict] = dict


def _toolkit_here(plan: Plan, on_report) -> dict:
    return measure_task(plan, list(range(plan.devices.n)), LocalGroup(), on_report)


def _toolkit_open(plan: Plan, stack: contextlib.ExitStack) -> tuple[object, list[str]]:
    return open_session(plan, list(range(plan.devices.n)), LocalGroup())


def _mxnet_open(plan: Plan, stack: contextlib.ExitStack) -> tuple[object, list[str]]:
    from bandwidth.backends import mxnet_session

    stack.enter_context(mxnet_session.failures(plan.config.kv_store))
    session = mxnet_session.open_session(plan)
    return session, session.notes()


def _mxnet_here(plan: Plan, on_report) -> dict:
    from bandwidth.backends import mxnet_session

    return mxnet_session.measure_task(plan, on_report)


def _mxnet_environment() -> dict:
    from bandwidth.backends import mxnet_backend

    return {"mxnet": mxnet_backend.import_mxnet().__version__}


def _mxnet_roles() -> ModuleType:
    from bandwidth.backends import mxnet_session

    return mxnet_session


ENGINES: dict[str, Engine] = {
    "toolkit": Engine("toolkit", _toolkit_here, _toolkit_open, None),
    "mxnet": Engine("mxnet", _mxnet_here, _mxnet_open, _mxnet_roles, _mxnet_environment),
}


def engine(config: Config) -> Engine:
    return ENGINES[config.backend]
