"""Softmax written out for the cases the fused kernel serves badly: a few queries over grouped
key/value heads (decoding), and a learned sink logit in the denominator.

The fused kernel (:func:`torch.nn.functional.scaled_dot_product_attention`) reads a grouped
key/value head once per query head it serves (``enable_gqa``) or needs the heads repeated, and has
no sink term, so a sink becomes one more key appended to the keys
(:func:`zoo.attention.kernels.window.sink_attention`). For one decoded token those are copies or
re-reads of the whole cache; here each group's query heads are rows of one product with its keys,
and the sink a column of the softmax's denominator.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from zoo.attention.contract.masking import masked_softmax

__all__ = ["DECODING_QUERIES", "GROUPED_QUERY_HEADS", "grouped_softmax", "prefers_grouped_softmax", "sink_weights"]

#: At most this many queries (a decoded token, a few drafted ones) suit :func:`grouped_softmax`, which
#: copies no cached key or value; more suit the fused kernel. One decoded token after 16k cached tokens
#: of gpt-oss's full layer took 77 ms through the fused kernel's copies, where transformers' eager
#: layer took 5.6 (docs/results/speed.md).
DECODING_QUERIES = 8

#: From this many query heads a key/value head, :func:`grouped_softmax` reads a long cache faster than
#: the fused kernel with ``enable_gqa``. One token, heads of 128, one thread (ms, written out / fused):
#: 4 heads a group over 16k keys 2.5 / 6.5, 16 heads of 192 a group 5.7 / 42; 2 heads a group over 4k
#: keys 5.2 / 2.3 and over 1k (Gemma 3's sliding layer) 0.16 / 0.12; 3 a group level.
GROUPED_QUERY_HEADS = 4


def prefers_grouped_softmax(q: Tensor, k: Tensor, sinks: Tensor | None = None) -> bool:
    """Whether queries ``q`` ``(B, H, Lq, d)`` over keys ``k`` ``(B, H_kv, Lk, d)`` run faster in
    :func:`grouped_softmax` than in the fused kernel: at most :data:`DECODING_QUERIES` queries, and
    a sink (which the fused kernel takes as one more key, a copy of the keys) or at least
    :data:`GROUPED_QUERY_HEADS` query heads a key/value head (the fused kernel reads a key/value
    head once for each of them)."""
    if q.dim() != 4 or k.dim() != 4 or q.shape[-2] > DECODING_QUERIES:
        return False
    return sinks is not None or q.shape[1] >= GROUPED_QUERY_HEADS * k.shape[1]


def sink_weights(scores: Tensor, mask: Tensor | None, sinks: Tensor) -> Tensor:
    """The explicit form's weights ``(B, H, Lq, Lk)`` from ``scores`` with a sink logit per head
    ``sinks`` ``(H,)`` in each row's denominator (the sink as a first column, always visible,
    dropped after): rows sum to less than one. ``mask``: boolean, True = attend."""
    return _softmax_beside_sink(scores, mask, sinks.to(scores.dtype)[:, None, None].expand(*scores.shape[:-1], 1))


def _softmax_beside_sink(scores: Tensor, mask: Tensor | None, sink: Tensor) -> Tensor:
    """Softmax over ``scores`` ``(..., Lq, Lk)`` with the logit column ``sink`` ``(..., Lq, 1)`` in
    each row's denominator (always visible, dropped after)."""
    with_sink = mask if mask is None else torch.cat([mask.new_ones(()).expand(*mask.shape[:-1], 1), mask], -1)
    return masked_softmax(torch.cat([sink, scores], -1), mask=with_sink)[..., 1:]


def grouped_softmax(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None,
    *,
    scale: float,
    logits: Tensor | None = None,
    sinks: Tensor | None = None,
    dropout_p: float = 0.0,
) -> Tensor:
    """The explicit form for a few queries ``q`` ``(B, H, Lq, d)`` over grouped key/value heads
    ``k``, ``v`` ``(B, H_kv, Lk, d)`` (head ``h`` reads group ``h // (H / H_kv)``), with no copy of
    the keys or values: each group's heads' queries become rows of one product with its keys.
    Decoding's form: a token's scores are one row a head, where repeating a long cache's heads, or
    appending a sink key to it (:func:`sink_attention`), would copy the whole cache every token.
    ``mask``, ``logits`` broadcastable to ``(B, H, Lq, Lk)``, ``sinks`` ``(H,)`` as
    :func:`softmax_heads` takes them."""
    batch, heads, num_queries, _ = q.shape
    kv_heads, num_keys = k.shape[1], k.shape[-2]

    def grouped(x: Tensor) -> Tensor:  # (B, H, Lq, X) -> (B, H_kv, H / H_kv * Lq, X)
        return x.expand(batch, heads, num_queries, x.shape[-1]).reshape(batch, kv_heads, -1, x.shape[-1])

    scores = torch.matmul(grouped(q), k.transpose(-2, -1)) * scale
    if logits is not None:
        scores = scores + grouped(logits.to(scores.dtype).expand(*logits.shape[:-1], num_keys))
    mask = None if mask is None else grouped(mask.expand(*mask.shape[:-1], num_keys))
    if sinks is None:
        weights = masked_softmax(scores, mask=mask)
    else:
        weights = _softmax_beside_sink(scores, mask, grouped(sinks.to(scores.dtype)[:, None, None]))
    if dropout_p:  # skipped, not called at zero: a decoded token's step is a few microseconds a call
        weights = F.dropout(weights, dropout_p)
    output = torch.matmul(weights if weights.dtype == v.dtype else weights.to(v.dtype), v)
    return output.reshape(batch, heads, num_queries, v.shape[-1])
