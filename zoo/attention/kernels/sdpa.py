"""The fused softmax-attention call that several variants share (``dot_product``,
``gaussian_kernel`` on augmented features): PyTorch's
:func:`~torch.nn.functional.scaled_dot_product_attention` under the zoo's masking rules."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from zoo.attention.contract.masking import with_causal
from zoo.attention.kernels.explicit_softmax import grouped_softmax, prefers_grouped_softmax

__all__ = ["ZERO_ROW_DEVICES", "fused_attention", "masked_sdpa", "repeat_kv_heads"]

ZERO_ROW_DEVICES = frozenset({"cpu"})
"""Devices whose every fused kernel answers a query with no visible key with a zero row and
finite gradients, so :func:`masked_sdpa` needs no guard there: the CPU's flash and math kernels,
in float32, float64 and bfloat16, under boolean and float masks
(``tests/attention/kernels/test_sdpa.py`` checks it on every run)."""


def fused_attention(
    queries: Tensor, keys: Tensor, values: Tensor, mask: Tensor | None,
    *, is_causal: bool, bias: Tensor | None, dropout_p: float, scale: float, enable_gqa: bool = False,
) -> Tensor:  # fmt: skip
    """``softmax(q k^T * scale + bias) v`` under the zoo's masking rules, in the fused kernel.

    Causality reaches :func:`torch.nn.functional.scaled_dot_product_attention` as
    ``is_causal=True`` with no mask whenever that is exact (no padding or user mask, no positional
    bias, ``Lq == Lk``: the kernel aligns top-left, the zoo bottom-right, and the two agree
    there); a single query over cached keys sees them all and needs none; in every other case
    causality is merged into the boolean mask. A positional ``bias`` (its grid, ``(heads, Lq, Lk)``)
    then becomes the float mask: the bias, ``-inf`` where that hides a key. ``mask`` is :meth:`Attention.attend`'s; it gets leading
    unit axes up to the inputs' rank, since on CPU the fused kernel refuses a ``(heads, Lq, Lk)``
    mask and the math fallback would hold the scores.

    A query with no visible key gets a zero output, as in the explicit path (:func:`masked_sdpa`).
    A few queries over grouped heads (a decoded token) run written out instead, where that reads
    the cache once (:func:`~zoo.attention.kernels.explicit_softmax.prefers_grouped_softmax`).
    """
    num_queries, num_keys = queries.shape[-2], keys.shape[-2]
    written_out = enable_gqa and prefers_grouped_softmax(queries, keys)
    fused_causal = is_causal and mask is None and bias is None and num_queries == num_keys and not written_out
    if is_causal and not fused_causal and num_queries > 1:
        mask = with_causal(mask, num_queries, num_keys, queries.device)
    if written_out:
        return grouped_softmax(queries, keys, values, mask, scale=scale, logits=bias, dropout_p=dropout_p)
    if bias is not None:
        bias = bias.to(queries.dtype)
        mask = bias if mask is None else bias.masked_fill(~mask, float("-inf"))
    if mask is not None and mask.dim() < queries.dim():  # the fused kernels take a mask of the inputs' rank
        mask = mask[(None,) * (queries.dim() - mask.dim())]
    return masked_sdpa(
        queries, keys, values, mask, dropout_p=dropout_p, is_causal=fused_causal, scale=scale, enable_gqa=enable_gqa
    )


def masked_sdpa(queries: Tensor, keys: Tensor, values: Tensor, mask: Tensor | None, **options: Any) -> Tensor:
    """:func:`torch.nn.functional.scaled_dot_product_attention` (``options`` are its keywords)
    with a zero output for every query that ``mask`` lets see no key.

    The zoo answers a query with no visible key with a zero output (zero weights). PyTorch's
    math, flash and memory-efficient kernels give zeros there too, but cuDNN's, picked on an H200
    in float16 and bfloat16, gave non-zero rows, and NaN in the block kernels' causal case; off
    the CPU a fully masked row never reaches a kernel so (Hugging Face's SDPA masks "unmask
    unattended" rows for the same reason): such a row is shown every key, and its output zeroed
    after. On the devices of :data:`ZERO_ROW_DEVICES` the mask goes in as it is: the guard's two
    passes over a ``(B, 1, L, L)`` mask cost 3-4% of a padded causal layer at 2k tokens there.
    ``mask``: boolean (True = attend) or float (``-inf`` hides).
    """
    width = values.shape[-1]
    if width != keys.shape[-1]:  # one width for the flash kernels (else the math kernel holds every score)
        if options.get("scale") is None:  # the unpadded width's
            options["scale"] = queries.shape[-1] ** -0.5
        queries, keys, values = _one_width(queries, keys, values)
    if mask is None or queries.device.type in ZERO_ROW_DEVICES:
        return F.scaled_dot_product_attention(queries, keys, values, attn_mask=mask, **options)[..., :width]
    if mask.dtype == torch.bool:
        seen = mask.any(-1, keepdim=True)  # (..., Lq, 1)
        mask = mask | ~seen
    else:
        seen = mask.isfinite().any(-1, keepdim=True)
        mask = mask.masked_fill(~seen, 0.0)
    output = F.scaled_dot_product_attention(queries, keys, values, attn_mask=mask, **options)
    return output[..., :width].masked_fill(~seen, 0.0)


def _one_width(queries: Tensor, keys: Tensor, values: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Queries, keys and values zero-padded to one feature width, the widest: PyTorch's flash
    kernels take one, and fall back to the math kernel, which holds every ``(Lq, Lk)`` score,
    where values are narrower or wider than keys (MLA's, a ``v_head_dim``: 17 GiB at 16k tokens
    and 16 heads). Zero features change no score (the scale is the unpadded width's)
    and no output feature before the values' width, where the caller cuts it back."""
    width = max(keys.shape[-1], values.shape[-1])
    return tuple(F.pad(x, (0, width - x.shape[-1])) if x.shape[-1] < width else x for x in (queries, keys, values))


def repeat_kv_heads(queries: Tensor, keys: Tensor, values: Tensor) -> tuple[Tensor, Tensor]:
    """Keys and values with as many heads (axis -3) as the queries: each of ``H_kv`` grouped
    heads repeated ``H / H_kv`` times, in order (head ``h`` reads group ``h // (H / H_kv)``, as
    SDPA's ``enable_gqa`` does). As they are where the counts match, where there is no head axis,
    or where ``H_kv`` does not divide ``H`` (the caller's checks name that)."""
    heads = queries.shape[-3] if queries.dim() > 3 else 1
    kv_heads = keys.shape[-3] if keys.dim() > 3 else 1
    if kv_heads == heads or not kv_heads or heads % kv_heads:
        return keys, values
    groups = heads // kv_heads
    return keys.repeat_interleave(groups, dim=-3), values.repeat_interleave(groups, dim=-3)
