"""The fused softmax-attention call that several variants share (``dot_product``,
``gaussian_kernel`` on augmented features): PyTorch's
:func:`~torch.nn.functional.scaled_dot_product_attention` under the zoo's masking rules."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor

from zoo.attention.base import PositionBias, position_bias_grid
from zoo.attention.masking import with_causal

__all__ = ["fused_attention"]


def fused_attention(
    queries: Tensor, keys: Tensor, values: Tensor, mask: Tensor | None,
    *, is_causal: bool, position_bias: PositionBias | None, dropout_p: float, scale: float, enable_gqa: bool = False,
) -> Tensor:  # fmt: skip
    """``softmax(q k^T * scale + bias) v`` under the zoo's masking rules, in the fused kernel.

    Causality reaches :func:`torch.nn.functional.scaled_dot_product_attention` as
    ``is_causal=True`` with no mask whenever that is exact (no padding or user mask, no positional
    bias, ``Lq == Lk``: the kernel aligns top-left, the zoo bottom-right, and the two agree
    there); a single query over cached keys sees them all and needs none; in every other case
    causality is merged into the boolean mask. A positional bias then becomes the float mask: the
    bias, ``-inf`` where that hides a key. ``mask`` is :meth:`Attention.attend`'s; it gets leading
    unit axes up to the inputs' rank, since on CPU the fused kernel refuses a ``(heads, Lq, Lk)``
    mask and the math fallback would hold the scores.
    """
    num_queries, num_keys = queries.shape[-2], keys.shape[-2]
    fused_causal = is_causal and mask is None and position_bias is None and num_queries == num_keys
    if is_causal and not fused_causal and num_queries > 1:
        mask = with_causal(mask, num_queries, num_keys, queries.device)
    if position_bias is not None:
        bias = position_bias_grid(position_bias, num_queries, num_keys, queries.device).to(queries.dtype)
        mask = bias if mask is None else bias.masked_fill(~mask, float("-inf"))
    if mask is not None and mask.dim() < queries.dim():  # the fused kernels take a mask of the inputs' rank
        mask = mask[(None,) * (queries.dim() - mask.dim())]
    return F.scaled_dot_product_attention(
        queries,
        keys,
        values,
        attn_mask=mask,
        dropout_p=dropout_p,
        is_causal=fused_causal,
        scale=scale,
        enable_gqa=enable_gqa,
    )
