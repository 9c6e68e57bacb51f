"""DeepSeek-V3.2's lightning indexer (DeepSeek-AI, 2025, "DeepSeek-V3.2: Pushing the Frontier of
Open Large Language Models", arXiv:2512.02556; first released as DeepSeek-V3.2-Exp): a small
scorer that picks, for each query, the keys a sparse attention reads.

For a query token ``t`` and an earlier token ``s`` (the paper's equation 1)::

    I_t,s = sum_j w_t,j * ReLU(q_t,j . k_s)          j = 1 .. H_I index heads

with the index queries ``q_t,j`` read from the attention's query latent (``c^Q_t W^IQ``), one key
per token shared by the index heads (``k_s = LayerNorm(x_s W^IK)``), and per-head weights from the
token itself (``w_t = x_t W^w / sqrt(H_I)``). The first ``qk_rope_head_dim`` features of ``q`` and
``k`` are rotated (RoPE on pairs of halves, as both references do for the indexer), the rest are
not. The attention then keeps, per query, the ``k`` keys of highest ``I_t,:`` among those it may
see (:func:`top_k_selection`). The dot products are scaled by ``1 / sqrt(d_I)`` before the ReLU,
as DeepSeek-V3.2-Exp's ``inference/model.py`` and transformers' ``DeepseekV32Indexer`` do (a
positive factor: the ranking is the paper's).

Training (the paper's section 2.1): the indexer's distribution ``softmax_s(I_t,s)`` is fitted to
the main attention's, summed over its heads and L1-normalized, ``p_t,s``, by

    L^I = sum_t KL(p_t,S_t || softmax(I_t,S_t))

over the selected keys ``S_t`` (all of them in the dense warm-up), with the indexer's input
detached from the main model (:func:`indexer_kl`: the mean over queries, not the sum).

Where the zoo departs from the references: it computes the scores in the inputs' precision
(float32 at least) instead of FP8, and leaves out the Hadamard transform (``rotate_activation``)
that DeepSeek-V3.2-Exp applies to ``q`` and ``k`` before quantizing them: the transform is
orthogonal, so the dot products, and the selection, are the same without it. Ties in ``I`` go to
the earlier key (``topk`` alone leaves them to the kernel: the zoo takes the ``k``-th highest score
from it and fills the places left among the keys tied with it from the start), so that one pass and
token-by-token decoding pick the same keys. The scores are a dense ``(B, H_I, Lq, Lk)`` product in
PyTorch, where DeepSeek's ``fp8_index`` kernel never holds them.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from zoo.attention.contract.context import AttentionContext
from zoo.attention.modules.rotation import rotate_heads
from zoo.positions import PositionScheme

__all__ = ["LightningIndexer", "indexer_kl", "indexer_kl_mean", "indexer_kl_terms", "top_k_selection"]


class LightningIndexer(nn.Module):
    """The lightning indexer's parameters and scores (see the module docstring).

    Args:
        embed_dim: The block's width (the keys' and head weights' input).
        query_dim: The width of what the index queries are read from (the query latent, or ``x``).
        num_heads: Index heads ``H_I``.
        head_dim: Each index head's width ``d_I``.
        rope_dim: Leading features of ``q`` and ``k`` a rotary scheme rotates.

    Parameters: ``q_proj`` (``query_dim -> H_I d_I``), ``k_proj`` (``embed_dim -> d_I``) and its
    ``k_norm`` (a LayerNorm, eps 1e-6), ``weights_proj`` (``embed_dim -> H_I``). No biases.
    """

    def __init__(self, embed_dim: int, query_dim: int, num_heads: int, head_dim: int, rope_dim: int) -> None:
        super().__init__()
        self.num_heads, self.head_dim, self.rope_dim = num_heads, head_dim, rope_dim
        self.q_proj = nn.Linear(query_dim, num_heads * head_dim, bias=False)
        self.k_proj = nn.Linear(embed_dim, head_dim, bias=False)
        self.k_norm = nn.LayerNorm(head_dim, eps=1e-6)
        self.weights_proj = nn.Linear(embed_dim, num_heads, bias=False)

    def _rotate(self, x: Tensor, rotary: PositionScheme | None, first: int, context: AttentionContext) -> Tensor:
        """``x`` ``(..., L, d_I)`` with its first ``rope_dim`` features rotated at ``first ..``."""
        if rotary is None:
            return x
        rope, rest = x.split([self.rope_dim, self.head_dim - self.rope_dim], dim=-1)
        return torch.cat([rotate_heads(rotary, rope, first, context), rest], dim=-1)

    def keys(self, x: Tensor, rotary: PositionScheme | None, first: int, context: AttentionContext) -> Tensor:
        """The index keys ``(B, L, d_I)`` of tokens ``x`` at positions ``first ..``."""
        keys = self.k_norm(self.k_proj(x)).unsqueeze(1)
        return self._rotate(keys, rotary, first, context).squeeze(1)

    def queries(self, source: Tensor, rotary: PositionScheme | None, first: int, context: AttentionContext) -> Tensor:
        """The index queries ``(B, H_I, L, d_I)`` read from ``source`` at positions ``first ..``."""
        queries = self.q_proj(source).unflatten(-1, (self.num_heads, self.head_dim)).transpose(1, 2)
        return self._rotate(queries, rotary, first, context)

    def head_weights(self, x: Tensor) -> Tensor:
        """The per-head weights ``w`` ``(B, L, H_I)`` of the query tokens ``x``."""
        return self.weights_proj(x) * self.num_heads**-0.5

    def scores(
        self, x: Tensor, source: Tensor, keys: Tensor, rotary: PositionScheme | None, first: int,
        context: AttentionContext,
    ) -> Tensor:  # fmt: skip
        """``I`` ``(B, Lq, Lk)`` of the query tokens ``x`` at positions ``first ..`` (their index
        queries read from ``source``) against ``keys``, in float32 or the inputs' wider precision."""
        dtype = torch.promote_types(x.dtype, torch.float32)
        queries = self.queries(source, rotary, first, context).to(dtype)
        logits = F.relu(torch.einsum("bhqd,bkd->bhqk", queries, keys.to(dtype)) * self.head_dim**-0.5)
        return torch.einsum("bqh,bhqk->bqk", self.head_weights(x).to(dtype), logits)


