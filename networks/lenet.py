"""LeNet parameter shapes.

Follows Apache MXNet v1.x ``example/image-classification/symbols/lenet.py`` with its default
``add_stn=False``. Its layers are unnamed, so MXNet names them from per-operator counters in a
fresh process: convolution0/1 and fullyconnected0/1, each with a weight and a bias.
"""

from __future__ import annotations

from networks._geometry import window_out

Shape = tuple[int, ...]
Shapes = list[tuple[str, Shape]]


def shapes(image_shape: Shape, num_classes: int) -> Shapes:
    channels, height, width = image_shape
    result: Shapes = []
    # Two 5x5 convs (20 then 50 filters), each followed by a 2x2/2 max pool.
    for index, filters in enumerate((20, 50)):
        result += [(f"convolution{index}_weight", (filters, channels, 5, 5)),
                   (f"convolution{index}_bias", (filters,))]
        channels = filters
        height, width = (window_out(window_out(s, 5), 2, 2) for s in (height, width))

    # Flatten feeds fc 500 then the classifier: at 28x28 that is 50 x 4 x 4 = 800 inputs.
    flat = channels * height * width
    for index, (inputs, outputs) in enumerate(((flat, 500), (500, num_classes))):
        result += [(f"fullyconnected{index}_weight", (outputs, inputs)),
                   (f"fullyconnected{index}_bias", (outputs,))]
    return result


def conv_positions(image_shape: Shape) -> dict[str, int]:
    """Output positions (height x width) of both 5x5 convs, for networks.costs."""
    _, height, width = image_shape
    result = {}
    for index in range(2):
        height, width = window_out(height, 5), window_out(width, 5)
        result[f"convolution{index}_weight"] = height * width
        height, width = window_out(height, 2, 2), window_out(width, 2, 2)
    return result
