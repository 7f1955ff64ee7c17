"""Inception networks (MXNet image-classification symbols) and transformer shape tables.

The inception digests below were taken from Apache MXNet 1.9.1 itself: the v1.x symbol files'
``get_symbol(...)``, ``list_arguments()`` filtered to names holding 'weight' or 'bias', and
``infer_shape(data=(32, C, H, W))``, serialised as ``json.dumps([[name, list(shape)], ...])``.
"""

from __future__ import annotations

import hashlib
import json
import math

import pytest

from networks import (
    get_shapes,
    inception_bn,
    inception_resnet_v2,
    inception_v3,
    inception_v4,
    transformers,
)


def total(shapes) -> int:
    return sum(math.prod(shape) for _, shape in shapes)


def digest(shapes) -> str:
    text = json.dumps([[name, list(shape)] for name, shape in shapes])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


# (module, image shape, arrays, elements, digest, classifier weight) with 1000 classes, per MXNet.
MXNET_REFERENCE = [
    (inception_bn, (3, 224, 224), 140, 11275208, "6d44dfad3a9c6012", (1000, 1024)),
    (inception_bn, (1, 28, 28), 40, 1981304, "fd0fb6f16890454d", (1000, 336)),
    (inception_bn, (3, 256, 256), 140, 14347208, "cfdaeb226b853e38", (1000, 4096)),
    (inception_v3, (3, 299, 299), 96, 23800136, "2d71010113ea8102", (1000, 2048)),
    (inception_v3, (3, 331, 331), 96, 29944136, "f2c68929f7237849", (1000, 8192)),
    (inception_v4, (3, 299, 299), 151, 54904648, "aaf9f18cdb5d3c9b", (1000, 13824)),
    (inception_v4, (3, 256, 256), 151, 42616648, "06d3d91424e2679c", (1000, 1536)),
    (inception_resnet_v2, (3, 299, 299), 490, 55857372, "3adc1ccf19606a5f", (1000, 1536)),
]


@pytest.mark.parametrize("module, image_shape, count, elements, sha, fc_weight", MXNET_REFERENCE,
                         ids=lambda v: getattr(v, "__name__", None) or str(v))
def test_inception_matches_mxnet(module, image_shape, count, elements, sha, fc_weight):
    shapes = module.shapes(image_shape=image_shape, num_classes=1000)
    assert len(shapes) == count
    assert total(shapes) == elements
    assert shapes[-2][1] == fc_weight and shapes[-1][1] == (1000,)
    assert digest(shapes) == sha


def test_inception_v3_readme_acceptance():
    shapes = get_shapes("inception-v3", image_shape=(3, 299, 299), num_classes=1000)
    assert len(shapes) == 96
    assert total(shapes) == 23800136
    assert total(shapes) * 4 / 1e6 == pytest.approx(95.200544, abs=1e-9)


def test_inception_names_and_order():
    v3 = inception_v3.shapes(image_shape=(3, 299, 299), num_classes=1000)
    assert v3[:2] == [("conv_conv2d_weight", (32, 3, 3, 3)),
                      ("conv_1_conv2d_weight", (32, 32, 3, 3))]
    # Concat order: the 1x1 branch, then the 5x5 tower, the 3x3 tower, the pool projection.
    mixed = [name for name, _ in v3 if name.startswith(("mixed_conv", "mixed_tower"))]
    assert mixed == ["mixed_conv_conv2d_weight", "mixed_tower_conv_conv2d_weight",
                     "mixed_tower_conv_1_conv2d_weight", "mixed_tower_1_conv_conv2d_weight",
                     "mixed_tower_1_conv_1_conv2d_weight", "mixed_tower_1_conv_2_conv2d_weight",
                     "mixed_tower_2_conv_conv2d_weight"]
    assert v3[-2:] == [("fc1_weight", (1000, 2048)), ("fc1_bias", (1000,))]

    bn = inception_bn.shapes(image_shape=(3, 224, 224), num_classes=1000)
    assert bn[:2] == [("conv_1_weight", (64, 3, 7, 7)), ("conv_1_bias", (64,))]
    assert ("conv_3c_double_3x3_1_weight", (96, 96, 3, 3)) in bn

    v4 = inception_v4.shapes(image_shape=(3, 299, 299), num_classes=1000)
    assert v4[0] == ("in_stem_conv1_3*3_conv2d_weight", (32, 3, 3, 3))
    assert ("in7B_conv10_7*1_conv2d_weight", (256, 224, 7, 1)) in v4

    irv2 = inception_resnet_v2.shapes(image_shape=(3, 299, 299), num_classes=1000)
    assert [name for name, _ in irv2[:4]] == ["convolution0_weight", "convolution0_bias",
                                             "convolution1_weight", "convolution1_bias"]
    assert irv2[-4][0] == "convolution243_weight" and irv2[-4][1] == (1536, 2080, 1, 1)
    assert ("convolution88_weight", (160, 129, 1, 7)) in irv2  # first block17's 129-filter quirk


@pytest.mark.parametrize("module", [inception_bn, inception_v3, inception_v4, inception_resnet_v2])
def test_inception_arrays_are_weights_or_biases(module):
    shapes = module.shapes(image_shape=(3, 299, 299), num_classes=10)
    names = [name for name, _ in shapes]
    assert len(set(names)) == len(names)
    assert all("weight" in name or "bias" in name for name in names)
    assert all(isinstance(d, int) and d > 0 for _, shape in shapes for d in shape)


