"""The local launcher: every process on this host, started directly with an argument list.

Each process gets the forwarded environment (``bandwidth.launch.contract.forwarding``, session
variables included) plus its contract variables, runs in the launcher's working directory, and is
supervised by ``bandwidth.launch.supervision.supervisor``. The ssh launcher starts its scheduler
this way too, since the scheduler always runs on the launching host.
"""

from __future__ import annotations

from bandwidth.launch.contract.environment import Role
from bandwidth.launch.contract.forwarding import child_environ
from bandwidth.launch.planning.plan import Plan
from bandwidth.launch.supervision.supervisor import Child


def local_child(plan: Plan, role: Role) -> Child:
    """``role``'s process on this host."""
    env = child_environ(plan.environ, plan.config.env, same_host=True)
    env.update(role.to_environ())
    child = Child(role.label, role.title, plan.config.command, env, cwd=plan.config.workdir)
    child.role = role
    return child


def build(plan: Plan) -> list[Child]:
    return [local_child(plan, role) for role in plan.roles]
