"""Inception v3 parameter shapes.

Follows Apache MXNet v1.x ``example/image-classification/symbols/inception-v3.py``. Every conv is
``<name>_conv2d`` with ``no_bias=True`` (BatchNorm gamma/beta are not counted), so the only bias is
the classifier's (``fc1``). The final pool is a fixed 8x8 window (stride 1) followed by Flatten: at
299x299 it leaves 1x1 and ``fc1`` sees 2048 features, a larger image gives it ``2048 * h * w``, and
an image much below 299 is rejected, as MXNet rejects it.
"""

from __future__ import annotations

from networks._geometry import window_out

Shape = tuple[int, ...]
Shapes = list[tuple[str, Shape]]
Act = tuple[int, int, int]  # (channels, height, width) of an activation

# Block tables (filter counts), named after MXNet's Inception7A..7E.
# A: (name, 1x1, 5x5 reduce, 5x5, 3x3 reduce, 3x3 a, 3x3 b, pool proj)
BLOCKS_A = (("mixed", 64, 48, 64, 64, 96, 96, 32),
            ("mixed_1", 64, 48, 64, 64, 96, 96, 64),
            ("mixed_2", 64, 48, 64, 64, 96, 96, 64))
# B (downsample): (name, 3x3/2, double-3x3 reduce, 3x3, 3x3/2)
BLOCK_B = ("mixed_3", 384, 64, 96, 96)
# C: (name, 1x1, 7 reduce, 1x7, 7x1, double-7 reduce, 7x1, 1x7, 7x1, 1x7, pool proj)
BLOCKS_C = (("mixed_4", 192, 128, 128, 192, 128, 128, 128, 128, 192, 192),
            ("mixed_5", 192, 160, 160, 192, 160, 160, 160, 160, 192, 192),
            ("mixed_6", 192, 160, 160, 192, 160, 160, 160, 160, 192, 192),
            ("mixed_7", 192, 192, 192, 192, 192, 192, 192, 192, 192, 192))
# D (downsample): (name, 3x3 reduce, 3x3/2, 7 reduce, 1x7, 7x1, 3x3/2)
BLOCK_D = ("mixed_8", 192, 320, 192, 192, 192, 192)
# E: (name, 1x1, 3 reduce, 1x3, 3x1, 3x3 reduce, 3x3, 1x3, 3x1, pool proj)
BLOCKS_E = (("mixed_9", 320, 384, 384, 384, 448, 384, 384, 384, 192),
            ("mixed_10", 320, 384, 384, 384, 448, 384, 384, 384, 192))


def pool(x: Act, kernel: int, stride: int = 1, pad: int = 0) -> Act:
    channels, height, width = x
    return channels, window_out(height, kernel, stride, pad), window_out(width, kernel, stride, pad)


def concat(*parts: Act) -> Act:
    if len({part[1:] for part in parts}) != 1:
        raise ValueError(f"inception-v3: branches of sizes {[p[1:] for p in parts]} cannot be "
                         "concatenated at this image size")
    return sum(part[0] for part in parts), parts[0][1], parts[0][2]


class _Net:
    """Collects the arrays in MXNet's argument order while tracking activation shapes."""

    def __init__(self) -> None:
        self.arrays: Shapes = []
        self.positions: dict[str, int] = {}   # conv weight -> output height x width

    def conv(self, x: Act, name: str, filters: int, kernel: tuple[int, int] = (1, 1),
             stride: int = 1, pad: tuple[int, int] = (0, 0)) -> Act:
        channels, height, width = x
        self.arrays.append((f"{name}_conv2d_weight", (filters, channels, *kernel)))
        out = (filters, window_out(height, kernel[0], stride, pad[0]),
               window_out(width, kernel[1], stride, pad[1]))
        self.positions[f"{name}_conv2d_weight"] = out[1] * out[2]
        return out

    def chain(self, x: Act, prefix: str, layers) -> Act:
        """Convs applied one after the other, named prefix_conv, prefix_conv_1, prefix_conv_2..."""
        for index, (filters, kernel, stride, pad) in enumerate(layers):
            name = f"{prefix}_conv" + (f"_{index}" if index else "")
            x = self.conv(x, name, filters, kernel, stride, pad)
        return x


ONE = ((1, 1), 1, (0, 0))      # 1x1 conv: kernel, stride, pad
THREE = ((3, 3), 1, (1, 1))    # 3x3, same size
THREE_DOWN = ((3, 3), 2, (0, 0))
ROW7, COL7 = ((1, 7), 1, (0, 3)), ((7, 1), 1, (3, 0))
ROW3, COL3 = ((1, 3), 1, (0, 1)), ((3, 1), 1, (1, 0))


