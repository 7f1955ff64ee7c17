"""Shapes of the MXNet image-classification networks (pure Python, no framework needed).

Expected counts were checked against MXNet 1.9.1's ``list_arguments``/``infer_shape`` on the v1.x
``example/image-classification/symbols`` definitions; the resnet-200 pair is from MXNet's
tools/bandwidth README.
"""

import math

import pytest

from networks import alexnet, googlenet, lenet, mlp, mobilenet, mobilenetv2, resnet, resnext, vgg

IMAGENET = (3, 224, 224)
MNIST = (1, 28, 28)


def total(shapes):
    return sum(math.prod(shape) for _, shape in shapes)


# (module, image shape, classes, extra keyword arguments, arrays, elements)
DEFAULTS = [
    (resnet, IMAGENET, 1000, {"num_layers": 152}, 157, 60041384),
    (resnet, IMAGENET, 1000, {"num_layers": 200}, 205, 64497832),
    (resnet, IMAGENET, 1000, {"num_layers": 50}, 55, 25503912),
    (resnext, IMAGENET, 1000, {"num_layers": 50}, 55, 24960680),
    (vgg, IMAGENET, 1000, {"num_layers": 16}, 32, 138357544),
    (alexnet, IMAGENET, 1000, {}, 16, 50844008),
    (lenet, MNIST, 10, {}, 8, 431080),
    (mlp, MNIST, 10, {}, 6, 109386),
    (googlenet, IMAGENET, 1000, {}, 116, 6998552),
    (mobilenet, IMAGENET, 1000, {}, 29, 4210088),
    (mobilenetv2, IMAGENET, 1000, {}, 55, 3471784),
]


@pytest.mark.parametrize("module, image, classes, kwargs, arrays, elements", DEFAULTS)
def test_default_configurations(module, image, classes, kwargs, arrays, elements):
    shapes = module.shapes(image_shape=image, num_classes=classes, **kwargs)
    assert len(shapes) == arrays
    assert total(shapes) == elements


@pytest.mark.parametrize("module, image, classes, kwargs", [d[:4] for d in DEFAULTS])
def test_well_formed(module, image, classes, kwargs):
    shapes = module.shapes(image_shape=image, num_classes=classes, **kwargs)
    names = [name for name, _ in shapes]
    assert shapes and len(set(names)) == len(names)
    for name, shape in shapes:
        assert "weight" in name or "bias" in name
        assert isinstance(shape, tuple) and shape
        assert all(type(d) is int and d > 0 for d in shape)
    # Every network ends with its classifier's bias, sized by the class count.
    assert shapes[-1][0].endswith("_bias") and shapes[-1][1] == (classes,)


def test_resnet200_matches_mxnet_readme():
    shapes = resnet.shapes(image_shape=IMAGENET, num_classes=1000, num_layers=200)
    assert len(shapes) == 205
    assert total(shapes) * 4 / 1e6 == pytest.approx(257.991328, abs=1e-9)


def test_resnet50_has_biasless_convs_and_biased_fc():
    shapes = resnet.shapes(image_shape=IMAGENET, num_classes=1000, num_layers=50)
    assert shapes[0] == ("conv0_weight", (64, 3, 7, 7))
    assert [name for name, _ in shapes[1:5]] == [
        "stage1_unit1_conv1_weight", "stage1_unit1_conv2_weight",
        "stage1_unit1_conv3_weight", "stage1_unit1_sc_weight"]
    assert shapes[1:5] == [(shapes[1][0], (64, 64, 1, 1)), (shapes[2][0], (64, 64, 3, 3)),
                           (shapes[3][0], (256, 64, 1, 1)), (shapes[4][0], (256, 64, 1, 1))]
    assert [name for name, _ in shapes if "bias" in name] == ["fc1_bias"]
    assert shapes[-2:] == [("fc1_weight", (1000, 2048)), ("fc1_bias", (1000,))]