def top_k_selection(scores: Tensor, visible: Tensor | None, k: int) -> Tensor:
    """The ``k`` keys of highest ``scores`` ``(B, Lq, Lk)`` among the ``visible`` ones (boolean,
    broadcastable to it; None: all) per query, as a boolean ``(B, 1, Lq, Lk)`` mask; ties go to the
    earlier key. A query that sees fewer than ``k`` keys gets every key, the hidden ones masked by
    its visibility anyway.

    The ``k``-th highest score comes from ``topk`` (a partial selection, where a sort of every
    row took 1.4 times as long in DSA's layer at 16k); only rows with more keys tied at it than
    places left count their ties from the start."""
    ranked = scores if visible is None else scores.masked_fill(~visible, float("-inf"))
    count = min(k, ranked.shape[-1])
    threshold = ranked.topk(count, dim=-1).values[..., -1:]
    chosen = ranked >= threshold
    surplus = chosen.sum(-1, keepdim=True, dtype=torch.int32) - count  # tied keys beyond the k places
    crowded = (surplus > 0) & (threshold > float("-inf"))
    if crowded.any():
        tied = (ranked == threshold) & crowded
        kept = tied.cumsum(-1, dtype=torch.int32) <= tied.sum(-1, keepdim=True, dtype=torch.int32) - surplus
        chosen &= ~tied | kept
    return chosen.unsqueeze(1)


def indexer_kl(scores: Tensor, attention: Tensor, allowed: Tensor) -> Tensor:
    """The mean over queries of ``KL(p_t || softmax(I_t))`` restricted to the ``allowed`` keys
    ``(B, Lq, Lk)``: ``p`` the main ``attention`` weights ``(B, H, Lq, Lk)`` summed over heads and
    L1-normalized (a target: no gradient flows into it), ``I`` the indexer's ``scores``. Queries
    with no allowed key count for nothing."""
    return indexer_kl_mean(indexer_kl_terms(scores, attention, allowed))


def indexer_kl_terms(scores: Tensor, attention: Tensor, allowed: Tensor) -> Tensor:
    """:func:`indexer_kl`'s sum over queries and the number of queries it counts, ``(2,)``, so that a
    layer running its queries in chunks adds each chunk's and divides once (:func:`indexer_kl_mean`)."""
    target = attention.detach().to(scores.dtype).sum(1)
    mass = target.sum(-1, keepdim=True)
    target = target / mass.clamp_min(torch.finfo(scores.dtype).tiny)
    log_index = scores.masked_fill(~allowed, torch.finfo(scores.dtype).min).log_softmax(-1)
    positive = target > 0
    divergence = torch.where(positive, target * (target.clamp_min(torch.finfo(scores.dtype).tiny).log() - log_index), 0)
    total = divergence.sum()
    return torch.stack([total, (mass.squeeze(-1) > 0).sum().to(total.dtype)])


def indexer_kl_mean(terms: Tensor) -> Tensor:
    """The mean over queries from :func:`indexer_kl_terms` ``(2,)`` (summed over chunks, or not)."""
    return terms[0] / terms[1].clamp_min(1)
