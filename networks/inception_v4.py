"""Inception v4 parameter shapes.

Follows Apache MXNet v1.x ``example/image-classification/symbols/inception-v4.py``. Every conv is
``<block>_<conv>_conv2d`` (MXNet's names keep the ``*``, e.g. ``in_stem_conv1_3*3_conv2d_weight``)
with ``no_bias=True``; BatchNorm gamma/beta are not counted, so the only bias is ``fc1``'s.

The final pool is MXNet's "global_avgpool": a fixed 8x8 window with stride 1 and pad 1, then
Flatten. At 299x299 the last blocks are 8x8, so that pool leaves 3x3 and ``fc1`` sees
``1536 * 9 = 13824`` features (not 1536): this is what MXNet's symbol infers, and we keep it.
"""

from __future__ import annotations

from networks._geometry import window_out

Shape = tuple[int, ...]
Shapes = list[tuple[str, Shape]]
Act = tuple[int, int, int]  # (channels, height, width) of an activation

# A conv layer: (MXNet name part, filters, kernel (h, w), stride, pad (h, w)).
Conv = tuple[str, int, tuple[int, int], int, tuple[int, int]]


def _c(name: str, filters: int, kernel=(1, 1), stride: int = 1, pad=(0, 0)) -> Conv:
    return name, filters, kernel, stride, pad


def _pool(kernel: int, stride: int = 1, pad: int = 0) -> tuple[str, int, int, int]:
    return "pool", kernel, stride, pad


# Each block is a list of branches in Concat order (MXNet's argument order); a branch is a chain
# of convs, optionally starting with a pool; a branch that is only a pool adds the input channels.
STEM_1 = [[_pool(3, 2)], [_c("conv4_3*3", 96, (3, 3), 2)]]
STEM_2 = [[_c("conv5_1*1", 64), _c("conv6_3*3", 96, (3, 3))],
          [_c("conv7_1*1", 64), _c("conv8_7*1", 64, (7, 1), pad=(3, 0)),
           _c("conv9_1*7", 64, (1, 7), pad=(0, 3)), _c("conv10_3*3", 96, (3, 3))]]
STEM_3 = [[_c("conv11_3*3", 192, (3, 3), 2)], [_pool(3, 2)]]
INCEPTION_A = [[_pool(3, 1, 1), _c("conv1_1*1", 96)],
               [_c("conv2_1*1", 96)],
               [_c("conv3_1*1", 64), _c("conv4_3*3", 96, (3, 3), pad=(1, 1))],
               [_c("conv5_1*1", 64), _c("conv6_3*3", 96, (3, 3), pad=(1, 1)),
                _c("conv7_3*3", 96, (3, 3), pad=(1, 1))]]
REDUCTION_A = [[_pool(3, 2)],
               [_c("conv1_3*3", 384, (3, 3), 2)],
               [_c("conv2_1*1", 192), _c("conv3_3*3", 224, (3, 3), pad=(1, 1)),
                _c("conv4_3*3", 256, (3, 3), 2)]]
INCEPTION_B = [[_pool(3, 1, 1), _c("conv1_1*1", 128)],
               [_c("conv2_1*1", 384)],
               [_c("conv3_1*1", 192), _c("conv4_1*7", 224, (1, 7), pad=(0, 3)),
                _c("conv5_1*7", 256, (7, 1), pad=(3, 0))],  # MXNet's name says 1*7; it is 7x1
               [_c("conv6_1*1", 192), _c("conv7_1*7", 192, (1, 7), pad=(0, 3)),
                _c("conv8_7*1", 224, (7, 1), pad=(3, 0)), _c("conv9_1*7", 224, (1, 7), pad=(0, 3)),
                _c("conv10_7*1", 256, (7, 1), pad=(3, 0))]]
