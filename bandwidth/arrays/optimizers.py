"""Optimizers a kvstore can apply to the reduced gradient, with MXNet's defaults."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Sgd:
    """Plain SGD as MXNet's create_optimizer('sgd'): lr 0.01, no momentum, no weight decay."""

    lr: float = 0.01
    name: str = "sgd"

    def apply(self, weight: torch.Tensor, grad_sum: torch.Tensor) -> None:
        weight.add_(grad_sum, alpha=-self.lr)

    def expected(self, grad_sum: torch.Tensor, steps: int) -> torch.Tensor:
        """Weights after ``steps`` updates from zero with the same summed gradient each step."""
        return grad_sum * (-self.lr * steps)


OPTIMIZERS = {"sgd": Sgd}


def make(name: str) -> Sgd | None:
    return None if name == "none" else OPTIMIZERS[name]()
