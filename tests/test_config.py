import pytest

from bandwidth.config import build_parser, config_from_args, parse_gpus, parse_image_shape
from bandwidth.errors import ConfigError


def parse(*argv):
    return config_from_args(build_parser().parse_args(list(argv)))


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
    (["--gpus", "0,0"], "lists a GPU twice"),
    (["--gpus", "0", "--cpus", "2"], "either --gpus or --cpus"),
    (["--num-batches", "0"], "--num-batches must be at least 1"),
    (["--disp-batches", "6"], "exceeds --num-batches 5"),
    (["--gc-type", "2bit"], "gradient compression is not implemented"),
])
def test_bad_values_name_the_rule(argv, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse(*argv)


def test_parsers():
    assert parse_image_shape("3,299,299") == (3, 299, 299)
    assert parse_gpus("0,3") == (0, 3)
    with pytest.raises(ConfigError):
        parse_image_shape("3,-1,2")
