"""What a network's layers compute in a training step: FLOPs and activation sizes, as plain data.

A *layer* is the arrays that share a name up to their ``weight``/``bias`` suffix (``fc1_weight``
and ``fc1_bias``; ``h.0.attn.c_attn.weight`` and ``.bias``), in the network's order, which is the
order of the forward pass. Per sample, every parameter element is used once per output position
(a convolution's output height x width, a transformer's tokens, one for a classifier on features):

* a weight of 2 or more dimensions costs a multiply-add, 2 FLOPs, per element and position;
* a vector (bias, norm scale or shift) costs 1 FLOP per element and position;
* a lookup table (an embedding) costs nothing; attention adds its score and context products.

Backward costs twice forward (the gradient of the input and the gradient of the weights, each a
product of forward's size), except the first layer, which needs no input gradient. Everything is
multiplied by the batch size. docs/formulas.md derives these.

Usage::

    from networks.costs import layer_costs, step_flops
    layers = layer_costs("resnet", (3, 224, 224), 1000, 50, batch_size=32)
    step_flops(layers)      # (forward, backward) FLOPs of one step: about 0.26 and 0.52 TFLOP
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import networks
from networks import alexnet, inception_v3, lenet, mobilenet, resnet, resnext, transformers, vgg

Shape = tuple[int, ...]
# (positions per array, output features per array where not shape[0], extra FLOPs per array)
Uses = tuple[dict[str, int], dict[str, int], dict[str, int]]


@dataclass(frozen=True)
class LayerCost:
    name: str
    arrays: tuple[str, ...]
    forward_flops: int           # at the batch size
    backward_flops: int
    activation_elements: int     # the layer's output, kept for backward, at the batch size


def _convs(positions: Callable[..., dict[str, int]], depth: bool = False):
    """A geometry entry of an image network whose convs record their output positions (every
    other array, the classifier, is applied once per sample)."""
    def uses(image_shape: Shape, num_layers: int | None, seq_len: int | None) -> Uses:
        found = positions(image_shape, num_layers) if depth else positions(image_shape)
        return found, {}, {}
    return uses


def _tokens(name: str):
    def uses(image_shape: Shape, num_layers: int | None, seq_len: int | None) -> Uses:
        return transformers.token_uses(name, image_shape, seq_len)
    return uses


GEOMETRY: dict[str, Callable[[Shape, int | None, int | None], Uses]] = {
    "mlp": lambda image_shape, num_layers, seq_len: ({}, {}, {}),
    "lenet": _convs(lenet.conv_positions),
    "alexnet": _convs(alexnet.conv_positions),
    "vgg": _convs(vgg.conv_positions, depth=True),
    "resnet": _convs(resnet.conv_positions, depth=True),
    "resnext": _convs(resnext.conv_positions, depth=True),
    "inception-v3": _convs(inception_v3.conv_positions),
    "mobilenet": _convs(mobilenet.conv_positions),
    **{name: _tokens(name) for name in transformers.CONFIGS},
}


def layer_name(array: str) -> str:
    for suffix in ("_weight", "_bias", ".weight", ".bias"):
        if array.endswith(suffix):
            return array[:-len(suffix)]
    return array


def has_costs(network: str) -> bool:
    return network in GEOMETRY


def layer_costs(network: str, image_shape: Shape = (3, 224, 224), num_classes: int = 1000,
                num_layers: int | None = None, batch_size: int = 32,
                seq_len: int | None = None) -> list[LayerCost]:
    """Each layer's forward and backward FLOPs and output size at ``batch_size``, in forward
    order. Raises NetworkError for a network without geometry here (a shape file, flat:N)."""
    if network not in GEOMETRY:
        raise networks.NetworkError(
            f"{network}: no per-layer geometry (FLOPs) for this network; built in for "
            f"{', '.join(sorted(GEOMETRY))}; give the step's times with --compute-ms or "
            "--compute-file instead")
    if batch_size < 1:
        raise networks.NetworkError(f"the batch size must be at least 1; got {batch_size}")
    layers = num_layers or networks.NETWORKS[network].default_layers
    shapes = networks.get_shapes(network, image_shape, num_classes, num_layers)
    positions, outputs, extra = GEOMETRY[network](image_shape, layers, seq_len)
    grouped: dict[str, list[tuple[str, Shape]]] = {}
    for array, shape in shapes:
        grouped.setdefault(layer_name(array), []).append((array, shape))
    result = []
    for index, (name, arrays) in enumerate(grouped.items()):
        forward = activation = 0
        for array, shape in arrays:
            used = positions.get(array, positions.get(_weight_of(array, arrays), 1))
            per_use = 2 if len(shape) >= 2 else 1
            forward += per_use * used * math.prod(shape) + extra.get(array, 0)
            activation = max(activation, used * outputs.get(array, shape[0]))
        forward *= batch_size
        result.append(LayerCost(name, tuple(a for a, _ in arrays), forward,
                                forward if index == 0 else 2 * forward,
                                activation * batch_size))
    return result


def _weight_of(array: str, arrays: list[tuple[str, Shape]]) -> str:
    """A bias is applied where its layer's weight is."""
    weights = [a for a, shape in arrays if len(shape) >= 2]
    return weights[0] if weights else array


def step_flops(layers: list[LayerCost]) -> tuple[int, int]:
    """(forward, backward) FLOPs of one step on one device."""
    return (sum(layer.forward_flops for layer in layers),
            sum(layer.backward_flops for layer in layers))


def activation_elements(layers: list[LayerCost]) -> int:
    """Elements of activations a training step keeps for its backward pass, on one device."""
    return sum(layer.activation_elements for layer in layers)
