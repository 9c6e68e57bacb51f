"""The scores most variants start from: ``q . k * scale`` (Vaswani et al., 2017), with ``scale``
``1 / sqrt(d)`` unless given. A variant that weighs these scores its own way (softpick,
stick-breaking, sigmoid) takes them from :class:`ScaledDotScores` and writes only ``weigh``."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from zoo.attention.contract.base import Attention

__all__ = ["ScaledDotScores"]


class ScaledDotScores(Attention):
    """An attention scoring ``q . k * scale``.

    Args:
        dropout: Dropout on the attention weights during training.
        scale: Multiplier of the dot products; ``None`` means ``1 / sqrt(d)``.
    """

    def __init__(self, dropout: float = 0.0, scale: float | None = None) -> None:
        super().__init__(dropout)
        self.scale = scale

    def dot_scale(self, queries: Tensor) -> float:
        """The multiplier for queries of ``queries.shape[-1]`` features."""
        return self.scale if self.scale is not None else 1.0 / math.sqrt(queries.shape[-1])

    def score(self, queries: Tensor, keys: Tensor) -> Tensor:
        return torch.matmul(queries, keys.transpose(-2, -1)) * self.dot_scale(queries)

    def extra_repr(self) -> str:
        return f"scale={self.scale}" if self.scale is not None else ""
