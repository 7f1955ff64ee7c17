"""Fault fuzz: random process, signal and moment, and whether the launcher names the one hurt.

    python benchmarks/fault_fuzz.py --cases 100 --seed 1            # loopback (local launcher)
    sudo python benchmarks/fault_fuzz.py --lab --cases 50 --seed 2   # across a netlab of 3 hosts

Each case launches ``measure.py`` (``dist_sync``, ``dist_async`` with 2 workers and 1 server, or
``dist_nccl`` with 2 workers of 2 CPU devices each) under ``launch.py`` with ``--report``, waits
a random moment after the chosen process appears, and sends it SIGKILL, SIGTERM or SIGSTOP (a
per-device rank of ``dist_nccl`` too). A case holds when: the launcher exits non-zero (143 for a
SIGTERM, 137 for a SIGKILL, 1 for a stopped process), its one ``FAIL:`` line and its report's
root cause name the process hurt (for a per-device rank: its worker, with the rank's pid), a
stopped process is named within 3 heartbeat intervals of its last beat, no Python traceback is
printed, and no process of the job is left anywhere. Prints one line per case and a table;
exit status 1 if any case broke.

``--lab`` builds a ``bandwidth.netlab`` lab (root, ip, sshd), runs every process on its hosts
over ssh, and hurts them there (the namespaces share this machine's process table). Hold
``flock /tmp/heavy.lock`` on shared machines.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
HEARTBEAT_S = 1.0
MODES = ("dist_sync", "dist_async", "dist_nccl")
SIGNALS = ("SIGKILL", "SIGTERM", "SIGSTOP")


@dataclass
class Case:
    index: int
    mode: str
    role: str           # worker | server | device (a per-device rank of dist_nccl)
    task: int           # worker/server index
    device_rank: int    # for "device": which of the worker's ranks
    sig: str
    delay_s: float

    @property
    def label(self) -> str:
        who = f"{self.role} {self.task}" + (f" rank {self.device_rank}"
                                            if self.role == "device" else "")
        return f"{self.mode:<10} {who:<16} {self.sig:<8} +{self.delay_s:.1f}s"


def draw(rng: random.Random, index: int, modes=MODES, max_delay_s: float = 4.0) -> Case:
    mode = rng.choice(modes)
    if mode == "dist_nccl":
        role = rng.choice(("worker", "device"))
        task, device_rank = rng.randrange(2), rng.randrange(2)
    else:
        role, task, device_rank = rng.choice(("worker", "server")), 0, 0
        task = rng.randrange(2) if role == "worker" else 0
    return Case(index, mode, role, task, device_rank, rng.choice(SIGNALS),
                round(rng.uniform(0.0, max_delay_s), 1))


def command(case: Case, marker: str, report: str, lab_flags: list[str]) -> list[str]:
    servers = "0" if case.mode == "dist_nccl" else "1"
    flags = ["--cpus", "2"] if case.mode == "dist_nccl" else ["--cpus", "1"]
    if case.mode == "dist_async":
        flags += ["--optimizer", "sgd"]    # which dist_async needs (without: exit 2, bad input)
    launch = [sys.executable, str(ROOT / "launch.py"), "-n", "2", "-s", servers,
              "--timeout", "30", "--report", report, "--heartbeat-interval", f"{HEARTBEAT_S:g}"]
    launch += lab_flags
    return launch + [sys.executable, str(ROOT / "bandwidth" / "measure.py"), "--kv-store",
                     case.mode, *flags, "--network", "mlp", "--num-batches", "100000000",
                     "--timeout", "10", "--no-reference", "--seed", marker]


def processes() -> dict[int, tuple[int, bytes]]:
    """pid -> (parent pid, command line) of every process."""
    found = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            except OSError:
                continue
            found[int(entry)] = (int(stat[stat.rfind(")") + 2:].split()[1]), cmdline)
    return found


def environ_of(pid: int) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    return dict(item.split("=", 1) for item in raw.decode(errors="replace").split("\0")
                if "=" in item)


def find_target(case: Case, marker: str) -> int | None:
    table = processes()
    mine = [pid for pid, (_, cmd) in table.items() if marker.encode() in cmd
            and b"measure.py" in cmd and b"launch.py" not in cmd]
    role = "worker" if case.role == "device" else case.role
    for pid in mine:
        env = environ_of(pid)
        if env.get("DMLC_ROLE") == role and env.get("DMLC_TASK_ID") == str(case.task):
            if case.role != "device":
                return pid
            for child, (parent, cmd) in table.items():
                if parent == pid and b"bandwidth.execution.rank" in cmd and \
                        f"--rank\0{case.device_rank}\0".encode() in cmd:
                    return child
    return None


def job_pids(marker: str, seen: set[int]) -> set[int]:
    """Processes of the job: those with the marker and their descendants (per-device ranks)."""
    table = processes()
    found = {pid for pid, (_, cmd) in table.items() if marker.encode() in cmd}
    grew = True
    while grew:
        more = {pid for pid, (parent, _) in table.items() if parent in found} - found
        found |= more
        grew = bool(more)
    seen |= found
    return found


def run_case(case: Case, lab_flags: list[str], lab=None) -> dict:
    marker = str(10_000_000 + case.index * 7919 + random.randrange(1000))
    with tempfile.TemporaryDirectory(prefix="fault-fuzz-") as tmp:
        report = os.path.join(tmp, "report.json")
        proc = subprocess.Popen(command(case, marker, report, lab_flags), cwd=ROOT,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                env=dict(os.environ, PYTHONPATH=str(ROOT)))
        try:
            return _hurt_and_judge(case, proc, marker, report, lab)
        except BaseException:
            proc.terminate()              # the launcher stops the job (and ends with 143)
            proc.wait(30)
            raise


def _hurt_and_judge(case: Case, proc: subprocess.Popen, marker: str, report: str, lab) -> dict:
    seen: set[int] = set()
    target, deadline = None, time.monotonic() + 90
    while target is None and proc.poll() is None and time.monotonic() < deadline:
        job_pids(marker, seen)
        target = find_target(case, marker)
        time.sleep(0.05)
    hurt_at = time.monotonic() + case.delay_s
    while proc.poll() is None and time.monotonic() < hurt_at:
        job_pids(marker, seen)
        time.sleep(0.05)
    if target is not None and proc.poll() is None:
        try:
            os.kill(target, getattr(signal, case.sig))
        except ProcessLookupError:
            target = None
    try:
        _, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
    time.sleep(1.0)
    left = [pid for pid in seen | job_pids(marker, set()) if _alive(pid)]
    for pid in left:
        _kill(pid)
    if lab is not None:
        from fault_lab import leftovers
        left += leftovers(lab)
    doc = json.loads(Path(report).read_text()) if Path(report).exists() else {}
    return judge(case, target, proc.returncode, err, doc, left)


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2:][:1] not in ("Z", "X")


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass


def judge(case: Case, target: int | None, code: int, err: str, doc: dict,
          left: list[int]) -> dict:
    fail = next((line for line in err.splitlines() if line.startswith("FAIL:")), "")
    root = doc.get("root_cause") or {}
    rank = case.task + (2 if case.role == "server" else 0)
    problems = []
    if target is None:
        problems.append("the process to hurt never appeared")
    expected = {"SIGKILL": 137, "SIGTERM": 143, "SIGSTOP": 1}[case.sig]
    if case.role == "device" and case.sig != "SIGSTOP":
        expected = 1                    # its worker's measure.py names it and exits 1
    if code != expected:
        problems.append(f"exit {code}, expected {expected}")
    subject = f"{'worker' if case.role == 'device' else case.role} {case.task} (rank {rank})"
    if not fail.startswith(f"FAIL: {subject} on "):
        problems.append(f"FAIL line names another: {fail[:160]!r}")
    if root.get("rank") != rank:
        problems.append(f"report's root cause is rank {root.get('rank')}")
    if case.role == "device" and target is not None and f"pid {target}" not in fail:
        problems.append("the per-device rank's pid is not on the FAIL line")
    silent = root.get("silent_s")
    if case.sig == "SIGSTOP" and silent is not None and silent > 3 * HEARTBEAT_S + 0.5:
        problems.append(f"named {silent:.1f} s after its last heartbeat")
    if "Traceback" in err:
        problems.append("a traceback was printed")
    if left:
        problems.append(f"{len(left)} processes left")
    return {"case": case.label, "held": not problems, "problems": problems, "exit": code,
            "fail": fail, "silent_s": silent, "lines": len(err.splitlines())}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=100)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--max-delay", type=float, default=4.0, metavar="SECONDS",
                        help="the moment: up to this long after the process appears")
    parser.add_argument("--lab", action="store_true", help="across a netlab lab (root)")
    parser.add_argument("--json", metavar="FILE", help="write every case's outcome")
    args = parser.parse_args(argv)
    modes = tuple(args.modes.split(","))
    if args.cases < 1 or not set(modes) <= set(MODES):
        parser.error(f"--cases >= 1 and --modes among {','.join(MODES)}")
    rng = random.Random(args.seed)
    cases = [draw(rng, i, modes, args.max_delay) for i in range(args.cases)]
    outcomes: list[dict] = []
    # SIGTERM (a `timeout` around the run): stop after the case in progress, remove the lab,
    # and print the table of the cases run so far
    signal.signal(signal.SIGTERM, _stop)
    try:
        if args.lab:
            from fault_lab import lab_hosts
            with lab_hosts() as (flags, lab):
                for case in cases:
                    outcomes.append(_show(run_case(case, flags, lab)))
        else:
            for case in cases:
                outcomes.append(_show(run_case(case, [])))
    except Interrupted:
        print(f"interrupted after {len(outcomes)} of {len(cases)} cases")
    return summarize(outcomes, args.json) if outcomes else 1


class Interrupted(Exception):
    pass


def _stop(signum, frame):
    raise Interrupted()


def _show(outcome: dict) -> dict:
    mark = "held " if outcome["held"] else "BROKE"
    print(f"{mark} {outcome['case']}  exit {outcome['exit']:<3} {outcome['lines']:>3} lines"
          + ("" if outcome["held"] else f"  {'; '.join(outcome['problems'])}"), flush=True)
    return outcome


def summarize(outcomes: list[dict], json_path: str | None) -> int:
    by_kind = collections.defaultdict(lambda: [0, 0])
    for outcome in outcomes:
        mode, who, sig = outcome["case"].split()[0], outcome["case"].split()[1], \
            outcome["case"].split()[-2]
        by_kind[(mode, who, sig)][0] += outcome["held"]
        by_kind[(mode, who, sig)][1] += 1
    print(f"\n{'mode':<10} {'process':<8} {'signal':<8} {'held':>9}")
    for (mode, who, sig), (held, total) in sorted(by_kind.items()):
        print(f"{mode:<10} {who:<8} {sig:<8} {held:>4}/{total:<4}")
    held = sum(o["held"] for o in outcomes)
    silent = [o["silent_s"] for o in outcomes if o["silent_s"] is not None]
    print(f"held {held}/{len(outcomes)}" + (f"; stopped processes named at most "
                                            f"{max(silent):.1f} s after their last heartbeat "
                                            f"(interval {HEARTBEAT_S:g} s)" if silent else ""))
    if json_path:
        Path(json_path).write_text(json.dumps(outcomes, indent=2) + "\n")
    return 0 if held == len(outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