REDUCTION_B = [[_pool(3, 2)],
               [_c("conv1_1*1", 192), _c("conv2_3*3", 192, (3, 3), 2)],
               [_c("conv3_1*1", 256), _c("conv4_1*7", 256, (1, 7), pad=(0, 3)),
                _c("conv5_7*1", 320, (7, 1), pad=(3, 0)), _c("conv6_3*3", 320, (3, 3), 2)]]

# Inception-C forks twice: a shared stem conv feeds two sibling convs that both enter the Concat.
# (shared chain, [siblings]) pairs; MXNet's 3*1/1*3 names are again swapped against the kernels.
INCEPTION_C = [
    ([_pool(3, 1, 1), _c("conv1_1*1", 256)], []),
    ([_c("conv2_1*1", 256)], []),
    ([_c("conv3_1*1", 384)], [_c("conv4_3*1", 256, (1, 3), pad=(0, 1)),
                              _c("conv5_1*3", 256, (3, 1), pad=(1, 0))]),
    ([_c("conv6_1*1", 384), _c("conv7_1*3", 448, (1, 3), pad=(0, 1)),
      _c("conv8_3*1", 512, (3, 1), pad=(1, 0))],
     [_c("conv9_1*3", 256, (3, 1), pad=(1, 0)), _c("conv10_3*1", 256, (1, 3), pad=(0, 1))]),
]


def concat(parts: list[Act]) -> Act:
    if len({part[1:] for part in parts}) != 1:
        raise ValueError(f"inception-v4: branches of sizes {[p[1:] for p in parts]} cannot be "
                         "concatenated at this image size")
    return sum(part[0] for part in parts), parts[0][1], parts[0][2]


def layer(arrays: Shapes, x: Act, block: str, spec) -> Act:
    """Apply one pool or conv spec to activation ``x``; a conv appends its weight."""
    channels, height, width = x
    if spec[0] == "pool":
        _, kernel, stride, pad = spec
        return (channels, window_out(height, kernel, stride, pad),
                window_out(width, kernel, stride, pad))
    name, filters, kernel, stride, pad = spec
    arrays.append((f"{block}_{name}_conv2d_weight", (filters, channels, *kernel)))
    return (filters, window_out(height, kernel[0], stride, pad[0]),
            window_out(width, kernel[1], stride, pad[1]))


def chain(arrays: Shapes, x: Act, block: str, specs) -> Act:
    for spec in specs:
        x = layer(arrays, x, block, spec)
    return x


def block(arrays: Shapes, x: Act, name: str, branches) -> Act:
    return concat([chain(arrays, x, name, branch) for branch in branches])


def block_c(arrays: Shapes, x: Act, name: str) -> Act:
    outputs = []
    for shared, siblings in INCEPTION_C:
        trunk = chain(arrays, x, name, shared)
        outputs += [layer(arrays, trunk, name, spec) for spec in siblings] or [trunk]
    return concat(outputs)


def shapes(image_shape: Shape, num_classes: int) -> Shapes:
    arrays: Shapes = []
    x: Act = tuple(image_shape)
    x = chain(arrays, x, "in_stem", [_c("conv1_3*3", 32, (3, 3), 2), _c("conv2_3*3", 32, (3, 3)),
                                     _c("conv3_3*3", 64, (3, 3), pad=(1, 1))])
    for branches in (STEM_1, STEM_2, STEM_3):
        x = block(arrays, x, "in_stem", branches)
    for index in range(1, 5):
        x = block(arrays, x, f"in{index}A", INCEPTION_A)
    x = block(arrays, x, "re1A", REDUCTION_A)
    for index in range(1, 8):
        x = block(arrays, x, f"in{index}B", INCEPTION_B)
    x = block(arrays, x, "re1B", REDUCTION_B)
    for index in range(1, 4):
        x = block_c(arrays, x, f"in{index}C")
    x = layer(arrays, x, "", _pool(8, 1, 1))  # "global_avgpool", then Dropout and Flatten
    features = x[0] * x[1] * x[2]
    return arrays + [("fc1_weight", (num_classes, features)), ("fc1_bias", (num_classes,))]
