"""Multi-head latent attention's two forms (DeepSeek-V2, 2024): attention over keys and values that
every head reconstructs from one shared latent per position.

Per position ``j`` a latent ``c_j`` (``r`` features) and one rotary key ``kr_j`` (``dr``, shared by
the heads) are all that is kept; head ``h`` reads keys and values up-projected from the latent::

    k_jh = [c_j U_kh^T, kr_j],        v_jh = c_j U_vh^T,        U_kh: (dn, r), U_vh: (dv, r)
    o_ih = sum_j softmax_j(s * (qn_ih . (c_j U_kh^T) + qr_ih . kr_j)) v_jh

with queries in two parts, ``qn`` (``dn``) against the latent's keys and ``qr`` (``dr``) against the
rotary key. Two forms compute it, equal up to rounding:

* :func:`latent_attention_naive`: up-project every key and value (``(B, H, Lk, dn + dr)`` and
  ``(B, H, Lk, dv)``) and run multi-head attention; the cheaper form when the queries are as many
  as the keys (training, a prompt);
* :func:`latent_attention_absorbed`: fold the up-projections into the queries and the output,
  ``qn . (c U_k^T) = (qn U_k) . c`` and ``sum_j p_j (c_j U_v^T) = (sum_j p_j c_j) U_v^T``: one key
  head ``[c_j, kr_j]`` and one value head ``c_j`` shared by every query head (multi-query attention
  over ``r + dr`` features), so a decoding step reads the cached latents as they are instead of
  up-projecting all of them (DeepSeek-V3's ``inference/model.py``, its ``absorb`` path).

Both run in PyTorch's fused :func:`~torch.nn.functional.scaled_dot_product_attention` (the values
zero-padded to the keys' width by :func:`~zoo.attention.kernels.sdpa.masked_sdpa`, as its flash
kernels need) under the zoo's masking rules
(:func:`~zoo.attention.kernels.sdpa.fused_attention`: bottom-right causality, a zero output for a
query that sees no key); :func:`latent_attention_weights` gives the
``(B, H, Lq, Lk)`` weights, the same for both.

Shapes: ``qn`` ``(B, H, Lq, dn)``, ``qr`` ``(B, H, Lq, dr)``, ``latent`` ``(B, Lk, r)``,
``rope_key`` ``(B, Lk, dr)``, ``key_up`` ``(H, dn, r)``, ``value_up`` ``(H, dv, r)``; ``mask``
boolean (True = attend) broadcastable to ``(B, H, Lq, Lk)``, never causality (``is_causal``).
"""

from __future__ import annotations

import torch
from torch import Tensor

from zoo.attention.contract.masking import masked_softmax, with_causal
from zoo.attention.kernels.sdpa import fused_attention

__all__ = ["latent_attention_absorbed", "latent_attention_naive", "latent_attention_weights"]


def latent_attention_naive(
    qn: Tensor, qr: Tensor, latent: Tensor, rope_key: Tensor, key_up: Tensor, value_up: Tensor,
    mask: Tensor | None, *, is_causal: bool, scale: float,
) -> Tensor:  # fmt: skip
    """Every head's keys and values up-projected from the latent, then multi-head attention:
    the output ``(B, H, Lq, dv)``."""
    heads = qn.shape[1]
    keys = torch.cat(
        [torch.einsum("blr,hdr->bhld", latent, key_up), rope_key.unsqueeze(1).expand(-1, heads, -1, -1)], dim=-1
    )
    values = torch.einsum("blr,hdr->bhld", latent, value_up)
    return fused_attention(
        torch.cat([qn, qr], dim=-1), keys, values, mask, is_causal=is_causal, bias=None, dropout_p=0.0, scale=scale
    )


def latent_attention_absorbed(
    qn: Tensor, qr: Tensor, latent: Tensor, rope_key: Tensor, key_up: Tensor, value_up: Tensor,
    mask: Tensor | None, *, is_causal: bool, scale: float,
) -> Tensor:  # fmt: skip
    """The up-projections folded into the queries and the output: one shared key and value head
    over the latents as they are; the output ``(B, H, Lq, dv)``.

    For one query (a decoding step) the query heads are folded into the query axis (``(B, 1, H,
    r + dr)``): one head of ``H`` queries, which PyTorch's fused CPU kernel runs several times faster
    than ``H`` heads over a shared key head (measured here: 5.6 against 165 ms for a decoded token
    over 1024 latents of 576 features and 16 heads), the mask laid out the same way. Several
    queries (a prompt, when ``mode: absorbed`` forces this form there) stay ``H`` heads over the
    shared key head, repeated as a view, so causality stays in the kernel: folded, it would be a
    ``(H * Lq, Lk)`` mask (2 GiB at 16k tokens and 8 heads)."""
    batch, heads, num_queries, _ = qn.shape
    num_keys = latent.shape[-2]
    queries = torch.cat([torch.einsum("bhld,hdr->bhlr", qn, key_up), qr], dim=-1)  # (B, H, Lq, r + dr)
    keys = torch.cat([latent, rope_key], dim=-1).unsqueeze(1)  # (B, 1, Lk, r + dr)
    if num_queries > 1:  # the shared head repeated as a view: PyTorch's CPU kernels take no grouped heads
        shared = (batch, heads, num_keys, -1)
        mixed = fused_attention(
            queries, keys.expand(shared), latent.unsqueeze(1).expand(shared), mask, is_causal=is_causal, bias=None,
            dropout_p=0.0, scale=scale,
        )  # fmt: skip
    else:  # one query: the heads folded into the query axis, the mask with them
        if mask is not None:
            mask = mask.reshape((1,) * (4 - mask.dim()) + tuple(mask.shape))
            mask = mask.expand(-1, heads, 1, num_keys).reshape(mask.shape[0], 1, heads, num_keys)
        mixed = fused_attention(
            queries.reshape(batch, 1, heads, -1), keys, latent.unsqueeze(1), mask, is_causal=False, bias=None,
            dropout_p=0.0, scale=scale,
        ).view(batch, heads, 1, -1)  # fmt: skip
    return torch.einsum("bhlr,hdr->bhld", mixed, value_up)


def latent_attention_weights(
    qn: Tensor, qr: Tensor, latent: Tensor, rope_key: Tensor, key_up: Tensor, mask: Tensor | None,
    *, is_causal: bool, scale: float,
) -> Tensor:  # fmt: skip
    """The ``(B, H, Lq, Lk)`` attention weights, formed from the absorbed queries (the naive form's
    are the same); zero where hidden, all zero for a query that sees no key."""
    scores = torch.einsum("bhlr,bmr->bhlm", torch.einsum("bhld,hdr->bhlr", qn, key_up), latent)
    scores = (scores + torch.einsum("bhld,bmd->bhlm", qr, rope_key)) * scale
    if is_causal:
        mask = with_causal(mask, qn.shape[-2], latent.shape[-2], qn.device)
    return masked_softmax(scores, mask=mask)
