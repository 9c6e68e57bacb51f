"""Calling an attention layer the way a model does: with the context built once from raw masks."""

from __future__ import annotations

from typing import Any

from torch import Tensor, nn

from zoo.attention import MultiHeadAttention
from zoo.attention.contract.base import AttentionOutput
from zoo.attention.contract.context import AttentionContext

__all__ = ["run_layer"]


def run_layer(layer: nn.Module, *inputs: Tensor, valid_lens: Tensor | None = None, **masks: Any) -> AttentionOutput:
    """``layer`` over ``inputs`` (``x``, ``(x, memory)`` or, for ``multi_head``, queries, keys and
    values) under raw masks (``valid_lens``, ``attn_mask``, ``is_causal``, ``need_weights``): a
    ``multi_head`` layer takes them as torch's does; any other gets the context a model would
    build from them (validated and merged once)."""
    if isinstance(layer, MultiHeadAttention):
        return layer(*inputs, valid_lens, **masks)
    context = AttentionContext.build(
        inputs[0].shape[0], inputs[0].shape[1], inputs[-1].shape[1], valid_lens=valid_lens,
        num_heads=getattr(layer, "num_heads", None), **masks,
    )  # fmt: skip
    return layer(*inputs, context)
