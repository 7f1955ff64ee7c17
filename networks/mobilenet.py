"""MobileNet v1 parameter shapes.

Follows Apache MXNet v1.x ``example/image-classification/symbols/mobilenet.py`` (``get_symbol``):
a 3x3/2 conv then 13 depthwise + pointwise pairs, all with ``no_bias=True``, then ``fc``.

Its average pool is not global: the kernel is ``resolution / 32`` with ``resolution`` fixed at 224
(measure.py passes the image shape, which get_symbol ignores), i.e. a 7x7 'valid' pool. An image
other than 224 therefore changes fc's input: 1024 x (F - 6)^2 for a final feature map of F x F.
"""

from __future__ import annotations

from networks._geometry import window_out

Shape = tuple[int, ...]
Shapes = list[tuple[str, Shape]]

ALPHAS = (0.25, 0.5, 0.75, 1.0)
POOL_KERNEL = 224 // 32

# Depthwise/pointwise pairs conv_2..conv_14 as (depthwise stride, pointwise width factor), the
# widths in units of the stem's 32*alpha channels; a depthwise conv keeps its input's width.
PAIRS = (
    (1, 2), (2, 4), (1, 4), (2, 8), (1, 8), (2, 16),
    (1, 16), (1, 16), (1, 16), (1, 16), (1, 16),
    (2, 32), (1, 32),
)


def shapes(image_shape: Shape, num_classes: int, alpha: float = 1.0) -> Shapes:
    """``alpha`` is MXNet's width multiplier (default 1, which measure.py never changes)."""
    if alpha not in ALPHAS:
        raise ValueError(f"mobilenet alpha must be one of {ALPHAS}")
    base = int(32 * alpha)
    channels, height, width = image_shape
    sizes = [window_out(s, 3, 2, 1) for s in (height, width)]
    result: Shapes = [("conv_1_conv2d_weight", (base, channels, 3, 3))]
    channels = base

    for index, (stride, factor) in enumerate(PAIRS, start=2):
        # Depthwise: one group per channel, so each filter sees a single input channel.
        result.append((f"conv_{index}_dw_conv2d_weight", (channels, 1, 3, 3)))
        sizes = [window_out(s, 3, stride, 1) for s in sizes]
        result.append((f"conv_{index}_conv2d_weight", (base * factor, channels, 1, 1)))
        channels = base * factor

    pooled = [window_out(s, POOL_KERNEL) for s in sizes]
    flat = channels * pooled[0] * pooled[1]
    result += [("fc_weight", (num_classes, flat)), ("fc_bias", (num_classes,))]
    return result


def conv_positions(image_shape: Shape, alpha: float = 1.0) -> dict[str, int]:
    """Output positions of every conv weight; a pointwise conv keeps its depthwise conv's size."""
    sizes = [window_out(s, 3, 2, 1) for s in image_shape[1:]]
    result = {"conv_1_conv2d_weight": sizes[0] * sizes[1]}
    for index, (stride, _) in enumerate(PAIRS, start=2):
        sizes = [window_out(s, 3, stride, 1) for s in sizes]
        result[f"conv_{index}_dw_conv2d_weight"] = result[f"conv_{index}_conv2d_weight"] = \
            sizes[0] * sizes[1]
    return result
