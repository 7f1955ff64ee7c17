"""Join the launcher's rendezvous (so the heartbeat runs), then sleep: a process to stop or kill.

Usage (under the launcher): beat.py SECONDS
"""

import os
import sys
import time

from bandwidth.launch.contract.environment import Role, join_store

role = Role.from_environ(os.environ)
store = join_store(role, timeout_s=60)
print(f"joined {role.rank} {os.getpid()}", file=sys.stderr, flush=True)
time.sleep(float(sys.argv[1]))
