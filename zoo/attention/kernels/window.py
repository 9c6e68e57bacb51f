"""Softmax attention over a sliding window with the first positions kept, and learned sink logits,
on the fused kernel.

Two pieces of the ``softmax`` layer (:mod:`zoo.attention.variants.softmax`) that are tensor work
alone:

* a **sink** (gpt-oss): a learned logit ``s_h`` per head in the softmax's denominator only,
  ``a_ij = exp(z_ij) / (exp(s_h) + sum_l exp(z_il))``. The fused kernel has no such term, so the
  sink becomes one more key whose value is zero and which every query scores at ``s_h``: queries
  get a constant feature 1, real keys a 0 there and the sink key ``s_h`` (:func:`with_sink_key`,
  :func:`sink_attention`);
* a **window** ``W`` with ``S`` first positions (StreamingLLM): query ``i`` sees key ``j`` when
  ``|i - j| < W`` (causal: ``0 <= i - j < W``) or ``j < S``. :func:`window_blocks` runs it in
  ``O(L (W + S))``: each block of queries over the keys its window reaches and the first ``S``
  positions, laid out for :func:`~zoo.attention.kernels.blocks.block_attention`, the mask and a
  bias read at the scored pairs only.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from zoo.attention.contract.masking import mask_at, masked_softmax, with_causal
from zoo.attention.kernels.blocks import block_attention, rows_from
from zoo.attention.kernels.explicit_softmax import grouped_softmax, prefers_grouped_softmax, sink_weights
from zoo.attention.kernels.sdpa import masked_sdpa, repeat_kv_heads

__all__ = [
    "sink_attention",
    "softmax_heads",
    "visible_keys",
    "window_blocks",
    "with_sink_key",
]

#: a bias scheme read at (query position, key position) pairs: ``(heads, *pairs)``
PairBias = Callable[[Tensor, Tensor], Tensor]


def with_sink_key(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, sinks: Tensor
) -> tuple[Tensor, Tensor, Tensor, Tensor | None]:
    """Scaled queries ``(B, H, ..., Lq, d)``, keys, values and mask with one more key first, per
    head: queries get a constant feature 1, real keys a 0 there and the sink key its head's logit
    ``sinks`` ``(H,)`` (0 elsewhere), so every query scores it at the logit; its value is zero,
    and it is visible to all. Values get zero features up to the queries' width: the fused kernel
    wants one width."""
    heads = q.shape[1]
    q = torch.cat([q, q.new_ones(*q.shape[:-1], 1)], -1)
    sink_key = torch.cat([k.new_zeros(heads, k.shape[-1]), sinks.to(k.dtype)[:, None]], -1)
    sink_key = sink_key.view(1, heads, *(1,) * (k.dim() - 3), -1).expand(*k.shape[:-2], 1, -1)
    k = torch.cat([sink_key, torch.cat([k, k.new_zeros(*k.shape[:-1], 1)], -1)], -2)
    v = F.pad(v, (0, q.shape[-1] - v.shape[-1], 1, 0))  # a zero first row, zero features up to q's width
    if mask is not None:
        first = mask.new_ones(()) if mask.dtype == torch.bool else mask.new_zeros(())
        mask = torch.cat([first.expand(*mask.shape[:-1], 1), mask], -1)
    return q, k, v, mask


def sink_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None,
    sinks: Tensor,
    *,
    scale: float,
    dropout_p: float = 0.0,
    is_causal: bool = False,
) -> Tensor:
    """Softmax attention of ``q`` over ``k``, ``v`` ``(B, H, L, d)`` with a sink logit per head in
    the denominator, on the fused kernel. ``mask`` (boolean or float, broadcastable to
    ``(B, H, Lq, Lk)``) or ``is_causal`` (with no mask: one more query first, which sees the sink
    alone, so that the kernel's causal flag lines up)."""
    width = v.shape[-1]
    q, k, v, mask = with_sink_key(q * scale, k, v, None if is_causal else mask, sinks)
    if is_causal:
        q = torch.cat([q.new_zeros(*q.shape[:-2], 1, q.shape[-1]), q], -2)
        output = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=True, scale=1.0)
        return output[..., 1:, :width]
    if mask is not None and mask.dim() < q.dim():
        mask = mask[(None,) * (q.dim() - mask.dim())]
    return masked_sdpa(q, k, v, mask, dropout_p=dropout_p, scale=1.0)[..., :width]


