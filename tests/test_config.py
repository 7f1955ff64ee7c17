import re
from pathlib import Path

import pytest

from bandwidth.config.values import parse_gpus, parse_image_shape, parse_size, size_sweep
from bandwidth.errors import ConfigError
from bandwidth.execution.commandline import build_parser, job_from_args
from bandwidth.thresholds import parse_tolerance


def job(*argv):
    return job_from_args(build_parser().parse_args(list(argv)))


def parse(*argv):
    (config,) = job(*argv).configs
    return config


def test_defaults_follow_mxnet():
    c = parse()
    assert (c.network, c.kv_store, c.num_batches, c.disp_batches, c.image_shape, c.num_classes,
            c.optimizer, c.dtype, c.test_results) == (
        "resnet", "device", 5, 1, (3, 224, 224), 1000, "none", "float32", True)


def test_kvstore_spellings_and_optimizer_none_string():
    assert parse("--kvstore", "local").kv_store == "local"
    assert parse("--kv-store", "nccl", "--optimizer", "None").optimizer == "none"
    assert parse("--optimizer", "SGD").optimizer == "sgd"


@pytest.mark.parametrize("argv, message", [
    (["--kv-store", "nope"], "unknown --kv-store 'nope'; valid: local, device, nccl"),
    (["--dtype", "int8"], "unknown --dtype 'int8'"),
    (["--optimizer", "adam"], "unknown --optimizer 'adam'; valid: none, sgd"),
    (["--image-shape", "3,224"], "--image-shape must be three positive integers"),
    (["--gpus", "0,x"], "--gpus must be a comma list"),
    (["--launch", "fast"], "unknown --launch 'fast'; valid: auto, graph, eager"),
    (["--launch", "graph", "--cpus", "2"], "--launch graph needs GPUs"),
    (["--launch", "auto", "--cpus", "2"], "--launch auto needs GPUs"),
    (["--owners", "random"], "unknown --owners 'random'; valid: balanced, greedy"),
    (["--gpus", "0", "--cpus", "2"], "either --gpus or --cpus"),
    (["--num-batches", "0"], "--num-batches must be at least 1"),
    (["--disp-batches", "6"], "exceeds --num-batches 5"),
    (["--gc-type", "2bit"], "gradient compression is not implemented"),
    (["--tolerance", "ten"], "--tolerance"),
    (["--repeat", "0"], "--repeat must be a whole number of runs, 1 or more, or auto"),
    (["--confirm", "-1"], "--confirm must be a whole number of confirmation passes from 0 to 10"),
    (["--confirm", "x"], "--confirm must be a whole number of confirmation passes from 0 to 10"),
    (["--confirm", "11"], "--confirm must be a whole number of confirmation passes from 0 to 10"),
    (["--confirm-interval", "-1"], "--confirm-interval must be a number of seconds from 0 to 3600"),
    (["--confirm-interval", "nan"], "--confirm-interval must be a number of seconds"),
    (["--network", "flat", "-b", "1X"], "a size must be a positive number of bytes"),
    (["--network", "flat", "-b", "1G", "-e", "1M"], "is smaller than -b"),
    (["--scaling", "--gpus", "0,1", "2,3"], "--scaling takes one --gpus list"),
])
def test_bad_values_name_the_rule(argv, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        job(*argv)


def test_confirmation_passes_default_to_two():
    assert job().confirm == 2 and job("--confirm", "0").confirm == 0
    assert job().confirm_interval_s == 10.0
    assert job("--confirm-interval", "0").confirm_interval_s == 0


def test_parsers():
    assert parse_image_shape("3,299,299") == (3, 299, 299)
    assert parse_gpus("0,3") == (0, 3)
    assert parse_size("1M") == 1 << 20 and parse_size("64K") == 65536 and parse_size("100") == 100
    assert parse_tolerance("10%") == 10.0 and parse_tolerance("2.5") == 2.5
    assert size_sweep(1 << 20, 1 << 23, 2) == [1 << 20, 1 << 21, 1 << 22, 1 << 23]
    with pytest.raises(ConfigError):
        parse_image_shape("3,-1,2")


def test_sweeps_expand_modes_networks_and_device_sets():
    j = job("--kv-store", "local,nccl", "--network", "mlp,lenet", "--gpus", "0,1", "0,1,2,3")
    assert j.is_sweep and len(j.configs) == 8
    assert [(c.kv_store, c.network, c.gpus) for c in j.configs[:4]] == [
        ("local", "mlp", (0, 1)), ("local", "mlp", (0, 1, 2, 3)),
        ("local", "lenet", (0, 1)), ("local", "lenet", (0, 1, 2, 3))]


def test_scaling_and_flat_sweep():
    assert [c.cpus for c in job("--cpus", "3", "--scaling").configs] == [1, 2, 3]
    assert [c.gpus for c in job("--gpus", "0,2", "--scaling").configs] == [(0,), (0, 2)]
    flats = job("--network", "flat", "-b", "1M", "-e", "4M", "--dtype", "float16").configs
    assert [c.network for c in flats] == ["flat:524288", "flat:1048576", "flat:2097152"]


def readme_flags() -> set[str]:
    """Every flag named in the first column of README.md's "### Flags" table."""
    text = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    section = text.split("\n### Flags\n", 1)[1].split("\n#", 1)[0]
    flags = set()
    for line in section.splitlines():
        if line.startswith("| `"):
            first_cell = re.split(r"(?<!\\)\|", line)[1]     # a cell may hold an escaped \|
            flags |= set(re.findall(r"`(-{1,2}[a-z][a-z0-9-]*)", first_cell))
    return flags


def test_readme_flag_table_matches_the_parser():
    # argparse has no public list of its actions; _actions is stable since Python 3.2.
    parser_flags = {flag for action in build_parser()._actions for flag in action.option_strings}
    parser_flags -= {"-h", "--help"}
    documented = readme_flags()
    assert len(documented) > 30                     # the table was found and read
    assert sorted(parser_flags - documented) == [], "flags missing from README's table"
    assert sorted(documented - parser_flags) == [], "README's table names flags the parser lacks"


def test_a_gpu_listed_twice_is_two_replicas_on_it():
    # MXNet's measure.py accepted --gpus 0,0: two replicas sharing GPU 0.
    assert parse_gpus("0,0") == (0, 0) and parse_gpus("0,0,0,0") == (0, 0, 0, 0)
    assert parse("--gpus", "0,0").gpus == (0, 0)
    c = parse("--launch", "eager", "--owners", "greedy")
    assert (c.launch, c.owners) == ("eager", "greedy")
    assert (parse().launch, parse().owners) == (None, "balanced")


def test_nccl_modes_refuse_one_gpu_twice_and_say_why():
    from bandwidth.hardware.devices import DeviceSet
    from bandwidth.stores.registry import KVSTORES

    shared = DeviceSet("cuda", (0, 0))
    assert shared.shares_gpu and not DeviceSet("cuda", (0, 1)).shares_gpu
    for mode in ("nccl", "dist_nccl"):
        reason = KVSTORES[mode].unavailable(shared, "float32")
        assert reason and "lists a GPU twice" in reason and "NCCL cannot hold one GPU twice" \
            in reason and "--kv-store device or local" in reason
    for mode in ("device", "local", "dist_sync_device"):
        assert KVSTORES[mode].unavailable(shared, "float32") is None


def test_launch_defaults_to_auto_on_gpus_for_the_modes_that_capture():
    from bandwidth.hardware.devices import DeviceSet
    from bandwidth.plan.launching import launch_of
    from bandwidth.stores.registry import KVSTORES

    gpus, cpus = DeviceSet("cuda", (0, 0)), DeviceSet("cpu", (0, 1))
    assert [launch_of(KVSTORES[m], gpus, None) for m in ("device", "nccl")] == ["auto"] * 2
    assert launch_of(KVSTORES["device"], gpus, "graph") == "graph"
    assert launch_of(KVSTORES["device"], gpus, "eager") == "eager"
    for mode in ("local", "dist_sync_device", "dist_nccl"):
        assert launch_of(KVSTORES[mode], gpus, "graph") == "eager"
        assert launch_of(KVSTORES[mode], gpus, None) == "eager"
    assert launch_of(KVSTORES["device"], cpus, None) == "eager"
    # local captures only one GPU without an optimizer, and only when asked (auto stays eager).
    one = DeviceSet("cuda", (0,))
    assert launch_of(KVSTORES["local"], one, "graph") == "graph"
    assert [launch_of(KVSTORES["local"], one, w) for w in (None, "auto")] == ["eager"] * 2
    assert launch_of(KVSTORES["local"], one, "graph", "sgd") == "eager"


def test_the_registry_says_which_modes_are_distributed_as_the_stores_do():
    # The command line reads DISTRIBUTED before importing the stores (and torch).
    from bandwidth.stores.registry import DISTRIBUTED, KVSTORES
    assert list(DISTRIBUTED) == list(KVSTORES)
    assert DISTRIBUTED == {name: cls.traits.distributed for name, cls in KVSTORES.items()}
