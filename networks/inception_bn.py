"""Inception with BatchNorm (Inception-BN) parameter shapes.

Follows Apache MXNet v1.x ``example/image-classification/symbols/inception-bn.py``. Every conv is
``conv_<name>`` and keeps its bias (no ``no_bias``); BatchNorm gamma/beta are not gradients we
count; the unnamed classifier is ``fullyconnected0``.

Two things depend on the image: a height of 28 or less selects MXNet's small variant (SimpleFactory
and DownsampleFactory blocks), and the final pool is a fixed 7x7 window (stride 1) followed by
Flatten, so the classifier input is ``1024 * h * w`` where ``h x w`` is what that pool leaves
(1x1 at 224x224, 2x2 at 256x256, 3x3 at 299x299).
"""

from __future__ import annotations

from networks._geometry import window_out

Shape = tuple[int, ...]
Shapes = list[tuple[str, Shape]]
Act = tuple[int, int, int]  # (channels, height, width) of an activation

# Full variant. "A" blocks: (name, 1x1, 3x3 reduce, 3x3, double-3x3 reduce, double 3x3, proj).
# "B" blocks downsample: (name, 3x3 reduce, 3x3, double-3x3 reduce, double 3x3).
FULL_BLOCKS = (
    ("A", "3a", 64, 64, 64, 64, 96, 32),
    ("A", "3b", 64, 64, 96, 64, 96, 64),
    ("B", "3c", 128, 160, 64, 96),
    ("A", "4a", 224, 64, 96, 96, 128, 128),
    ("A", "4b", 192, 96, 128, 96, 128, 128),
    ("A", "4c", 160, 128, 160, 128, 160, 128),
    ("A", "4d", 96, 128, 192, 160, 192, 128),
    ("B", "4e", 128, 192, 192, 256),
    ("A", "5a", 352, 192, 320, 160, 224, 128),
    ("A", "5b", 352, 192, 320, 192, 224, 128),
)

# Small variant (height <= 28). "S" blocks: (name, 1x1, 3x3); "D" blocks: (name, 3x3/2 conv).
SMALL_BLOCKS = (
    ("S", "in3a", 32, 32), ("S", "in3b", 32, 48), ("D", "in3c", 80),
    ("S", "in4a", 112, 48), ("S", "in4b", 96, 64), ("S", "in4c", 80, 80), ("S", "in4d", 48, 96),
    ("D", "in4e", 96),
    ("S", "in5a", 176, 160), ("S", "in5b", 176, 160),
)


class _Net:
    """Collects the arrays in MXNet's argument order while tracking activation shapes."""

    def __init__(self) -> None:
        self.arrays: Shapes = []

    def conv(self, x: Act, name: str, filters: int, kernel: int, stride: int = 1,
             pad: int = 0) -> Act:
        channels, height, width = x
        self.arrays += [(f"conv_{name}_weight", (filters, channels, kernel, kernel)),
                        (f"conv_{name}_bias", (filters,))]
        return (filters, window_out(height, kernel, stride, pad),
                window_out(width, kernel, stride, pad))


def pool(x: Act, kernel: int, stride: int = 1, pad: int = 0) -> Act:
    channels, height, width = x
    return channels, window_out(height, kernel, stride, pad), window_out(width, kernel, stride, pad)


def concat(*parts: Act) -> Act:
    if len({part[1:] for part in parts}) != 1:
        raise ValueError(f"inception-bn: branches of sizes {[p[1:] for p in parts]} cannot be "
                         "concatenated at this image size")
    return sum(part[0] for part in parts), parts[0][1], parts[0][2]


def block_a(net: _Net, x: Act, name: str, n1x1: int, n3x3_red: int, n3x3: int, nd3x3_red: int,
            nd3x3: int, proj: int) -> Act:
    # Branches in Concat order, which is MXNet's argument order.
    c1x1 = net.conv(x, f"{name}_1x1", n1x1, 1)
    c3x3 = net.conv(net.conv(x, f"{name}_3x3_reduce", n3x3_red, 1), f"{name}_3x3", n3x3, 3, pad=1)
    cd3x3 = net.conv(x, f"{name}_double_3x3_reduce", nd3x3_red, 1)
    cd3x3 = net.conv(cd3x3, f"{name}_double_3x3_0", nd3x3, 3, pad=1)
    cd3x3 = net.conv(cd3x3, f"{name}_double_3x3_1", nd3x3, 3, pad=1)
    cproj = net.conv(pool(x, 3, 1, 1), f"{name}_proj", proj, 1)
    return concat(c1x1, c3x3, cd3x3, cproj)


def block_b(net: _Net, x: Act, name: str, n3x3_red: int, n3x3: int, nd3x3_red: int,
            nd3x3: int) -> Act:
    c3x3 = net.conv(x, f"{name}_3x3_reduce", n3x3_red, 1)
    c3x3 = net.conv(c3x3, f"{name}_3x3", n3x3, 3, stride=2, pad=1)
    cd3x3 = net.conv(x, f"{name}_double_3x3_reduce", nd3x3_red, 1)
    cd3x3 = net.conv(cd3x3, f"{name}_double_3x3_0", nd3x3, 3, pad=1)
    cd3x3 = net.conv(cd3x3, f"{name}_double_3x3_1", nd3x3, 3, stride=2, pad=1)
    return concat(c3x3, cd3x3, pool(x, 3, 2, 1))


def shapes(image_shape: Shape, num_classes: int) -> Shapes:
    channels, height, width = image_shape
    net = _Net()
    x: Act = (channels, height, width)
    if height <= 28:
        x = net.conv(x, "1", 96, 3, pad=1)
        for kind, name, *filters in SMALL_BLOCKS:
            if kind == "S":
                x = concat(net.conv(x, f"{name}_1x1", filters[0], 1),
                           net.conv(x, f"{name}_3x3", filters[1], 3, pad=1))
            else:
                x = concat(net.conv(x, f"{name}_conv", filters[0], 3, stride=2, pad=1),
                           pool(x, 3, 2, 1))
    else:
        x = pool(net.conv(x, "1", 64, 7, stride=2, pad=3), 3, 2)
        x = net.conv(x, "2_red", 64, 1)
        x = pool(net.conv(x, "2", 192, 3, pad=1), 3, 2)
        for kind, *block in FULL_BLOCKS:
            x = (block_a if kind == "A" else block_b)(net, x, *block)
    x = pool(x, 7)  # "global_pool": a fixed 7x7 window, stride 1, then Flatten
    features = x[0] * x[1] * x[2]
    return net.arrays + [("fullyconnected0_weight", (num_classes, features)),
                         ("fullyconnected0_bias", (num_classes,))]
