"""Inception-ResNet v2 parameter shapes.

Follows Apache MXNet v1.x ``example/image-classification/symbols/inception-resnet-v2.py``. No layer
there is named, so MXNet numbers them in creation order: ``convolution0`` .. ``convolution243``
(each with a weight and a bias, no ``no_bias``) and ``fullyconnected0``; BatchNorm gamma/beta are
not counted. Creation order equals MXNet's argument order here, because every Concat lists its
branches in the order they are built. The numbering assumes the symbol is the first one built in
its process, as in MXNet's ``tools/bandwidth/measure.py``.

MXNet's file keeps two quirks that we reproduce: block17's second 1x1 conv has 129 filters (not
128) and its 1x7/7x1 convs are padded (1, 2)/(2, 1). The classifier follows a true global pool, so
the image size changes no shape; it only has to be large enough for the stem and reductions.

Note: the file writes the residual sum as ``net += scale * tower_out``, which MXNet 1.x Symbols
reject (``__iadd__`` is NDArray-only); we follow its evident meaning, ``net = net + ...``, which
has no parameters of its own.
"""

from __future__ import annotations

from networks._geometry import window_out

Shape = tuple[int, ...]
Shapes = list[tuple[str, Shape]]
Act = tuple[int, int, int]  # (channels, height, width) of an activation

# A conv layer: (filters, kernel (h, w), stride, pad (h, w)). A branch is a chain of convs,
# optionally led by a pool (kernel, stride, pad); an empty branch is a 3x3/2 max pool.
SAME3 = ((3, 3), 1, (1, 1))
DOWN3 = ((3, 3), 2, (0, 0))


def _c(filters: int, kernel=(1, 1), stride: int = 1, pad=(0, 0)):
    return filters, kernel, stride, pad


STEM = [_c(32, *DOWN3), _c(32, (3, 3)), _c(64, *SAME3), "maxpool", _c(80), _c(192, (3, 3)),
        "maxpool"]
MIXED_5B = [[_c(96)], [_c(48), _c(64, (5, 5), pad=(2, 2))],
            [_c(64), _c(96, *SAME3), _c(96, *SAME3)], ["avgpool", _c(64)]]
REDUCTION_A = [[_c(384, *DOWN3)], [_c(256), _c(256, *SAME3), _c(384, *DOWN3)], []]
REDUCTION_B = [[_c(256), _c(384, *DOWN3)], [_c(256), _c(288, *DOWN3)],
               [_c(256), _c(288, *SAME3), _c(320, *DOWN3)], []]

# Residual blocks: (count, towers); each block ends in a 1x1 conv back to the input width.
RESIDUAL_35 = (10, [[_c(32)], [_c(32), _c(32, *SAME3)], [_c(32), _c(48, *SAME3), _c(64, *SAME3)]])
RESIDUAL_17 = (20, [[_c(192)], [_c(129), _c(160, (1, 7), pad=(1, 2)), _c(192, (7, 1), pad=(2, 1))]])
# Nine block8 units with ReLU and a tenth without: the same shapes.
RESIDUAL_8 = (10, [[_c(192)], [_c(192), _c(224, (1, 3), pad=(0, 1)), _c(256, (3, 1), pad=(1, 0))]])


class _Net:
    """Numbers the convolutions as MXNet does and tracks activation shapes."""

    def __init__(self) -> None:
        self.arrays: Shapes = []

    def layer(self, x: Act, spec) -> Act:
        channels, height, width = x
        if spec == "maxpool":  # 3x3, stride 2
            return channels, window_out(height, 3, 2), window_out(width, 3, 2)
        if spec == "avgpool":  # 3x3, stride 1, pad 1
            return channels, window_out(height, 3, 1, 1), window_out(width, 3, 1, 1)
        filters, kernel, stride, pad = spec
        name = f"convolution{len(self.arrays) // 2}"
        self.arrays += [(f"{name}_weight", (filters, channels, *kernel)),
                        (f"{name}_bias", (filters,))]
        return (filters, window_out(height, kernel[0], stride, pad[0]),
                window_out(width, kernel[1], stride, pad[1]))

    def chain(self, x: Act, specs) -> Act:
        for spec in specs or ["maxpool"]:
            x = self.layer(x, spec)
        return x

    def concat(self, x: Act, branches) -> Act:
        parts = [self.chain(x, branch) for branch in branches]
        if len({part[1:] for part in parts}) != 1:
            raise ValueError(f"inception-resnet-v2: branches of sizes {[p[1:] for p in parts]} "
                             "cannot be concatenated at this image size")
        return sum(part[0] for part in parts), parts[0][1], parts[0][2]

    def residual(self, x: Act, plan) -> Act:
        count, towers = plan
        for _ in range(count):
            out = self.layer(self.concat(x, towers), _c(x[0]))
            if out != x:
                raise ValueError(f"inception-resnet-v2: residual branch {out} does not match its "
                                 f"input {x} at this image size")
        return x


def shapes(image_shape: Shape, num_classes: int) -> Shapes:
    net = _Net()
    x = net.chain(tuple(image_shape), STEM)
    x = net.residual(net.concat(x, MIXED_5B), RESIDUAL_35)     # 320 channels
    x = net.residual(net.concat(x, REDUCTION_A), RESIDUAL_17)  # 1088 channels
    x = net.residual(net.concat(x, REDUCTION_B), RESIDUAL_8)   # 2080 channels
    x = net.layer(x, _c(1536))
    # Global average pool, Flatten and Dropout: 1536 features whatever the image size.
    return net.arrays + [("fullyconnected0_weight", (num_classes, x[0])),
                         ("fullyconnected0_bias", (num_classes,))]