def visible_keys(
    mask: Tensor | None,
    query_positions: Tensor,
    key_positions: Tensor,
    *,
    is_causal: bool,
    window: int | None,
    sink_tokens: int = 0,
) -> Tensor | None:
    """Which keys each query sees, broadcastable to ``(B, H, Lq, Lk)``: ``mask`` (boolean, over the
    keys given or over every position up to the last key, then read at ``key_positions``), with
    causality and a sliding ``window`` whose first ``sink_tokens`` positions stay visible; None
    when that is every key."""
    if mask is not None and mask.shape[-1] not in (1, len(key_positions)):  # over every position seen
        mask = mask.index_select(-1, key_positions)
    offsets = query_positions[:, None] - key_positions  # query position - key position
    rule = offsets >= 0 if is_causal else None
    if window is not None:
        near = (offsets.abs() < window) | (key_positions < sink_tokens)
        rule = near if rule is None else rule & near
    if rule is None or bool(rule.all()):
        return mask
    return rule if mask is None else mask & rule


def window_blocks(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    window: int,
    sink_tokens: int,
    is_causal: bool,
    first: int = 0,
    mask: Tensor | None = None,
    scale: float,
    dropout_p: float = 0.0,
    bias: PairBias | None = None,
    sinks: Tensor | None = None,
) -> Tensor | None:
    """The window in ``O(L (W + S))``, or None when it spans most of the sequence (one dense call
    is then cheaper).

    Args:
        q, k, v: ``(B, H, Lq, d)`` queries at positions ``first ..``, keys and values ``(B, H, Lk,
            d)`` at ``0 .. Lk - 1``.
        window, sink_tokens: ``W`` and ``S`` (see the module docstring).
        is_causal: Whether a query sees only keys at or before it.
        mask: Boolean, broadcastable to ``(B, H, Lq, Lk)``; read at the scored pairs only.
        scale, dropout_p: The fused kernel's.
        bias: A bias scheme, read at the scored pairs only.
        sinks: Sink logits ``(H,)``, or None.

    Returns:
        ``(B, H, Lq, d)``, or None.
    """
    num_queries, num_keys, device = q.shape[-2], k.shape[-2], q.device
    before, after = window - 1, (0 if is_causal else window - 1)
    block = min(max(1, (before + after + 1) // 2), num_queries)
    num_blocks, span, heads = math.ceil(num_queries / block), block + before + after, min(sink_tokens, num_keys)
    if num_blocks * block * (span + heads + 1) >= num_queries * num_keys:
        return None
    starts = torch.arange(num_blocks, device=device)[:, None] * block
    query_index = starts + torch.arange(block, device=device)  # (nb, block)
    window_keys = first - before + starts + torch.arange(span, device=device)  # (nb, span) positions
    key_positions = torch.cat([torch.arange(heads, device=device).expand(num_blocks, heads), window_keys], -1)
    offsets = (first + query_index)[..., None] - key_positions[:, None, :]  # (nb, block, S + span)
    in_window = (offsets <= before) & (offsets >= -after) & (key_positions[:, None, :] >= 0)
    in_window &= key_positions[:, None, :] < num_keys
    first_ones = ~in_window & (offsets >= 0 if is_causal else True)  # never one key twice
    keep = torch.cat([first_ones[..., :heads], in_window[..., heads:]], -1) & (query_index < num_queries)[..., None]
    if mask is not None:
        query_at, key_at = query_index.clamp(max=num_queries - 1)[..., None], key_positions.clamp(0, num_keys - 1)
        keep = keep & mask_at(mask, query_at, key_at[:, None, :])
    blocks_q = rows_from(q, 0, num_blocks * block).unflatten(-2, (num_blocks, block))
    blocks_k, blocks_v = (
        torch.cat(
            [
                t[..., None, :heads, :].expand(*t.shape[:-2], num_blocks, heads, t.shape[-1]),
                rows_from(t, first - before, (num_blocks - 1) * block + span).unfold(-2, span, block).transpose(-2, -1),
            ],
            -2,
        )
        for t in (k, v)
    )
    scored: Tensor = keep
    if bias is not None:  # (heads, nb, block, S + span), at the scored pairs only
        pair_bias = bias((first + query_index)[..., None], key_positions[:, None, :]).to(q.dtype)
        scored = pair_bias.masked_fill(~keep, float("-inf"))
    width = v.shape[-1]
    if sinks is not None:
        blocks_q, blocks_k, blocks_v, scored = with_sink_key(blocks_q * scale, blocks_k, blocks_v, scored, sinks)
        scale = 1.0
    output = block_attention(blocks_q, blocks_k, blocks_v, scored, dropout_p=dropout_p, scale=scale)
    return output.flatten(-3, -2)[..., :num_queries, :width]


def softmax_heads(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None,
    *,
    scale: float,
    logits: Tensor | None = None,
    sinks: Tensor | None = None,
    dropout_p: float = 0.0,
    need_weights: bool = False,
    is_causal: bool = False,
) -> tuple[Tensor, Tensor | None]:
    """Softmax attention of heads ``q`` ``(B, H, Lq, d)`` over ``k``, ``v`` (``H`` heads, or
    ``H_kv`` grouped ones: head ``h`` reads ``h // (H / H_kv)``) where the boolean ``mask``
    (broadcastable to ``(B, H, Lq, Lk)``; None: every key) and, with ``is_causal``, causality
    (bottom-right aligned) let a query see a key, with ``logits`` added to the scores and learned
    ``sinks`` ``(H,)`` in the denominator: the explicit form and its weights when ``need_weights``,
    :func:`~zoo.attention.kernels.explicit_softmax.grouped_softmax` where
    :func:`~zoo.attention.kernels.explicit_softmax.prefers_grouped_softmax` (a few queries over
    grouped heads or with sinks), else the fused kernel (a sink as one more key). Causality alone
    reaches the fused kernel as its flag, which forms it and skips the hidden blocks; no
    ``(Lq, Lk)`` mask is built for it. Dropout of ``dropout_p`` on the weights."""
    num_queries, num_keys = q.shape[-2], k.shape[-2]
    grouped = not need_weights and prefers_grouped_softmax(q, k, sinks)
    kernel_causal = is_causal and mask is None and logits is None and num_queries == num_keys
    if is_causal and (need_weights or grouped or not kernel_causal):
        mask, is_causal = with_causal(mask, num_queries, num_keys, q.device), False
    if grouped:
        return grouped_softmax(q, k, v, mask, scale=scale, logits=logits, sinks=sinks, dropout_p=dropout_p), None
    if need_weights or sinks is not None:  # one key/value head a query head (no copy for the kernel alone)
        k, v = repeat_kv_heads(q, k, v)
    if need_weights:
        scores = torch.matmul(q, k.transpose(-2, -1)) * scale
        scores = scores if logits is None else scores + logits.to(scores.dtype)
        weights = masked_softmax(scores, mask=mask) if sinks is None else sink_weights(scores, mask, sinks)
        return torch.matmul(F.dropout(weights, dropout_p), v), weights
    if logits is not None:  # a float mask: the logits, -inf where a key is hidden
        logits = logits.to(q.dtype).expand(*logits.shape[:-2], q.shape[-2], k.shape[-2])
        mask = logits if mask is None else logits.masked_fill(~mask, float("-inf"))
    if sinks is not None:
        return sink_attention(q, k, v, mask, sinks, scale=scale, dropout_p=dropout_p, is_causal=is_causal), None
    options = {"dropout_p": dropout_p, "scale": scale, "enable_gqa": k.shape[-3] != q.shape[-3]}
    if is_causal:  # causality alone: the kernel forms it (and skips what it hides)
        return masked_sdpa(q, k, v, None, is_causal=True, **options), None
    if mask is not None and mask.dim() < q.dim():
        mask = mask[(None,) * (q.dim() - mask.dim())]
    return masked_sdpa(q, k, v, mask, **options), None