def test_image_size_dependence():
    # inception-resnet-v2 pools globally: the image size changes nothing.
    big = inception_resnet_v2.shapes(image_shape=(3, 512, 384), num_classes=10)
    assert big == inception_resnet_v2.shapes(image_shape=(3, 139, 139), num_classes=10)
    # Fixed-window pools followed by Flatten: the classifier grows with the image.
    assert inception_v3.shapes(image_shape=(3, 512, 384), num_classes=10)[-2][1] == (10, 43008)
    assert inception_bn.shapes(image_shape=(3, 512, 384), num_classes=10)[-2][1] == (10, 61440)
    # The input channel count reaches the first conv.
    assert inception_v4.shapes(image_shape=(1, 299, 299), num_classes=10)[0][1] == (32, 1, 3, 3)


@pytest.mark.parametrize("module, image_shape", [
    (inception_v3, (3, 224, 224)),   # MXNet: global_pool kernel 8 exceeds input 5
    (inception_v4, (3, 224, 224)),
    (inception_bn, (3, 139, 139)),
    (inception_bn, (3, 32, 32)),
    (inception_resnet_v2, (3, 28, 28)),
])
def test_too_small_images_are_rejected_like_mxnet(module, image_shape):
    with pytest.raises(ValueError, match="larger image"):
        module.shapes(image_shape=image_shape, num_classes=10)


TRANSFORMER_TOTALS = {
    "bert-base": 109_482_240,
    "bert-large": 335_141_888,
    "gpt2": 124_439_808,
    "gpt2-medium": 354_823_168,
    "gpt2-large": 774_030_080,
    "gpt2-xl": 1_557_611_200,
    "llama-1b": 1_235_814_400,
    "llama-3b": 3_212_749_824,
    "llama-8b": 8_030_261_248,
    "vit-b16": 86_567_656,
    "vit-l16": 304_326_632,
}


@pytest.mark.parametrize("name, expected", TRANSFORMER_TOTALS.items())
def test_transformer_totals(name, expected):
    build, summary = transformers.MODELS[name]
    shapes = build(image_shape=(3, 224, 224), num_classes=1000)
    assert total(shapes) == expected
    assert summary
    names = [n for n, _ in shapes]
    assert len(set(names)) == len(names)
    assert get_shapes(name) == shapes


def test_transformer_names_and_layouts():
    bert = transformers.MODELS["bert-base"][0](image_shape=(3, 224, 224), num_classes=1000)
    assert bert[0] == ("embeddings.word_embeddings.weight", (30522, 768))
    assert ("encoder.layer.0.attention.self.query.weight", (768, 768)) in bert
    assert ("encoder.layer.11.intermediate.dense.weight", (3072, 768)) in bert
    assert bert[-1] == ("pooler.dense.bias", (768,))

    gpt2 = transformers.MODELS["gpt2"][0](image_shape=(3, 224, 224), num_classes=1000)
    assert gpt2[:2] == [("wte.weight", (50257, 768)), ("wpe.weight", (1024, 768))]
    assert ("h.0.attn.c_attn.weight", (768, 2304)) in gpt2   # Conv1D: [in, out]
    assert ("h.0.mlp.c_proj.weight", (3072, 768)) in gpt2
    assert gpt2[-1] == ("ln_f.bias", (768,))

    small = transformers.MODELS["llama-1b"][0](image_shape=(3, 224, 224), num_classes=1000)
    assert ("model.layers.0.self_attn.k_proj.weight", (512, 2048)) in small
    assert small[-1] == ("model.norm.weight", (2048,))          # tied head: no lm_head
    big = transformers.MODELS["llama-8b"][0](image_shape=(3, 224, 224), num_classes=1000)
    assert big[-1] == ("lm_head.weight", (128256, 4096))
    assert not any("bias" in name for name, _ in big)


def test_language_models_ignore_image_and_classes():
    build = transformers.MODELS["gpt2-medium"][0]
    assert build(image_shape=(1, 28, 28), num_classes=10) == build(image_shape=(3, 299, 299),
                                                                   num_classes=1000)


def test_the_header_names_an_image_shape_only_where_it_shapes_the_arrays():
    """A language model's header line has no image shape or classes (they change nothing);
    ViT's and the image networks' have them."""
    import networks
    from bandwidth.backends.registry import store_class
    from bandwidth.config.options import Config
    from bandwidth.plan.plan import make_plan

    assert not networks.takes_image("gpt2-medium") and not networks.takes_image("flat:1000")
    assert networks.takes_image("vit-b16") and networks.takes_image("resnet")
    text = {name: make_plan(Config(kv_store="local", cpus=1, network=name), store_class,
                            False).input_text
            for name in ("gpt2-medium", "vit-b16", "resnet", "flat:1000")}
    assert text == {"gpt2-medium": "", "vit-b16": " (image shape 3,224,224, 1000 classes)",
                    "resnet": " (image shape 3,224,224, 1000 classes)", "flat:1000": ""}


def test_vit_uses_image_shape_and_classes():
    build = transformers.MODELS["vit-b16"][0]
    shapes = dict(build(image_shape=(3, 384, 384), num_classes=10))
    assert shapes["vit.embeddings.cls_token"] == (1, 1, 768)
    assert shapes["vit.embeddings.position_embeddings"] == (1, 1 + 24 * 24, 768)
    assert shapes["classifier.weight"] == (10, 768)
    gray = dict(build(image_shape=(1, 224, 160), num_classes=1000))
    assert gray["vit.embeddings.patch_embeddings.projection.weight"] == (768, 1, 16, 16)
    assert gray["vit.embeddings.position_embeddings"] == (1, 1 + 14 * 10, 768)


def test_vit_rejects_image_not_divisible_by_patch():
    with pytest.raises(ValueError, match="divisible by its 16-pixel patch"):
        transformers.MODELS["vit-l16"][0](image_shape=(3, 225, 224), num_classes=1000)
