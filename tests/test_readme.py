"""Every command of README.md's ```bash blocks is run here, so that the README cannot drift.

The commands are read from README.md itself (continuation lines joined) and each must match
exactly one entry of CASES, the one table of this file; an entry that matches no command fails
too. An entry says how its command runs:

* ``run``: as written, with the declared CPU-sized substitutions (``subs``, applied in order):
  GPU-sized networks become CPU_SIZED (the form the README gives for CPU devices), long sweeps
  shorter, and ``--num-batches 2`` is added to measurements. Needs ``gpus`` GPUs (skipped
  without them, with the reason).
* ``skip``: not run, with the reason (installs, other machines, Slurm, Kubernetes...).
* ``netlab``: the lab's lines, run in order by test_readme_netlab only as root and under the
  shared lock, with a lab name of this test's own.

The commands run in one scratch folder (the repository's code linked into it), in README order,
so that files one writes (``hosts``, ``hosts.json``, ``toolkit.json``) are there for the next.
"""

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass

import pytest
from conftest import ROOT

README = ROOT / "README.md"
# The CPU-sized form of the README's GPU-sized examples (the README says so, in these words).
CPU_SIZED = "--network mlp --image-shape 1,28,28 --num-classes 10"
SHORT = " --num-batches 2 --no-reference"     # CI time: no flat reference, no ceiling probe
NET200 = ("--network resnet --num-layers 200", CPU_SIZED)
NET50 = ("--network resnet --num-layers 50", CPU_SIZED)
FROM_ROOT = ("python measure.py", "python bandwidth/measure.py")   # the scratch folder is the root


@dataclass(frozen=True)
class Case:
    match: str                         # a substring of exactly one README command
    kind: str                          # run | skip | netlab
    subs: tuple[tuple[str, str], ...] = ()
    append: str = ""
    gpus: int = 0
    why: str = ""
    needs: str = ""                    # a module that must import (mxnet)


CASES = (
    Case("pip install torch --index-url", "skip", why="installs torch (this environment has it)"),
    Case("pip install . && python bandwidth/measure.py", "run",
         (("pip install . && ", ""),), append=f" {CPU_SIZED}{SHORT}"),
    Case("pip install '.[test]'", "skip", why="the test suite itself"),
    Case("--kv-store device --gpus 0,1 --network resnet", "run", (FROM_ROOT, NET200),
         append=SHORT, gpus=2),
    Case("--kv-store local --network resnet --num-layers 200", "run", (FROM_ROOT, NET200),
         append=SHORT),
    Case("--network inception-v3 --optimizer sgd", "run",
         (FROM_ROOT, ("--image-shape 3,299,299 --network inception-v3", CPU_SIZED)),
         append=SHORT),
    Case("--kv-store nccl --network llama-1b", "run",
         (FROM_ROOT, ("--network llama-1b --dtype bfloat16", CPU_SIZED)), append=SHORT),
    Case("--kv-store local --cpus 4 --network mlp", "run", (FROM_ROOT,), append=SHORT),
    Case("--num-layers 200 --dry-run", "run", (FROM_ROOT,)),
    Case("--kv-store local,device,nccl --network resnet,vgg", "run",
         (FROM_ROOT, ("--network resnet,vgg", "--network mlp,lenet --image-shape 1,28,28 "
                                              "--num-classes 10")), append=SHORT),
    Case("--kv-store nccl --scaling", "run", (FROM_ROOT, NET200), append=SHORT),
    Case("--kv-store nccl --network flat -b 1M -e 1G", "run", (FROM_ROOT, ("-e 1G", "-e 4M")),
         append=SHORT),
    Case("python -m bandwidth.ceiling -b 1M -e 1G -f 2 --json", "run",
         (("-e 1G", "-e 4M"),), append=" --mb 16"),
    Case('echo "127.0.0.1" > hosts', "run"),
    Case("-n 1 -s 4 python bandwidth/measure.py --kv-store dist_sync_device", "run", (NET200,),
         append=SHORT),
    Case("--kv-store dist_async --optimizer sgd --cpus 2", "run", append=f" {CPU_SIZED}{SHORT}"),
    Case("--kv-store dist_nccl --gpus 0,1,2,3", "run", append=f" {CPU_SIZED}{SHORT}", gpus=4),
    Case("python -m bandwidth.ceiling --network --json hosts.json", "run", append=" --mb 8"),
    Case("--network-ceiling hosts.json", "run", append=f" {CPU_SIZED}{SHORT}"),
    Case("printf '10.0.0.1", "skip", why="addresses of two real machines"),
    Case("--link-rate 10gbit", "skip", why="two real machines at 10.0.0.1 and 10.0.0.2"),
    Case('PY="$(command -v python3)"', "netlab"),
    Case('sudo "$PY" -m bandwidth.netlab up', "netlab"),
    Case('sudo "$PY" launch.py -H /run/bandwidth-netlab', "netlab"),
    Case('sudo "$PY" -m bandwidth.netlab down', "netlab"),
    Case("salloc -N 2", "skip", why="a Slurm allocation (tests/test_launch_slurm.py)"),
    Case("--nproc-per-node 2 -m bandwidth.measure --kv-store dist_nccl --gpus 0,1", "run",
         append=f" {CPU_SIZED}{SHORT}", gpus=2),
    Case("--nproc-per-node 4 -m bandwidth.measure --kv-store dist_sync", "run",
         append=f" {CPU_SIZED}{SHORT}"),
    Case("kubectl apply", "skip", why="a Kubernetes cluster (tests/test_kubernetes_example.py)"),
    Case("compare tcp.json rdma.json", "skip",
         why="placeholders for two earlier runs' files (tests/test_compare.py)"),
    Case("compare gpus2.json gpus4.json gpus8.json", "skip",
         why="placeholders for runs on 2, 4 and 8 GPUs (tests/test_compare.py)"),
    Case("compare now.json --baseline base.json", "skip",
         why="placeholders for a run and its baseline (tests/test_regression_cli.py)"),
    Case("--repeat auto --baseline base.json", "skip",
         why="a baseline saved earlier on this machine (tests/test_ci_gate_cpu.py)"),
    Case("--expect-links --junit links.xml", "run", gpus=1),
    Case("python -m bandwidth.hostgate hosts.json", "skip",
         why="a matrix of two or more hosts (tests/test_hostgate.py): the loopback hosts file "
             "above is one host"),
    Case("--network --rounds --json rounds.json", "skip",
         why="25 hosts; on loopback: tests/test_host_rounds.py"),
    Case("python -m bandwidth.hostgate rounds.json", "skip",
         why="the rounds of the line above (tests/test_host_rounds.py)"),
    Case("pip install '.[mxnet]'", "skip", why="installs MXNet"),
    Case("--backend mxnet --kv-store device --cpus 2", "run", (NET50,), append=SHORT,
         needs="mxnet"),
    Case("--backend toolkit,mxnet --kv-store local,device", "run", append=SHORT, needs="mxnet"),
    Case("--scheduler python bandwidth/measure.py --backend mxnet", "run", (NET50,),
         append=SHORT, needs="mxnet"),
    Case("--json toolkit.json", "run", (NET50,), append=SHORT),
    Case("python -m bandwidth.compare toolkit.json mxnet.json", "run", needs="mxnet"),
    Case("--link-rate 25gbit   # step, what binds", "run"),
    Case("--link-rate 25gbit --max-in-flight 1", "run"),
    Case("python -m bandwidth.predict --plan", "run"),
    Case("--host-matrix hosts.json", "skip",
         why="a matrix of two or more hosts (tests/test_predict.py): the loopback hosts file "
             "above is one host"),
    Case("--kv-store dist_sync --link-rate 1gbit --predict", "run", append=f" {CPU_SIZED}{SHORT}"),
    Case("benchmarks/predict_check.py", "skip",
         why="builds a netlab of many hosts and runs for minutes (a benchmark)"),
)


