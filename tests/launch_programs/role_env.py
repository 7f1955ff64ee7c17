"""Write this process's contract, environment, argv and cwd to OUTDIR/<role>-<task>.json.

Usage (under the launcher): role_env.py OUTDIR [args...]
"""

import dataclasses
import json
import os
import sys
from pathlib import Path

from bandwidth.launch.contract.environment import Role

role = Role.from_environ(os.environ)
record = {"role": dataclasses.asdict(role), "env": dict(os.environ), "argv": sys.argv[2:],
          "cwd": os.getcwd()}
Path(sys.argv[1], f"{role.name}-{role.task_id}.json").write_text(json.dumps(record))