def test_resnet_depths_depend_on_height():
    assert resnet.supported_layers(IMAGENET) == (18, 34, 50, 101, 152, 200, 269)
    assert resnet.supported_layers((3, 29, 29)) == (18, 34, 50, 101, 152, 200, 269)
    cifar = resnet.supported_layers((3, 28, 28))
    assert {8, 20, 56, 110, 164, 1001} <= set(cifar) and max(cifar) == 1001
    # 6n+2 below 164 or 9n+2 from 164 on: 50 and 152 are (basic) CIFAR depths, these are not.
    assert not {11, 18, 34, 101, 170, 1000} & set(cifar)


def test_resnet_cifar_structure():
    # 110 layers = 3 stages of 18 basic units; stage 1 still opens with a 16->16 shortcut.
    shapes = resnet.shapes(image_shape=(3, 28, 28), num_classes=10, num_layers=110)
    assert len(shapes) == 1 + 3 * 18 * 2 + 3 + 2
    assert shapes[0] == ("conv0_weight", (16, 3, 3, 3))
    assert ("stage1_unit1_sc_weight", (16, 16, 1, 1)) in shapes
    assert shapes[-2] == ("fc1_weight", (10, 64))
    # 164 layers switch to bottleneck units: 3 x 18 units of 3 convs.
    deep = resnet.shapes(image_shape=(1, 28, 28), num_classes=10, num_layers=164)
    assert len(deep) == 1 + 3 * 18 * 3 + 3 + 2 and deep[-2] == ("fc1_weight", (10, 256))


def test_resnet_small_stem_between_28_and_32():
    # MXNet picks depths by height <= 28 but the 3x3 stem by height <= 32.
    shapes = resnet.shapes(image_shape=(3, 32, 32), num_classes=10, num_layers=50)
    assert shapes[0] == ("conv0_weight", (64, 3, 3, 3)) and len(shapes) == 55


def test_resnext50_grouped_conv():
    shapes = dict(resnext.shapes(image_shape=IMAGENET, num_classes=1000, num_layers=50))
    assert shapes["stage1_unit1_conv2_weight"] == (128, 4, 3, 3)
    assert shapes["stage4_unit3_conv2_weight"] == (1024, 32, 3, 3)
    assert shapes["stage4_unit1_sc_weight"] == (2048, 1024, 1, 1)
    # resnext switches to the CIFAR table at height 32, not 28.
    assert resnext.supported_layers((3, 32, 32)) == resnet.supported_layers((3, 28, 28))
    assert resnext.supported_layers((3, 33, 33)) == resnet.supported_layers(IMAGENET)


def test_vgg16_classifier_follows_image_size():
    shapes = dict(vgg.shapes(image_shape=IMAGENET, num_classes=1000, num_layers=16))
    assert shapes["conv1_1_weight"] == (64, 3, 3, 3) and shapes["conv5_3_bias"] == (512,)
    assert shapes["fc6_weight"] == (4096, 512 * 7 * 7)
    small = dict(vgg.shapes(image_shape=(3, 100, 70), num_classes=10, num_layers=11))
    assert small["fc6_weight"] == (4096, 512 * 3 * 2) and small["fc8_weight"] == (10, 4096)
    assert vgg.supported_layers(IMAGENET) == (11, 13, 16, 19)
    assert vgg.supported_layers((3, 31, 64)) == ()


def test_alexnet_fc_input_uses_valid_pooling():
    shapes = alexnet.shapes(image_shape=IMAGENET, num_classes=1000)
    assert [name for name, _ in shapes[:2]] == ["conv1_weight", "conv1_bias"]
    assert dict(shapes)["fc1_weight"] == (4096, 256 * 5 * 5)
    assert dict(alexnet.shapes(image_shape=(3, 299, 299), num_classes=10))["fc1_weight"] == (
        4096, 256 * 8 * 8)
    with pytest.raises(ValueError):
        alexnet.shapes(image_shape=(3, 32, 32), num_classes=10)


