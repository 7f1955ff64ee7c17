"""examples/kubernetes/: the manifests are valid Kubernetes (kubernetes-validate, strict, against
its bundled schemas; no cluster needed), hang together (the Service names the pods' subdomain, the
index becomes RANK, WORLD_SIZE is the pod count), and the container's command with the
environment the manifest gives each pod runs here for both ranks on loopback, exactly."""

import os
import re
import socket
import subprocess

import pytest
import yaml
from conftest import ROOT
from launch_support import outputs_of

MANIFEST = ROOT / "examples" / "kubernetes" / "dist-nccl.yaml"
INDEX_FIELD = "metadata.annotations['batch.kubernetes.io/job-completion-index']"


def documents() -> dict[str, dict]:
    return {doc["kind"]: doc for doc in yaml.safe_load_all(MANIFEST.read_text())}


def test_manifests_validate_against_the_kubernetes_schemas():
    kv = pytest.importorskip("kubernetes_validate",
                             reason="kubernetes-validate is not installed: pip install "
                                    "'.[test]' (or pip install kubernetes-validate)")
    version = kv.latest_version()
    docs = documents()
    assert sorted(docs) == ["Job", "Service"]
    for doc in docs.values():
        kv.validate(doc, version, strict=True)
    # The validator does reject what Kubernetes would: a misspelt field, a wrong type.
    job = documents()["Job"]
    job["spec"]["template"]["spec"]["containers"][0]["enviroment"] = []
    with pytest.raises(kv.ValidationError):
        kv.validate(job, version, strict=True)
    job = documents()["Job"]
    job["spec"]["completions"] = "two"
    with pytest.raises(kv.ValidationError):
        kv.validate(job, version, strict=True)


def pod_environ(job: dict, index: int) -> dict[str, str]:
    """The environment Kubernetes gives pod ``index`` of the Indexed Job (its values, and the
    completion index where the downward API asks for it)."""
    (container,) = job["spec"]["template"]["spec"]["containers"]
    env = {}
    for item in container["env"]:
        if "value" in item:
            env[item["name"]] = item["value"]
        else:
            assert item["valueFrom"]["fieldRef"]["fieldPath"] == INDEX_FIELD
            env[item["name"]] = str(index)
    return env


def test_the_manifests_hang_together():
    docs = documents()
    service, job = docs["Service"], docs["Job"]
    pod = job["spec"]["template"]["spec"]
    assert service["spec"]["clusterIP"] == "None"
    assert pod["subdomain"] == service["metadata"]["name"]
    assert service["spec"]["selector"] == {"job-name": job["metadata"]["name"]}
    assert job["spec"]["completionMode"] == "Indexed"
    pods = job["spec"]["completions"]
    assert job["spec"]["parallelism"] == pods
    env = [pod_environ(job, i) for i in range(pods)]
    assert [e["RANK"] for e in env] == [str(i) for i in range(pods)]
    assert {e["WORLD_SIZE"] for e in env} == {str(pods)}
    assert {e["MASTER_ADDR"] for e in env} == \
        {f"{job['metadata']['name']}-0.{service['metadata']['name']}"}
    port = int(env[0]["MASTER_PORT"])
    assert service["spec"]["ports"][0]["port"] == port
    assert pod["containers"][0]["ports"][0]["containerPort"] == port


@pytest.mark.timeout(150)
def test_the_pods_command_runs_here_for_two_ranks(tmp_path):
    """Each pod's command and environment, with three local substitutions only: MASTER_ADDR is
    loopback instead of pod 0's DNS name, MASTER_PORT a free port, one CPU replica instead of the
    pod's GPU; and a small network for speed."""
    job = documents()["Job"]
    (container,) = job["spec"]["template"]["spec"]["containers"]
    args = list(container["args"])
    at = args.index("--gpus")
    args[at:at + 2] = ["--cpus", "1"]
    args += ["--network", "lenet", "--image-shape", "1,28,28", "--num-classes", "10",
             "--num-batches", "3", "--timeout", "60"]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    try:
        for index in (1, 0):                 # pod 1 may well start first
            env = {k: v for k, v in os.environ.items()
                   if not k.startswith(("DMLC_", "TORCHELASTIC_")) and k not in
                   ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
            env.update(pod_environ(job, index), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                       PYTHONPATH=str(ROOT))
            procs.append(subprocess.Popen([*container["command"], *args], cwd=tmp_path, env=env,
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                          text=True))
    finally:
        outs = outputs_of(procs)           # none left behind, whatever happened
    assert [p.returncode for p in procs] == [0, 0], outs[0][1][-2000:] + outs[1][1][-2000:]
    rank0 = outs[1][0]
    assert re.findall(r"GB/sec per gpu, error (\S+)", rank0) == ["0.000000"] * 3
    assert rank0.count("# summary: kvstore dist_nccl, 1 device on each of 2 workers") == 1
