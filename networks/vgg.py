"""VGG 11/13/16/19 parameter shapes.

Follows Apache MXNet v1.x ``example/image-classification/symbols/vgg.py`` with its default
``batch_norm=False`` (MXNet's measure.py does not pass it). Every conv and FC layer keeps its bias.
The 3x3 convs (pad 1) keep the image size and each 2x2/2 max pool halves it, so fc6's input size
follows from the image: 512 x (H after five pools) x (W after five pools).
"""

from __future__ import annotations

Shape = tuple[int, ...]
Shapes = list[tuple[str, Shape]]

# depth -> convs per group; the five groups have 64, 128, 256, 512, 512 filters.
CONVS_PER_GROUP: dict[int, tuple[int, ...]] = {
    11: (1, 1, 2, 2, 2),
    13: (2, 2, 2, 2, 2),
    16: (2, 2, 3, 3, 3),
    19: (2, 2, 4, 4, 4),
}
GROUP_FILTERS = (64, 128, 256, 512, 512)


def pooled_size(size: int) -> int:
    """Size after a 2x2, stride-2 max pool (MXNet's default 'valid' convention)."""
    if size < 2:
        raise ValueError("vgg needs an image of at least 32x32 for its five 2x2 poolings")
    return (size - 2) // 2 + 1


def supported_layers(image_shape: Shape) -> tuple[int, ...]:
    # Every depth needs the same five poolings, so a too-small image has no valid depth at all.
    try:
        feature_size(image_shape[1:])
    except ValueError:
        return ()
    return tuple(CONVS_PER_GROUP)


def feature_size(size_hw: Shape) -> tuple[int, int]:
    height, width = size_hw
    for _ in GROUP_FILTERS:
        height, width = pooled_size(height), pooled_size(width)
    return height, width


def shapes(image_shape: Shape, num_classes: int, num_layers: int = 16) -> Shapes:
    channels = image_shape[0]
    result: Shapes = []
    for group, (count, filters) in enumerate(zip(CONVS_PER_GROUP[num_layers], GROUP_FILTERS),
                                             start=1):
        for index in range(1, count + 1):
            name = f"conv{group}_{index}"
            result += [(f"{name}_weight", (filters, channels, 3, 3)), (f"{name}_bias", (filters,))]
            channels = filters

    height, width = feature_size(image_shape[1:])
    flat = channels * height * width
    for name, (inputs, outputs) in (("fc6", (flat, 4096)), ("fc7", (4096, 4096)),
                                    ("fc8", (4096, num_classes))):
        result += [(f"{name}_weight", (outputs, inputs)), (f"{name}_bias", (outputs,))]
    return result


def conv_positions(image_shape: Shape, num_layers: int = 16) -> dict[str, int]:
    """Output positions of every conv weight (3x3, pad 1: a group's size until its pool)."""
    height, width = image_shape[1:]
    result = {}
    for group, count in enumerate(CONVS_PER_GROUP[num_layers], start=1):
        for index in range(1, count + 1):
            result[f"conv{group}_{index}_weight"] = height * width
        height, width = pooled_size(height), pooled_size(width)
    return result
