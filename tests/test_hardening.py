"""Issue 11's hardening, the parts that need no signals: size sweeps that end, dist_nccl's GPU
shares, and the smaller faults (IPv6 hosts, what reaches a command line, the credential filter,
output paths, network names, the memory estimate)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from bandwidth.config.values import MAX_SWEEP_SIZES, parse_size, size_sweep
from bandwidth.errors import ConfigError
from bandwidth.execution.roles import gpu_shares

ROOT = Path(__file__).resolve().parent.parent


def test_a_factor_that_rounds_back_still_grows_every_size():
    sizes = size_sweep(1, 1 << 30, 1.5)
    assert sizes[:6] == [1, 2, 3, 4, 6, 9]
    assert all(b > a for a, b in zip(sizes, sizes[1:]))
    assert sizes[-1] <= 1 << 30 and len(sizes) < MAX_SWEEP_SIZES


def test_a_sweep_of_too_many_sizes_is_refused():
    with pytest.raises(ConfigError, match="more than 1000 sizes"):
        size_sweep(1, 1 << 30, 1.001)


@pytest.mark.parametrize("factor", [float("nan"), float("inf"), 1.0, 0.5, -2.0])
def test_a_factor_that_cannot_sweep_is_refused(factor):
    with pytest.raises(ConfigError, match="-f must be a number greater than 1"):
        size_sweep(1, 1 << 20, factor)


@pytest.mark.parametrize("text", ["1e400", "inf", "nan", "-1", "0", "1e30", "2000000G", "x"])
def test_sizes_out_of_range_are_refused(text):
    with pytest.raises(ConfigError):
        parse_size(text)


GPUS = ("GPU-a", "GPU-b", "GPU-c", "GPU-d")


def test_workers_on_separate_machines_keep_every_gpu():
    assert gpu_shares([("n1", "m1", GPUS[:2]), ("n2", "m2", GPUS[:2])]) == [(0, 1), (0, 1)]


def test_workers_sharing_a_machines_gpus_split_them_in_worker_order():
    workers = [("h", "m1", GPUS), ("h", "m1", GPUS), ("g", "m2", GPUS[:2])]
    assert gpu_shares(workers) == [(0, 1), (2, 3), (0, 1)]


def test_the_same_machine_under_two_names_is_one_machine():
    assert gpu_shares([("127.0.0.1", "m", GPUS[:2]), ("localhost", "m", GPUS[:2])]) == [(0,), (1,)]


def test_disjoint_gpus_on_one_machine_are_kept():
    assert gpu_shares([("h", "m", GPUS[:2]), ("h", "m", GPUS[2:])]) == [(0, 1), (0, 1)]


def test_an_uneven_split_is_refused_naming_the_workers():
    with pytest.raises(ConfigError, match=r"worker 0, worker 1 on h share the same 3 GPUs, "
                                          r"which do not split evenly into 2 workers"):
        gpu_shares([("h", "m", GPUS[:3]), ("h", "m", GPUS[:3])])


def test_overlapping_different_sets_are_refused_naming_the_overlap():
    with pytest.raises(ConfigError, match=r"overlapping but different GPU sets \(shared: GPU-b\)"):
        gpu_shares([("h", "m", GPUS[:2]), ("h", "m", GPUS[1:3])])


def test_shares_of_different_sizes_over_the_job_are_refused():
    with pytest.raises(ConfigError, match="drive 1 to 2 GPUs each"):
        gpu_shares([("h", "m", GPUS[:2]), ("h", "m", GPUS[:2]), ("g", "m2", GPUS[:2])])


# ----- item 9: the smaller faults -----


def _ssh_children(hosts_text: str, tmp_path, *env_flags: str):
    from bandwidth.launch.launchers import ssh
    from bandwidth.launch.planning.config import LaunchConfig
    from bandwidth.launch.contract.environment import Job
    from bandwidth.launch.contract.forwarding import parse_env_flags
    from bandwidth.launch.planning.hostfile import parse_hostfile
    from bandwidth.launch.planning.plan import make_plan

    (tmp_path / "hosts").write_text(hosts_text)
    hosts = tuple(parse_hostfile(tmp_path / "hosts"))
    config = LaunchConfig(command=("python3", "prog.py"), num_workers=1, num_servers=0,
                          hosts=hosts, env=parse_env_flags(env_flags, {}))
    job = Job(1, 0, "10.0.0.1", 29500, 29500, "ssh", "f" * 32)
    return ssh.build(make_plan(config, job, hosts, place_scheduler=False, environ={}))


def test_an_ipv6_host_reaches_ssh_without_its_brackets(tmp_path):
    (child,) = _ssh_children("[::1]:2222\n", tmp_path)
    assert child.argv[child.argv.index("--") + 1] == "::1"
    assert child.argv[child.argv.index("-p") + 1] == "2222"


def test_env_values_and_the_secret_are_on_no_command_line(tmp_path):
    (child,) = _ssh_children("node1\n", tmp_path, "HF_TOKEN_LIKE=hunter2-value")
    words = " ".join(child.argv)
    assert "hunter2-value" not in words and "f" * 32 not in words
    sent = child.remote_env.decode()
    assert "hunter2-value" in sent and "f" * 32 in sent and sent.endswith("\n")


@pytest.mark.parametrize("name", ["PS_AUTH", "TORCH_APIKEY", "NCCL_ACCESSKEY", "MXNET_KEY",
                                  "GLOO_PRIVATE_THING", "TORCH_COOKIE", "PS_SECRET"])
def test_credential_like_names_are_not_forwarded(name):
    from bandwidth.launch.contract.forwarding import is_forwarded

    assert not is_forwarded(name, same_host=True)


@pytest.mark.parametrize("name", ["NCCL_IB_PKEY", "NCCL_SOCKET_IFNAME", "TORCH_HOME", "PS_VERBOSE"])
def test_tuning_names_are_still_forwarded(name):
    from bandwidth.launch.contract.forwarding import is_forwarded

    assert is_forwarded(name, same_host=False)


def _measure(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, str(ROOT / "bandwidth" / "measure.py"), *args],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def test_an_unwritable_output_is_refused_before_measuring(tmp_path):
    done = _measure("--kv-store", "local", "--cpus", "2", "--network", "mlp", "--image-shape",
                    "1,28,28", "--num-classes", "10", "--csv", str(tmp_path / "no" / "x.csv"))
    assert done.returncode == 2
    assert "iter" not in done.stdout and "num of arrays" not in done.stdout
    assert done.stderr.strip().endswith("does not exist")


def test_a_file_named_like_a_network_does_not_replace_it(tmp_path):
    (tmp_path / "mlp").write_text('[["forged", [1]]]')
    done = _measure("--network", "mlp", "--dry-run", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("num of arrays = 6,") and "forged" not in done.stdout


def test_the_memory_check_counts_nccls_processes(monkeypatch):
    """vgg-16 under nccl on 2 CPU devices used 7.13 GB; the old estimate was 5.94 GB."""
    import bandwidth.plan.plan as plan
    from bandwidth.backends.registry import store_class
    from bandwidth.config.options import Config
    from bandwidth.errors import OutOfMemoryError

    monkeypatch.setattr(plan, "free_bytes", lambda devices: [7_130_000_000])
    with pytest.raises(OutOfMemoryError, match="needs 7.1"):
        plan.check_memory(plan.make_plan(Config(network="vgg", kv_store="nccl", cpus=2),
                                            store_class))
