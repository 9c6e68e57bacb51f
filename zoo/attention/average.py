"""Average pooling: every valid key gets the same weight, whatever the query."""

from __future__ import annotations

import torch
from torch import Tensor

from zoo.attention.base import Attention
from zoo.attention.factory import register_attention

__all__ = ["AveragePooling"]


@register_attention("average", aliases=("average_pooling",))
class AveragePooling(Attention):
    """Uniform weights over the keys a query may see: the baseline of kernel regression.

    It ignores queries and keys (all scores are equal), so masks alone shape the weights.
    """

    requires_equal_qk_dims = False

    def score(self, queries: Tensor, keys: Tensor) -> Tensor:
        shape = (*queries.shape[:-1], keys.shape[-2])
        return torch.zeros(shape, dtype=queries.dtype, device=queries.device)
