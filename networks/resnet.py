"""ResNet v2 (pre-activation) parameter shapes.

Follows Apache MXNet v1.x ``example/image-classification/symbols/resnet.py``. Every convolution
there passes ``no_bias=True`` and the BatchNorm gamma/beta names hold neither 'weight' nor 'bias',
so the arrays are the conv weights plus ``fc1_weight``/``fc1_bias``. The classifier sits behind a
global pool, so only the channel count of the image (not its size) changes a shape.
"""

from __future__ import annotations

from networks._geometry import window_out

Shape = tuple[int, ...]
Shapes = list[tuple[str, Shape]]

# ImageNet-style depths: residual units per stage (MXNet's get_symbol table).
IMAGENET_UNITS: dict[int, tuple[int, ...]] = {
    18: (2, 2, 2, 2),
    34: (3, 4, 6, 3),
    50: (3, 4, 6, 3),
    101: (3, 4, 23, 3),
    152: (3, 8, 36, 3),
    200: (3, 24, 36, 3),
    269: (3, 30, 48, 8),
}

# The CIFAR-style rule accepts infinitely many depths; we list those up to ResNet-1001, the
# deepest one in the pre-activation paper. (MXNet would also build num_layers=2 or less, which
# degenerate to one unit per stage, the same net as depth 8; those are left out on purpose.)
CIFAR_MAX_LAYERS = 1001


def cifar_plan(num_layers: int) -> tuple[tuple[int, ...], tuple[int, ...], bool] | None:
    """(units per stage, filter list, bottleneck) of a 3-stage CIFAR-style net, None if invalid.

    Bottleneck nets need depth 9n+2 and at least 164 layers; basic nets need 6n+2 below 164.
    """
    if num_layers >= 164 and (num_layers - 2) % 9 == 0:
        return ((num_layers - 2) // 9,) * 3, (16, 64, 128, 256), True
    if 8 <= num_layers < 164 and (num_layers - 2) % 6 == 0:
        return ((num_layers - 2) // 6,) * 3, (16, 16, 32, 64), False
    return None


def imagenet_plan(num_layers: int) -> tuple[tuple[int, ...], tuple[int, ...], bool]:
    """(units per stage, filter list, bottleneck) of a 4-stage ImageNet-style net."""
    if num_layers >= 50:
        return IMAGENET_UNITS[num_layers], (64, 256, 512, 1024, 2048), True
    return IMAGENET_UNITS[num_layers], (64, 64, 128, 256, 512), False


def cifar_depths() -> tuple[int, ...]:
    return tuple(n for n in range(1, CIFAR_MAX_LAYERS + 1) if cifar_plan(n) is not None)


def supported_layers(image_shape: Shape) -> tuple[int, ...]:
    # MXNet's get_symbol switches to the CIFAR-style depth table at height <= 28.
    if image_shape[1] <= 28:
        return cifar_depths()
    return tuple(IMAGENET_UNITS)


def shapes(image_shape: Shape, num_classes: int, num_layers: int = 152) -> Shapes:
    channels, height, _ = image_shape
    if height <= 28:
        plan = cifar_plan(num_layers)
        if plan is None:
            raise ValueError(f"resnet has no {num_layers}-layer version at height {height}")
        units, filters, bottleneck = plan
    else:
        units, filters, bottleneck = imagenet_plan(num_layers)

    # The stem is chosen by height <= 32, a different threshold from the depth table's 28: a
    # 29..32-pixel image gets the ImageNet depths with the small 3x3 stem (and no max pool).
    stem_kernel = 3 if height <= 32 else 7
    result: Shapes = [("conv0_weight", (filters[0], channels, stem_kernel, stem_kernel))]

    in_channels = filters[0]
    for stage, (count, out_channels) in enumerate(zip(units, filters[1:]), start=1):
        for unit in range(1, count + 1):
            # The first unit of every stage changes width (or stride), so it has a 1x1 shortcut.
            result += residual_unit(f"stage{stage}_unit{unit}", in_channels, out_channels,
                                    bottleneck, has_shortcut=unit == 1)
            in_channels = out_channels

    result += [("fc1_weight", (num_classes, in_channels)), ("fc1_bias", (num_classes,))]
    return result


def residual_unit(name: str, in_channels: int, out_channels: int, bottleneck: bool,
                  has_shortcut: bool) -> Shapes:
    """Conv weights of one pre-activation unit, in MXNet's argument order.

    MXNet adds ``body + shortcut``; list_arguments walks the body first, so the shortcut conv
    (which reads the unit's first activation) comes last.
    """
    if bottleneck:
        mid = int(out_channels * 0.25)
        arrays = [
            (f"{name}_conv1_weight", (mid, in_channels, 1, 1)),
            (f"{name}_conv2_weight", (mid, mid, 3, 3)),
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


def conv_positions(image_shape: Shape, num_layers: int = 152, small_below: int = 28) -> dict[str, int]:
    """Output positions (height x width) of every conv weight, for the FLOPs of networks.costs.

    MXNet's units put the stage's stride on the 3x3 conv (bottleneck: conv2; basic: conv1) and on
    the shortcut; stages after the first stride 2. ``small_below``: the height up to which the
    CIFAR-style table applies (resnet 28, resnext 32); the 3x3 stem without max pool is used up to
    32 either way.
    """
    _, height, width = image_shape
    if height <= small_below:
        units, _, bottleneck = cifar_plan(num_layers) or ((), (), False)
    else:
        units, _, bottleneck = imagenet_plan(num_layers)
    sizes = (height, width)
    if height > 32:          # 7x7/2 stem, then a 3x3/2 max pool
        sizes = tuple(window_out(window_out(s, 7, 2, 3), 3, 2, 1) for s in sizes)
        stem = (window_out(height, 7, 2, 3), window_out(width, 7, 2, 3))
    else:
        stem = sizes
    result = {"conv0_weight": stem[0] * stem[1]}
    for stage, count in enumerate(units, start=1):
        stride = 1 if stage == 1 else 2
        for unit in range(1, count + 1):
            name, first = f"stage{stage}_unit{unit}", unit == 1
            before = sizes
            if first:
                sizes = tuple(window_out(s, 3, stride, 1) for s in sizes)
            area, area_in = sizes[0] * sizes[1], before[0] * before[1]
            if bottleneck:
                result.update({f"{name}_conv1_weight": area_in, f"{name}_conv2_weight": area,
                               f"{name}_conv3_weight": area})
            else:
                result.update({f"{name}_conv1_weight": area, f"{name}_conv2_weight": area})
            if first:
                result[f"{name}_sc_weight"] = area
    return result