def test_lenet_mnist():
    assert lenet.shapes(image_shape=MNIST, num_classes=10) == [
        ("convolution0_weight", (20, 1, 5, 5)), ("convolution0_bias", (20,)),
        ("convolution1_weight", (50, 20, 5, 5)), ("convolution1_bias", (50,)),
        ("fullyconnected0_weight", (500, 800)), ("fullyconnected0_bias", (500,)),
        ("fullyconnected1_weight", (10, 500)), ("fullyconnected1_bias", (10,)),
    ]


def test_mlp_mnist():
    assert mlp.shapes(image_shape=MNIST, num_classes=10) == [
        ("fc1_weight", (128, 784)), ("fc1_bias", (128,)),
        ("fc2_weight", (64, 128)), ("fc2_bias", (64,)),
        ("fc3_weight", (10, 64)), ("fc3_bias", (10,)),
    ]


def test_googlenet_inception_order():
    shapes = googlenet.shapes(image_shape=IMAGENET, num_classes=1000)
    names = [name for name, _ in shapes]
    assert names[6:18:2] == ["conv_in3a_1x1_weight", "conv_in3a_3x3_reduce_weight",
                             "conv_in3a_3x3_weight", "conv_in3a_5x5_reduce_weight",
                             "conv_in3a_5x5_weight", "conv_in3a_proj_weight"]
    assert shapes[-2] == ("fullyconnected0_weight", (1000, 1024))
    with pytest.raises(ValueError):
        googlenet.shapes(image_shape=(3, 32, 32), num_classes=10)


def test_mobilenet_fixed_7x7_pool():
    shapes = dict(mobilenet.shapes(image_shape=IMAGENET, num_classes=1000))
    assert shapes["conv_2_dw_conv2d_weight"] == (32, 1, 3, 3)
    assert shapes["conv_14_conv2d_weight"] == (1024, 1024, 1, 1)
    assert shapes["fc_weight"] == (1000, 1024)
    # 256x256 ends at 8x8, and the 7x7 'valid' pool leaves 2x2.
    larger = dict(mobilenet.shapes(image_shape=(3, 256, 256), num_classes=1000))
    assert larger["fc_weight"] == (1000, 1024 * 4)
    with pytest.raises(ValueError):
        mobilenet.shapes(image_shape=(3, 192, 192), num_classes=1000)
    quarter = dict(mobilenet.shapes(image_shape=IMAGENET, num_classes=1000, alpha=0.25))
    assert quarter["conv_1_conv2d_weight"] == (8, 3, 3, 3) and quarter["fc_weight"] == (1000, 256)


def test_mobilenetv2_structure_and_rounding():
    shapes = mobilenetv2.shapes(image_shape=IMAGENET, num_classes=1000)
    assert shapes[:4] == [
        ("first-3x3-conv-conv2d_weight", (32, 3, 3, 3)),
        # Expansion 1 still has its 1x1 expansion conv in MXNet's definition.
        ("seq-0-block0-exp-conv2d_weight", (32, 32, 1, 1)),
        ("seq-0-block0-depthwise-conv2d_weight", (32, 1, 3, 3)),
        ("seq-0-block0-linear-conv2d_weight", (16, 32, 1, 1)),
    ]
    assert shapes[-3:] == [("last-1x1-conv-conv2d_weight", (1280, 320, 1, 1)),
                           ("fc_weight", (1000, 1280)), ("fc_bias", (1000,))]
    # int(round()) widths, no multiple-of-8 rounding: 0.35 x 24 = 8.4 -> 8; 1280 kept below 1.
    thin = dict(mobilenetv2.shapes(image_shape=IMAGENET, num_classes=1000, multiplier=0.35))
    assert thin["seq-1-block0-linear-conv2d_weight"] == (8, 36, 1, 1)
    assert thin["last-1x1-conv-conv2d_weight"] == (1280, 112, 1, 1)
    wide = dict(mobilenetv2.shapes(image_shape=IMAGENET, num_classes=1000, multiplier=1.4))
    assert wide["fc_weight"] == (1000, 1792)