def readme_commands() -> list[str]:
    """The commands of README.md's bash blocks, continuation lines joined, comments kept."""
    blocks = re.findall(r"```bash\n(.*?)```", README.read_text(), re.S)
    commands = []
    for block in blocks:
        for line in re.sub(r"\\\n\s*", "", block).splitlines():
            if line.strip() and not line.lstrip().startswith("#"):
                commands.append(line.strip())
    return commands


def case_of(command: str) -> Case:
    found = [case for case in CASES if case.match in command]
    assert len(found) == 1, (f"README command {command!r} matches {len(found)} entries of "
                             "tests/test_readme.py's CASES: classify it there")
    return found[0]


def cpu_sized(command: str, case: Case) -> str:
    for old, new in case.subs:
        assert old in command, f"substitution {old!r} does not apply to {command!r}"
        command = command.replace(old, new)
    code, sep, comment = command.partition("  #")         # the README's trailing comments
    return code.rstrip() + case.append


COMMANDS = readme_commands()


def test_every_readme_command_has_exactly_one_case_and_every_case_a_command():
    for command in COMMANDS:
        case_of(command)
    for case in CASES:
        assert any(case.match in command for command in COMMANDS), \
            f"CASES entry {case.match!r} matches no README command: remove it"


def test_the_readme_gives_the_cpu_sized_form_this_test_uses():
    text = " ".join(README.read_text().split())
    assert f"`{CPU_SIZED}`" in text
    assert "GPU-sized" in text


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    """A folder standing for the repository root: the code linked in, outputs written here."""
    folder = tmp_path_factory.mktemp("readme")
    for name in ("bandwidth", "networks", "examples", "launch.py", "hosts.example"):
        (folder / name).symlink_to(ROOT / name)
    return folder


