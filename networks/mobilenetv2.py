"""MobileNet v2 parameter shapes.

Follows Apache MXNet v1.x ``example/image-classification/symbols/mobilenetv2.py`` (the
built-in-symbol version): every conv has ``no_bias=True``, the only biased layer is ``fc``.
Unlike the paper, every inverted-residual unit has its 1x1 expansion conv, even at expansion 1.
Widths are scaled with Python's ``int(round(...))`` (no rounding to multiples of 8). The pool
before ``fc`` is global, so the image size changes nothing; its channels set the stem's input.
"""

from __future__ import annotations

Shape = tuple[int, ...]
Shapes = list[tuple[str, Shape]]

# (expansion t, output channels c, units n, first stride s), as in MXNet's 224x224 config.
BOTTLENECKS = (
    (1, 16, 1, 1),
    (6, 24, 2, 2),
    (6, 32, 3, 2),
    (6, 64, 4, 2),
    (6, 96, 3, 1),
    (6, 160, 3, 2),
    (6, 320, 1, 1),
)
STEM_CHANNELS = 32
LAST_CHANNELS = 1280


def shapes(image_shape: Shape, num_classes: int, multiplier: float = 1.0) -> Shapes:
    """``multiplier`` is MXNet's width multiplier (get_symbol's default is 1.0)."""
    in_channels = int(round(STEM_CHANNELS * multiplier))
    result: Shapes = [("first-3x3-conv-conv2d_weight", (in_channels, image_shape[0], 3, 3))]

    for seq, (expansion, out_channels, units, _) in enumerate(BOTTLENECKS):
        out_channels = int(round(out_channels * multiplier))
        for block in range(units):
            prefix = f"seq-{seq}-block{block}"
            expanded = int(round(in_channels * expansion))
            # The shortcut add lists its input first (already visited), so the order is the
            # unit's own: expand 1x1, depthwise 3x3 (one group per channel), linear 1x1.
            result += [
                (f"{prefix}-exp-conv2d_weight", (expanded, in_channels, 1, 1)),
                (f"{prefix}-depthwise-conv2d_weight", (expanded, 1, 3, 3)),
                (f"{prefix}-linear-conv2d_weight", (out_channels, expanded, 1, 1)),
            ]
            in_channels = out_channels

    # MXNet widens the last conv only for multipliers above 1.
    last = int(LAST_CHANNELS * multiplier) if multiplier > 1.0 else LAST_CHANNELS
    result += [
        ("last-1x1-conv-conv2d_weight", (last, in_channels, 1, 1)),
        ("fc_weight", (num_classes, last)),
        ("fc_bias", (num_classes,)),
    ]
    return result
