"""Parameter shapes of real networks, as plain data.

Every network is a pure function that returns the ordered list of ``(name, shape)`` arrays whose
gradients a data-parallel job exchanges. For the MXNet image-classification networks that is exactly
what MXNet's ``tools/bandwidth/measure.py`` keeps: every argument of the symbol whose name contains
``weight`` or ``bias``, in the order ``symbol.list_arguments()`` gives them. No deep-learning framework
is imported here.

Usage::

    from networks import get_shapes
    shapes = get_shapes("resnet", image_shape=(3, 224, 224), num_classes=1000, num_layers=200)
    len(shapes)                     # 205
    sum(prod(s) for _, s in shapes) * 4 / 1e6   # 257.991328 (MB in float32)
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from networks import (
    alexnet,
    googlenet,
    inception_bn,
    inception_resnet_v2,
    inception_v3,
    inception_v4,
    lenet,
    mlp,
    mobilenet,
    mobilenetv2,
    resnet,
    resnext,
    transformers,
    vgg,
)

Shape = tuple[int, ...]
Shapes = list[tuple[str, Shape]]


class NetworkError(ValueError):
    """A network name, option or shape file that cannot be used."""


@dataclass(frozen=True)
class Network:
    """One entry of the table: how to build the shapes and which depths exist.

    ``layers`` lists the supported ``--num-layers`` values (None: the network has no depth option);
    ``layers_for`` refines that per image shape (MXNet's resnet has other depths for 28x28 images).
    """

    build: Callable[..., Shapes]
    default_layers: int | None = None
    layers_for: Callable[[Shape], Sequence[int]] | None = None
    summary: str = ""


NETWORKS: dict[str, Network] = {
    "mlp": Network(mlp.shapes, summary="3-layer perceptron (MXNet's mlp)"),
    "lenet": Network(lenet.shapes, summary="LeNet (MXNet's lenet)"),
    "alexnet": Network(alexnet.shapes, summary="AlexNet (MXNet's alexnet)"),
    "googlenet": Network(googlenet.shapes, summary="GoogLeNet (MXNet's googlenet)"),
    "vgg": Network(vgg.shapes, default_layers=16, layers_for=vgg.supported_layers,
                   summary="VGG 11/13/16/19 (MXNet's vgg)"),
    "resnet": Network(resnet.shapes, default_layers=152, layers_for=resnet.supported_layers,
                      summary="ResNet v2 (MXNet's resnet)"),
    "resnext": Network(resnext.shapes, default_layers=152, layers_for=resnext.supported_layers,
                       summary="ResNeXt 32x4d (MXNet's resnext)"),
    "inception-bn": Network(inception_bn.shapes, summary="Inception with BatchNorm"),
    "inception-v3": Network(inception_v3.shapes, summary="Inception v3 (use 3,299,299)"),
    "inception-v4": Network(inception_v4.shapes, summary="Inception v4 (use 3,299,299)"),
    "inception-resnet-v2": Network(inception_resnet_v2.shapes,
                                   summary="Inception-ResNet v2 (use 3,299,299)"),
    "mobilenet": Network(mobilenet.shapes, summary="MobileNet v1 (MXNet's mobilenet)"),
    "mobilenetv2": Network(mobilenetv2.shapes, summary="MobileNet v2 (MXNet's mobilenetv2)"),
    **{name: Network(build, summary=summary)
       for name, (build, summary) in transformers.MODELS.items()},
}


def names() -> list[str]:
    return sorted(NETWORKS)


def takes_image(name: str) -> bool:
    """Whether ``--image-shape`` and ``--num-classes`` change network ``name``'s arrays: every
    image network and ViT; not the language models, a flat buffer or a shapes file."""
    if name in transformers.CONFIGS:
        return transformers.CONFIGS[name].family == "vit"
    return name in NETWORKS


def supported_layers(name: str, image_shape: Shape) -> tuple[int, ...]:
    """The ``--num-layers`` values network ``name`` accepts at ``image_shape`` (empty: none)."""
    entry = NETWORKS[name]
    return tuple(entry.layers_for(image_shape)) if entry.layers_for else ()


def get_shapes(name: str, image_shape: Shape = (3, 224, 224), num_classes: int = 1000,
               num_layers: int | None = None) -> Shapes:
    """Ordered ``(name, shape)`` arrays of network ``name`` (or of a JSON shape file).

    ``num_layers`` None picks the network's default depth. Raises NetworkError with the valid
    choices for an unknown name or an unsupported depth.
    """
    if name.startswith("flat:"):
        return flat(name)
    # A built-in name is the network, even if a file of that name sits in the working directory.
    if name not in NETWORKS and (name.endswith(".json") or Path(name).is_file()):
        return load_json(Path(name))
    if name not in NETWORKS:
        raise NetworkError(f"unknown network {name!r}; valid: {', '.join(names())}, "
                           "or a path to a .json shape file")
    entry = NETWORKS[name]
    shape_text = ",".join(str(d) for d in image_shape)
    try:
        if entry.layers_for is None:
            # Depth-less networks ignore --num-layers, as MXNet's get_symbol(**kwargs) did.
            return entry.build(image_shape=image_shape, num_classes=num_classes)
        layers = entry.default_layers if num_layers is None else num_layers
        valid = supported_layers(name, image_shape)
        if not valid:
            raise NetworkError(f"{name} cannot be built at image shape {shape_text} (too small)")
        if layers not in valid:
            listed = ", ".join(str(v) for v in valid[:12])
            if len(valid) > 12:
                listed += f", ... ({len(valid)} values up to {valid[-1]})"
            raise NetworkError(f"{name} has no {layers}-layer version at image shape "
                               f"{shape_text}; valid --num-layers: {listed}")
        return entry.build(image_shape=image_shape, num_classes=num_classes, num_layers=layers)
    except NetworkError:
        raise
    except ValueError as exc:      # e.g. an image too small for the network's pooling
        raise NetworkError(f"{name} at image shape {shape_text}: {exc}") from None


def flat(name: str) -> Shapes:
    """``flat:N``: one array of N elements (a flat buffer, as nccl-tests exchanges)."""
    count = name.partition(":")[2]
    if not count.isdigit() or int(count) < 1:
        raise NetworkError(f"{name!r}: a flat buffer is written flat:N with N a positive number of "
                           "elements (or use --network flat -b 1M -e 1G -f 2)")
    return [("flat", (int(count),))]


MAX_DIMS = 8                  # torch's tensors go further; no network's parameters do
MAX_ELEMENTS = 1 << 48        # 1 PiB of float32 and more: beyond any device
MAX_NAME_CHARS = 200


def load_json(path: Path) -> Shapes:
    """Read a user's shape list: ``[["fc1_weight", [128, 784]], ...]`` or
    ``{"arrays": [{"name": "fc1_weight", "shape": [128, 784]}, ...]}``."""
    if path.exists() and not path.is_file():       # a FIFO or device would block the read
        raise NetworkError(f"shape file {str(path)!r} is not a regular file (a FIFO, socket, "
                           "device or folder)")
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise NetworkError(f"cannot read shape file {str(path)!r}: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise NetworkError(f"shape file {str(path)!r} is not valid JSON: {exc}") from None
    except UnicodeDecodeError:
        raise NetworkError(f"shape file {str(path)!r} is not UTF-8 text") from None
    except RecursionError:
        raise NetworkError(f"shape file {str(path)!r} is nested too deeply; expected a list of "
                           "[name, shape] pairs") from None
    except ValueError as exc:      # e.g. an integer of more digits than Python converts
        raise NetworkError(f"shape file {str(path)!r}: {str(exc)[:100]}") from None
    entries = data.get("arrays") if isinstance(data, dict) else data
    if not isinstance(entries, list) or not entries:
        raise NetworkError(f"shape file {str(path)!r} must hold a non-empty list of arrays, "
                           'e.g. [["fc_weight", [10, 20]]] or {"arrays": [{"name": ..., "shape": ...}]}')
    shapes: Shapes = []
    total = 0
    for index, entry in enumerate(entries):
        if isinstance(entry, dict):
            array_name, shape = entry.get("name", f"array{index}"), entry.get("shape")
        elif isinstance(entry, (list, tuple)) and len(entry) == 2:
            array_name, shape = entry
        else:
            array_name, shape = None, None
        if (not isinstance(array_name, str) or not isinstance(shape, list) or not shape
                or len(shape) > MAX_DIMS
                or not all(isinstance(d, int) and not isinstance(d, bool) and 0 < d <= MAX_ELEMENTS
                           for d in shape)):
            shown = repr(entry)
            raise NetworkError(f"shape file {str(path)!r}: entry {index} must be a name and a list "
                               f"of positive integers (1 to {MAX_DIMS} of them), got "
                               f"{shown if len(shown) <= 80 else shown[:80] + '...'}")
        if not array_name.isprintable() or len(array_name) > MAX_NAME_CHARS:
            raise NetworkError(f"shape file {str(path)!r}: entry {index}'s name "
                               f"{array_name[:40]!r} must be printable (no newline or control "
                               f"character) and at most {MAX_NAME_CHARS} characters")
        shapes.append((array_name, tuple(shape)))
        total += math.prod(shape)
        if total > MAX_ELEMENTS:
            raise NetworkError(f"shape file {str(path)!r}: more than {MAX_ELEMENTS} elements "
                               f"(2^48) in all at entry {index}; no device holds that")
    return shapes


def num_elements(shapes: Shapes) -> int:
    return sum(math.prod(shape) for _, shape in shapes)
