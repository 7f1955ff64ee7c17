"""AlexNet parameter shapes.

Follows Apache MXNet v1.x ``example/image-classification/symbols/alexnet.py``: five convs and three
FC layers named conv1..conv5 and fc1..fc3, all with a bias. conv1 has no padding (so a 224 image
gives 54x54, not the paper's 55x55) and the pools use MXNet's default 'valid' convention, which is
why fc1 reads 256x5x5 = 6400 values at 224x224. The LRN layers have no parameters.
"""

from __future__ import annotations

from networks._geometry import window_out

Shape = tuple[int, ...]
Shapes = list[tuple[str, Shape]]

# (name, filters, kernel, stride, pad, followed by a 3x3/2 max pool)
CONVS = (
    ("conv1", 96, 11, 4, 0, True),
    ("conv2", 256, 5, 1, 2, True),
    ("conv3", 384, 3, 1, 1, False),
    ("conv4", 384, 3, 1, 1, False),
    ("conv5", 256, 3, 1, 1, True),
)


def shapes(image_shape: Shape, num_classes: int) -> Shapes:
    channels, height, width = image_shape
    result: Shapes = []
    for name, filters, kernel, stride, pad, pooled in CONVS:
        result += [(f"{name}_weight", (filters, channels, kernel, kernel)),
                   (f"{name}_bias", (filters,))]
        channels = filters
        height, width = (window_out(s, kernel, stride, pad) for s in (height, width))
        if pooled:
            height, width = (window_out(s, 3, 2) for s in (height, width))

    flat = channels * height * width
    for name, (inputs, outputs) in (("fc1", (flat, 4096)), ("fc2", (4096, 4096)),
                                    ("fc3", (4096, num_classes))):
        result += [(f"{name}_weight", (outputs, inputs)), (f"{name}_bias", (outputs,))]
    return result


def conv_positions(image_shape: Shape) -> dict[str, int]:
    """Output positions (height x width) of every conv weight, for networks.costs."""
    _, height, width = image_shape
    result = {}
    for name, _, kernel, stride, pad, pooled in CONVS:
        height, width = (window_out(s, kernel, stride, pad) for s in (height, width))
        result[f"{name}_weight"] = height * width
        if pooled:
            height, width = (window_out(s, 3, 2) for s in (height, width))
    return result
