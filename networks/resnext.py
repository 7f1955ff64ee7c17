"""ResNeXt (32 groups) parameter shapes.

Follows Apache MXNet v1.x ``example/image-classification/symbols/resnext.py``. Its depth table and
CIFAR-style depth rule are the same as resnet.py's, but the CIFAR switch is at height <= 32, the
bottleneck is half (not a quarter) of a unit's width, its 3x3 conv is grouped, and the units are
post-activation (conv then BatchNorm). All convs pass ``no_bias=True``; only ``fc1`` has a bias.
"""

from __future__ import annotations

from networks import resnet
from networks.resnet import IMAGENET_UNITS, cifar_depths, cifar_plan, imagenet_plan

Shape = tuple[int, ...]
Shapes = list[tuple[str, Shape]]

# get_symbol's default; MXNet's measure.py never overrides it.
NUM_GROUP = 32


def supported_layers(image_shape: Shape) -> tuple[int, ...]:
    # Unlike resnet.py, resnext.py uses the CIFAR-style table up to height 32. The CIFAR rule
    # accepts infinitely many depths; resnet.cifar_depths lists those up to 1001.
    if image_shape[1] <= 32:
        return cifar_depths()
    return tuple(IMAGENET_UNITS)


def shapes(image_shape: Shape, num_classes: int, num_layers: int = 152) -> Shapes:
    channels, height, _ = image_shape
    if height <= 32:
        plan = cifar_plan(num_layers)
        if plan is None:
            raise ValueError(f"resnext has no {num_layers}-layer version at height {height}")
        units, filters, bottleneck = plan
        stem_kernel = 3
    else:
        units, filters, bottleneck = imagenet_plan(num_layers)
        stem_kernel = 7
    result: Shapes = [("conv0_weight", (filters[0], channels, stem_kernel, stem_kernel))]

    in_channels = filters[0]
    for stage, (count, out_channels) in enumerate(zip(units, filters[1:]), start=1):
        for unit in range(1, count + 1):
            result += residual_unit(f"stage{stage}_unit{unit}", in_channels, out_channels,
                                    bottleneck, has_shortcut=unit == 1)
            in_channels = out_channels

    result += [("fc1_weight", (num_classes, in_channels)), ("fc1_bias", (num_classes,))]
    return result


def residual_unit(name: str, in_channels: int, out_channels: int, bottleneck: bool,
                  has_shortcut: bool) -> Shapes:
    """Conv weights of one unit; the body (``bn3 + shortcut``'s left side) is listed first."""
    if bottleneck:
        mid = int(out_channels * 0.5)
        arrays = [
            (f"{name}_conv1_weight", (mid, in_channels, 1, 1)),
            # A grouped conv's weight holds in_channels / groups inputs per filter.
            (f"{name}_conv2_weight", (mid, mid // NUM_GROUP, 3, 3)),
            (f"{name}_conv3_weight", (out_channels, mid, 1, 1)),
        ]
    else:
        arrays = [
            (f"{name}_conv1_weight", (out_channels, in_channels, 3, 3)),
            (f"{name}_conv2_weight", (out_channels, out_channels, 3, 3)),
        ]
    if has_shortcut:
        arrays.append((f"{name}_sc_weight", (out_channels, in_channels, 1, 1)))
    return arrays


def conv_positions(image_shape: Shape, num_layers: int = 152) -> dict[str, int]:
    """Output positions of every conv weight: resnet's geometry (the same strides, stem and pool),
    with the CIFAR-style table up to height 32."""
    return resnet.conv_positions(image_shape, num_layers, small_below=32)
