"""The lab for ``fault_fuzz.py --lab``: 3 ``bandwidth.netlab`` namespace hosts with an sshd each.

``lab_hosts()`` makes the lab (name ``h3ffz``, subnet 198.18.133.0/24), yields the launcher's
extra flags (``-H hosts --ssh-config ssh_config``) and the lab, and removes it on every exit path
(also whatever a crashed run left). ``leftovers(lab)``: processes still in its namespaces other
than the sshd daemons. Needs root, ip, tc and sshd.
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bandwidth.netlab import lab as labmod  # noqa: E402
from bandwidth.netlab.cli import up  # noqa: E402

NAME = "h3ffz"
SUBNET = "198.18.133.0/24"


@contextlib.contextmanager
def lab_hosts(count: int = 3):
    missing = labmod.missing_prerequisites()
    if missing:
        raise SystemExit(f"fault_fuzz.py: error: --lab needs {', '.join(missing)}")
    labmod.remove(NAME)
    made = up(NAME, count, None, {}, SUBNET)
    try:
        yield ["-H", str(made.state_dir / "hosts"), "--ssh-config",
               str(made.state_dir / "ssh_config")], made
    finally:
        labmod.remove(NAME)


def leftovers(lab) -> list[str]:
    found = []
    for host in lab.hosts:
        for pid in labmod.pids_in(host.namespace):
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if labmod.alive(pid) and not (" -D " in cmd and "sshd_config." in cmd):
                found.append(f"{host.address}: {pid} {cmd[:120]}")
    return found
