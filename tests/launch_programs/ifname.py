"""Joins the launcher's rendezvous and prints this process's host, the interface Gloo will use and
the address the process reaches the rendezvous from (the netlab tests read it)."""

import os
import sys

from bandwidth.errors import BandwidthError
from bandwidth.launch.contract.environment import Role, join_store
from bandwidth.launch.contract.interface import towards_rendezvous

role = Role.from_environ(os.environ)
try:
    join_store(role, timeout_s=20)
except BandwidthError as err:
    print(f"ifname.py: error: {err}", file=sys.stderr)
    sys.exit(2)
choice = towards_rendezvous(role.master_addr, role.master_port, host=role.node_host)
print(f"{role.node_host} {os.environ.get('GLOO_SOCKET_IFNAME')} "
      f"{os.environ.get('NCCL_SOCKET_IFNAME')} {choice.address}", flush=True)
