"""Multilayer perceptron parameter shapes.

Follows Apache MXNet v1.x ``example/image-classification/symbols/mlp.py``: the image is flattened
and fed to fc1 (128 units), fc2 (64) and fc3 (num_classes), each with a weight and a bias.
"""

from __future__ import annotations

import math

Shape = tuple[int, ...]
Shapes = list[tuple[str, Shape]]


def shapes(image_shape: Shape, num_classes: int) -> Shapes:
    inputs = math.prod(image_shape)  # Flatten: C*H*W, e.g. 784 for 1x28x28
    result: Shapes = []
    for name, outputs in (("fc1", 128), ("fc2", 64), ("fc3", num_classes)):
        result += [(f"{name}_weight", (outputs, inputs)), (f"{name}_bias", (outputs,))]
        inputs = outputs
    return result
