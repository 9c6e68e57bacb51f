"""Average pooling: every valid key gets the same weight, whatever the query.

Its weights are those of a softmax over equal scores, so the base class's score path computes it
exactly, at the cost of ``(Lq, Lk)`` weights per sequence. Under a key mask (padding, the same for
every query) or causality it is a masked mean of the values, or a running one, which ``attend``
takes in ``O(L d)`` time and memory: the mean over the kept keys, or the cumulative sums of the kept
values and of the mask read at each query's last visible key. The score path stays for
``need_weights``, attention dropout in training, a positional bias, and masks that differ per query.
"""

from __future__ import annotations

from typing import ClassVar

import torch
from torch import Tensor

from zoo.attention.build.factory import register_attention
from zoo.attention.contract.base import Attention, AttentionOutput
from zoo.attention.contract.context import AttentionContext
from zoo.attention.contract.masking import key_column

__all__ = ["AveragePooling"]


@register_attention("average", aliases=("average_pooling",))
class AveragePooling(Attention):
    """Uniform weights over the keys a query may see: the baseline of kernel regression.

    It ignores queries and keys (all scores are equal), so masks alone shape the weights, and a
    multi-head layer over it builds no query or key projection (every parameter gets a gradient).
    """

    family = "kernel smoother"
    cost = "L²"

    requires_equal_qk_dims = False
    reads_queries = False
    reads_keys = False
    supports_position_bias: ClassVar[bool] = True  # through the score path, where it shapes the weights

    def score(self, queries: Tensor, keys: Tensor) -> Tensor:
        shape = (*queries.shape[:-1], keys.shape[-2])
        return torch.zeros(shape, dtype=queries.dtype, device=queries.device)

    def attend(self, queries: Tensor, keys: Tensor, values: Tensor, context: AttentionContext) -> AttentionOutput:
        """The (running) masked mean of the values where it applies (see the module docstring)."""
        mask = context.mask
        keep = None if mask is None else key_column(mask)  # (..., Lk, 1)
        if (
            context.need_weights
            or context.position_bias is not None
            or (mask is not None and keep is None)
            or self.active_dropout
        ):
            return super().attend(queries, keys, values, context)
        num_queries, num_keys = queries.shape[-2], keys.shape[-2]
        dtype = torch.promote_types(values.dtype, torch.float32)  # sums in float32 at least
        keep = torch.ones(num_keys, 1, dtype=dtype, device=values.device) if keep is None else keep.to(dtype)
        kept = values.to(dtype) * keep
        count = keep.expand(*kept.shape[:-1], 1)
        if context.is_causal:  # query i sees keys up to i + Lk - Lq: running sums read there
            last = torch.arange(num_queries, device=values.device) + (num_keys - num_queries)
            seen = last >= 0
            total, count = (t.cumsum(-2)[..., last.clamp_min(0), :] * seen[:, None] for t in (kept, count))
        else:
            total, count = kept.sum(-2, keepdim=True), count.sum(-2, keepdim=True)
        output = total / count.clamp_min(1.0)  # a row with no key to see stays zero
        return AttentionOutput(output.expand(*output.shape[:-2], num_queries, values.shape[-1]).to(values.dtype), None)