def block_a(net: _Net, x: Act, name, n1x1, n5_red, n5, n3_red, n3_a, n3_b, proj) -> Act:
    # Branches in Concat order, which is MXNet's argument order.
    return concat(net.conv(x, f"{name}_conv", n1x1),
                  net.chain(x, f"{name}_tower", [(n5_red, *ONE), (n5, (5, 5), 1, (2, 2))]),
                  net.chain(x, f"{name}_tower_1", [(n3_red, *ONE), (n3_a, *THREE), (n3_b, *THREE)]),
                  net.conv(pool(x, 3, 1, 1), f"{name}_tower_2_conv", proj))


def block_b(net: _Net, x: Act, name, n3, nd_red, nd_a, nd_b) -> Act:
    return concat(net.conv(x, f"{name}_conv", n3, *THREE_DOWN),
                  net.chain(x, f"{name}_tower",
                            [(nd_red, *ONE), (nd_a, *THREE), (nd_b, *THREE_DOWN)]),
                  pool(x, 3, 2))


def block_c(net: _Net, x: Act, name, n1x1, d7_red, d7_a, d7_b, q7_red, q7_a, q7_b, q7_c, q7_d,
            proj) -> Act:
    return concat(net.conv(x, f"{name}_conv", n1x1),
                  net.chain(x, f"{name}_tower", [(d7_red, *ONE), (d7_a, *ROW7), (d7_b, *COL7)]),
                  net.chain(x, f"{name}_tower_1", [(q7_red, *ONE), (q7_a, *COL7), (q7_b, *ROW7),
                                                   (q7_c, *COL7), (q7_d, *ROW7)]),
                  net.conv(pool(x, 3, 1, 1), f"{name}_tower_2_conv", proj))


def block_d(net: _Net, x: Act, name, n3_red, n3, d7_red, d7_a, d7_b, d7_3x3) -> Act:
    return concat(net.chain(x, f"{name}_tower", [(n3_red, *ONE), (n3, *THREE_DOWN)]),
                  net.chain(x, f"{name}_tower_1", [(d7_red, *ONE), (d7_a, *ROW7), (d7_b, *COL7),
                                                   (d7_3x3, *THREE_DOWN)]),
                  pool(x, 3, 2))


def block_e(net: _Net, x: Act, name, n1x1, d3_red, d3_a, d3_b, n3_red, n3, n3_a, n3_b,
            proj) -> Act:
    # Each tower forks into a 1x3 and a 3x1 conv; both halves go into the Concat.
    c1x1 = net.conv(x, f"{name}_conv", n1x1)
    tower = net.conv(x, f"{name}_tower_conv", d3_red)
    tower_a = net.conv(tower, f"{name}_tower_mixed_conv", d3_a, *ROW3)
    tower_b = net.conv(tower, f"{name}_tower_mixed_conv_1", d3_b, *COL3)
    tower_1 = net.chain(x, f"{name}_tower_1", [(n3_red, *ONE), (n3, *THREE)])
    tower_1a = net.conv(tower_1, f"{name}_tower_1_mixed_conv", n3_a, *ROW3)
    tower_1b = net.conv(tower_1, f"{name}_tower_1_mixed_conv_1", n3_b, *COL3)
    cproj = net.conv(pool(x, 3, 1, 1), f"{name}_tower_2_conv", proj)
    return concat(c1x1, tower_a, tower_b, tower_1a, tower_1b, cproj)


def shapes(image_shape: Shape, num_classes: int) -> Shapes:
    net, features = build(image_shape)
    return net.arrays + [("fc1_weight", (num_classes, features)), ("fc1_bias", (num_classes,))]


def conv_positions(image_shape: Shape) -> dict[str, int]:
    """Output positions (height x width) of every conv weight, for networks.costs."""
    return build(image_shape)[0].positions


def build(image_shape: Shape) -> tuple[_Net, int]:
    """The convolutional body: its arrays and geometry, and the classifier's input features."""
    net = _Net()
    x: Act = tuple(image_shape)
    x = net.conv(x, "conv", 32, (3, 3), 2)
    x = net.conv(x, "conv_1", 32, (3, 3))
    x = pool(net.conv(x, "conv_2", 64, *THREE), 3, 2)
    x = net.conv(x, "conv_3", 80)
    x = pool(net.conv(x, "conv_4", 192, (3, 3)), 3, 2)
    for block in BLOCKS_A:
        x = block_a(net, x, *block)
    x = block_b(net, x, *BLOCK_B)
    for block in BLOCKS_C:
        x = block_c(net, x, *block)
    x = block_d(net, x, *BLOCK_D)
    for block in BLOCKS_E:
        x = block_e(net, x, *block)
    x = pool(x, 8)  # "global_pool": a fixed 8x8 window, stride 1, then Flatten
    return net, x[0] * x[1] * x[2]
