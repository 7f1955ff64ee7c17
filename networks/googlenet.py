"""GoogLeNet (Inception v1) parameter shapes.

Follows Apache MXNet v1.x ``example/image-classification/symbols/googlenet.py``: no BatchNorm and
no auxiliary classifiers; every conv is ``conv_<name>`` with a weight and a bias, and the unnamed
classifier is ``fullyconnected0``. A global average pool precedes it, so the image size only has
to be large enough for the three stride-2 max pools after the stem.
"""

from __future__ import annotations

from networks._geometry import window_out

Shape = tuple[int, ...]
Shapes = list[tuple[str, Shape]]

# Inception blocks: (name, 1x1, 3x3 reduce, 3x3, 5x5 reduce, 5x5, pool projection);
# None marks a 3x3/2 max pool between blocks.
INCEPTIONS = (
    ("in3a", 64, 96, 128, 16, 32, 32),
    ("in3b", 128, 128, 192, 32, 96, 64),
    None,
    ("in4a", 192, 96, 208, 16, 48, 64),
    ("in4b", 160, 112, 224, 24, 64, 64),
    ("in4c", 128, 128, 256, 24, 64, 64),
    ("in4d", 112, 144, 288, 32, 64, 64),
    ("in4e", 256, 160, 320, 32, 128, 128),
    None,
    ("in5a", 256, 160, 320, 32, 128, 128),
    ("in5b", 384, 192, 384, 48, 128, 128),
)


def conv(name: str, filters: int, channels: int, kernel: int) -> Shapes:
    return [(f"conv_{name}_weight", (filters, channels, kernel, kernel)),
            (f"conv_{name}_bias", (filters,))]


def shapes(image_shape: Shape, num_classes: int) -> Shapes:
    channels, height, width = image_shape
    sizes = [height, width]
    # Stem: 7x7/2 conv (pad 3), 3x3/2 pool, 1x1 conv, 3x3 conv (pad 1), 3x3/2 pool.
    sizes = [window_out(window_out(s, 7, 2, 3), 3, 2) for s in sizes]
    sizes = [window_out(s, 3, 2) for s in sizes]
    result = conv("conv1", 64, channels, 7) + conv("conv2", 64, 64, 1) + conv("conv3", 192, 64, 3)
    channels = 192

    for block in INCEPTIONS:
        if block is None:
            sizes = [window_out(s, 3, 2) for s in sizes]
            continue
        name, n1x1, n3x3_reduce, n3x3, n5x5_reduce, n5x5, proj = block
        # Branch order is the Concat order, which is also MXNet's argument order.
        result += (conv(f"{name}_1x1", n1x1, channels, 1)
                   + conv(f"{name}_3x3_reduce", n3x3_reduce, channels, 1)
                   + conv(f"{name}_3x3", n3x3, n3x3_reduce, 3)
                   + conv(f"{name}_5x5_reduce", n5x5_reduce, channels, 1)
                   + conv(f"{name}_5x5", n5x5, n5x5_reduce, 5)
                   + conv(f"{name}_proj", proj, channels, 1))
        channels = n1x1 + n3x3 + n5x5 + proj

    result += [("fullyconnected0_weight", (num_classes, channels)),
               ("fullyconnected0_bias", (num_classes,))]
    return result