def _gpus() -> int:
    import torch
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def _environ(scratch, python: str = sys.executable) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("DMLC_ROLE", "RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    env["PYTHONPATH"] = str(ROOT)
    # `python` and `python3` of the README are ``python``: a script that runs it by its own
    # path, not a symlink to it (Python started through a symlink outside a virtual
    # environment does not find the environment's pyvenv.cfg, and so none of its packages).
    shim = scratch / ".bin"
    shim.mkdir(exist_ok=True)
    for name in ("python", "python3"):
        wrapper = shim / name
        if not wrapper.exists():
            wrapper.write_text(f'#!/bin/sh\nexec "{python}" "$@"\n')
            wrapper.chmod(0o755)
    env["PATH"] = f"{shim}:{os.path.dirname(python)}:{env.get('PATH', '')}"
    return env


RUNS = [(command, case_of(command)) for command in COMMANDS if case_of(command).kind == "run"]


@pytest.mark.timeout(200)
@pytest.mark.parametrize("command, case", RUNS, ids=[c.match[:40] for _, c in RUNS])
def test_readme_command_runs(command, case, scratch):
    if case.gpus and _gpus() < case.gpus:
        pytest.skip(f"GPU-only: needs {case.gpus} GPU{'s' if case.gpus > 1 else ''}")
    if case.needs:
        pytest.importorskip(case.needs)
    line = cpu_sized(command, case)
    proc = subprocess.run(["bash", "-c", line], cwd=scratch, env=_environ(scratch),
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, f"{line}\n{proc.stderr[-3000:]}"
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]



@pytest.mark.timeout(200)
def test_the_readme_commands_run_from_a_virtual_environment(tmp_path):
    """As a user with a venv runs them: README's `python` is the venv's (its sys.prefix), and a
    measurement of the README runs through it. The venv sees this interpreter's packages
    (--system-site-packages: torch is not installed twice)."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip",
                    str(venv)], check=True, timeout=120)
    folder = tmp_path / "root"
    folder.mkdir()
    for name in ("bandwidth", "networks", "launch.py"):
        (folder / name).symlink_to(ROOT / name)
    env = _environ(folder, str(venv / "bin" / "python"))
    prefix = subprocess.run(["bash", "-c", 'python -c "import sys; print(sys.prefix)"'],
                            cwd=folder, env=env, capture_output=True, text=True, timeout=60)
    assert prefix.stdout.strip() == str(venv), prefix.stdout + prefix.stderr
    (command, case), = [(c, k) for c, k in RUNS
                        if k.match == "--kv-store local --cpus 4 --network mlp"]
    proc = subprocess.run(["bash", "-c", cpu_sized(command, case)], cwd=folder, env=env,
                          capture_output=True, text=True, timeout=150)
    assert proc.returncode == 0 and "error 0.000000" in proc.stdout, proc.stderr[-3000:]

NETLAB_NAME = "rdmelab"
NETLAB_SUBNET = "198.18.201.0/24"
STATE = __import__("pathlib").Path("/run/bandwidth-netlab")


@pytest.mark.timeout(600)
@pytest.mark.skipif(os.geteuid() != 0, reason="the lab needs root")
def test_readme_netlab(scratch):
    from bandwidth.netlab import lab as labmod
    missing = labmod.missing_prerequisites()
    if missing:                       # as tests/test_netlab.py (.ci/run installs them as root)
        pytest.skip(f"the lab needs {', '.join(missing)}")
    """The lab's lines in order, under the shared lock, with a lab name of this test's own (the
    default name's paths substituted) and the CPU-sized network; the lab is removed on every
    exit path."""
    lines = [cpu_sized(c, case_of(c)) for c in COMMANDS if case_of(c).kind == "netlab"]
    script = "\n".join(lines).replace("/run/bandwidth-netlab/bwlab/",
                                      f"/run/bandwidth-netlab/{NETLAB_NAME}/")
    script = re.sub(r"-m bandwidth.netlab (up|down)", rf"-m bandwidth.netlab \1 --name "
                                                      f"{NETLAB_NAME}", script)
    script = script.replace(f"up --name {NETLAB_NAME}",            # apart from other labs
                            f"up --name {NETLAB_NAME} --subnet {NETLAB_SUBNET}")
    script = script.replace("--link-rate 1gbit", f"--link-rate 1gbit {CPU_SIZED}{SHORT}")
    script = script.replace("sudo ", "")                     # already root
    down = f'"{sys.executable}" -m bandwidth.netlab down --name {NETLAB_NAME}'
    body = f"set -e\ntrap '{down} >/dev/null 2>&1' EXIT\n{script}\n"
    if shutil.which("flock") is None:
        pytest.skip("needs flock for the shared lock")
    # The lock within 240 s (exit 75 otherwise: skipped), the lab's lines within 300 s.
    proc = subprocess.run(["flock", "-w", "240", "-E", "75", "/tmp/heavy.lock", "timeout", "-k",
                           "10", "300", "bash", "-c", body], cwd=scratch,
                          env=_environ(scratch), capture_output=True, text=True, timeout=580)
    if proc.returncode == 75:
        pytest.skip("the shared lock /tmp/heavy.lock stayed busy for 240 s")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "% of link" in proc.stdout
    assert not (STATE / NETLAB_NAME).exists()
