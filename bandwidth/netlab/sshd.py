"""The lab's ssh: a key pair and a host key of its own, one ``sshd`` per host namespace listening
on the host's address, and a client configuration that reaches them with host keys checked.

Files, all under the lab's state directory (the user's ``~/.ssh`` is never read or changed):
``id_ed25519`` (the login key), ``host_ed25519`` (every host's key), ``authorized_keys``,
``known_hosts`` (every host address with that key), ``ssh_config`` (pass it to the launcher with
``--ssh-config``), ``sshd_config.I`` and ``sshd.I.log`` per host. Logins are as the user who made
the lab (root).
"""

from __future__ import annotations

import getpass
import os
import shutil
import subprocess
import time
from pathlib import Path

from bandwidth.netlab.lab import Host, Lab, NetlabError, sshd_path


def make_keys(state: Path) -> None:
    for key in ("host_ed25519", "id_ed25519"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "bandwidth-netlab",
                        "-f", str(state / key)], check=True, capture_output=True)
    shutil.copy(state / "id_ed25519.pub", state / "authorized_keys")


def write_client_config(lab: Lab) -> Path:
    state = lab.state_dir
    host_key = " ".join((state / "host_ed25519.pub").read_text().split()[:2])
    (state / "known_hosts").write_text("".join(f"{h.address} {host_key}\n" for h in lab.hosts))
    config = state / "ssh_config"
    config.write_text("\n".join([
        f"# the ssh configuration of the bandwidth.netlab lab {lab.name}",
        "Host *", f"  User {getpass.getuser()}", f"  IdentityFile {state / 'id_ed25519'}",
        "  IdentitiesOnly yes", f"  UserKnownHostsFile {state / 'known_hosts'}",
        "  GlobalKnownHostsFile /dev/null", "  StrictHostKeyChecking yes", "  LogLevel ERROR",
        ""]))
    return config


def sshd_config(lab: Lab, host: Host) -> Path:
    state = lab.state_dir
    path = state / f"sshd_config.{host.index}"
    path.write_text("\n".join([
        f"ListenAddress {host.address}:22", f"HostKey {state / 'host_ed25519'}",
        f"AuthorizedKeysFile {state / 'authorized_keys'}", "PidFile none", "UsePAM no",
        "StrictModes no", "PasswordAuthentication no", "KbdInteractiveAuthentication no",
        "PubkeyAuthentication yes", "PermitRootLogin prohibit-password",
        "AllowTcpForwarding no", "X11Forwarding no", "PrintMotd no", "PrintLastLog no",
        "MaxStartups 64", "MaxSessions 64", "LogLevel ERROR",
        # A client gone silent (a host's link set down) ends its session in 6 s, and with it
        # the launcher's guard and the program under it, as on a cluster with this setting.
        "ClientAliveInterval 2", "ClientAliveCountMax 3", ""]))
    return path


def start_sshd(lab: Lab, host: Host) -> int:
    """Start the host's sshd in its namespace, detached from this process; returns its pid."""
    os.makedirs("/run/sshd", exist_ok=True)        # sshd's privilege-separation directory
    log = (lab.state_dir / f"sshd.{host.index}.log").open("w")
    proc = subprocess.Popen(["ip", "netns", "exec", host.namespace, sshd_path(), "-D", "-e",
                             "-f", str(sshd_config(lab, host))],
                            stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                            start_new_session=True)
    return proc.pid


def ssh_argv(lab: Lab, host: Host, *command: str, timeout_s: int = 5) -> list[str]:
    return ["ssh", "-F", str(lab.state_dir / "ssh_config"), "-o", "BatchMode=yes", "-o",
            f"ConnectTimeout={timeout_s}", host.address, *command]


# How long ``up`` waits for each host's sshd to accept a login: generous, since on a loaded host
# (other jobs on every core) a first login took over 15 s, the bound this once had.
READY_TIMEOUT_S = 90.0


def wait_ready(lab: Lab, host: Host, timeout_s: float = READY_TIMEOUT_S) -> None:
    """Wait until a login to ``host`` runs ``true``; NetlabError (one line, with sshd's log or
    ssh's last words) otherwise. A login attempt that does not end in time is one more failed
    attempt, never a TimeoutExpired traceback."""
    deadline = time.monotonic() + timeout_s
    last = ""
    while time.monotonic() < deadline:
        left = max(1.0, deadline - time.monotonic())
        try:
            proc = subprocess.run(ssh_argv(lab, host, "true", timeout_s=int(min(left, 30))),
                                  capture_output=True, text=True, timeout=left)
        except subprocess.TimeoutExpired:
            last = f"a login did not finish within {left:.0f} s (a loaded host?)"
            continue
        if proc.returncode == 0:
            return
        last = proc.stderr.strip()
        time.sleep(0.2)
    log = (lab.state_dir / f"sshd.{host.index}.log").read_text().strip()
    raise NetlabError(f"sshd on {host.address} ({host.namespace}) did not accept the lab's key "
                      f"within {timeout_s:g} s: "
                      f"{(log or last).splitlines()[-1] if (log or last) else 'no message'}")
