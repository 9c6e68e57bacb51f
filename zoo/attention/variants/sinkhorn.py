"""Sparse Sinkhorn attention (Tay et al., 2020): each block attends to itself and to a softly sorted block.

What it computes: the sequence is cut into blocks of ``block_size`` positions (the last one padded
and masked). Each block is summarized by the sum of its queries and the sum of its keys; their
scaled dot products, divided by ``temperature``, are block-to-block sorting logits ``(nb, nb)``.
A few Sinkhorn iterations in log space (``sinkhorn_iters``: normalize rows, then columns) turn
them into a nearly doubly stochastic matrix ``P``, a relaxed permutation of the blocks. Block
``i``'s sorted block is the mix ``sum_c P[i, c] (block c)`` of the key and value blocks. Each query
then attends, with one softmax, over the ``block_size`` keys of its own block and the
``block_size`` mixed keys of its sorted block (the paper's local plus sorted attention).

What it drops: every pair outside those two blocks; a query reaches distant content only through
the block the sorting sends it. The paper's Gumbel noise on the sorting logits is left out (the
sorting is deterministic, so evaluation is reproducible); so is its causal variant: the sorting
reads every block, so ``sinkhorn`` declares ``supports_causal = False`` and decoders refuse it.

Padding: a query's sorting is computed from the positions it may see only (hidden positions add
nothing to either block sum), and hidden keys get zero weight in its own block and in its sorted
block, whose slot ``s`` mixes the visible keys at offset ``s`` of each block, renormalized.
Weights returned for heatmaps spread each sorted slot's weight over the keys it mixes: a
distribution over the visible keys, with ``output = weights @ values``.

Cost: ``O(L b d)`` for the attention, ``O(nb^2 d)`` for the sorting and ``O(nb L d)`` for the soft
permutation (``nb = L / b``), against dot-product attention's ``O(L^2 d)``. A mask that differs
per query (``valid_lens`` per query, a general ``attn_mask``) needs a sorting per query:
``O(L^2 d)``, as dense as the mask. Self-attention only (``supports_cross_attention = False``).
"""

from __future__ import annotations

import math
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor

from zoo.attention.build.factory import register_attention
from zoo.attention.contract.base import AttentionOutput
from zoo.attention.contract.context import AttentionContext
from zoo.attention.contract.masking import masked_softmax
from zoo.attention.modules.scaled_dot import ScaledDotScores

__all__ = ["SinkhornAttention", "log_sinkhorn"]


def log_sinkhorn(logits: Tensor, iters: int) -> Tensor:
    """The log of a nearly doubly stochastic matrix: ``iters`` rounds of normalizing the rows,
    then the columns, of ``exp(logits)`` (over the last two axes), in log space."""
    for _ in range(iters):
        logits = logits - logits.logsumexp(-1, keepdim=True)
        logits = logits - logits.logsumexp(-2, keepdim=True)
    return logits


@register_attention("sinkhorn", aliases=("sparse_sinkhorn",))
class SinkhornAttention(ScaledDotScores):
    """Attention over each block and its Sinkhorn-sorted block (see the module docstring).

    Args:
        block_size: Positions per block.
        sinkhorn_iters: Row-and-column normalizations of the sorting matrix.
        temperature: Divides the sorting logits; lower makes the sorting closer to a permutation.
        dropout: Dropout on the attention weights during training.
        scale: Multiplier of the dot products (and of the block sums'); ``None`` means ``1 / sqrt(d)``.
    """

    family = "sparse"
    cost = "L²"

    supports_causal: ClassVar[bool] = False
    supports_cross_attention: ClassVar[bool] = False
    supports_position_bias: ClassVar[bool] = False
    #: the sorted block's keys are mixtures of positions: a rotation by position means nothing there
    supports_rotary: ClassVar[bool] = False

    def __init__(
        self,
        block_size: int = 64,
        sinkhorn_iters: int = 8,
        temperature: float = 0.75,
        dropout: float = 0.0,
        scale: float | None = None,
    ) -> None:
        super().__init__(dropout, scale)
        self.require_positive(block_size=block_size, sinkhorn_iters=sinkhorn_iters)
        if not temperature > 0:
            raise ValueError(f"SinkhornAttention: temperature must be positive, got {temperature!r}.")
        self.block_size = block_size
        self.sinkhorn_iters = sinkhorn_iters
        self.temperature = temperature

    def check_layout(self, queries: Tensor, keys: Tensor, is_causal: bool) -> None:
        """Blocks are cut from one sequence: queries and keys must be it."""
        self.check_one_sequence(queries, keys, is_causal, "block sorting")

    def visible(self, mask: Tensor | None, length: int, device: torch.device) -> Tensor:
        """``mask`` as blocks: boolean ``(*mask_batch, M, nb, block_size)``, ``M`` 1 (one mask for
        every query) or one row per padded query position; the padding to whole blocks is False."""
        if mask is None:
            mask = torch.ones(1, length, dtype=torch.bool, device=device)
        while mask.dim() < 2:
            mask = mask.unsqueeze(0)
        padded = math.ceil(length / self.block_size) * self.block_size
        rows = mask.shape[-2]
        mask = F.pad(mask, (0, padded - length, 0, padded - length if rows > 1 else 0), value=False)
        return mask.unflatten(-1, (-1, self.block_size))

    def log_sorting(self, queries: Tensor, keys: Tensor, visible: Tensor) -> Tensor:
        """Log of the block-to-block sorting matrix ``(*batch, M, nb, nb)`` from queries and keys cut
        into blocks ``(*batch, nb, block_size, d)``, each block summed over its ``visible`` positions."""
        weights = visible.unsqueeze(-2).to(torch.promote_types(queries.dtype, torch.float32))  # (*, M, nb, 1, b)
        pooled_q, pooled_k = (
            torch.matmul(weights, x.unsqueeze(-4).to(weights.dtype)).squeeze(-2) for x in (queries, keys)
        )
        logits = torch.matmul(pooled_q, pooled_k.transpose(-2, -1)) * (self.dot_scale(queries) / self.temperature)
        return log_sinkhorn(logits, self.sinkhorn_iters)

    def attend(self, queries: Tensor, keys: Tensor, values: Tensor, context: AttentionContext) -> AttentionOutput:
        """Sort the blocks, then attend from each query over its own and its sorted block."""
        mask, need_weights = context.mask, context.need_weights
        length, block = keys.shape[-2], self.block_size
        visible = self.visible(mask, length, queries.device)  # (*, M, nb, b)
        num_blocks = visible.shape[-2]
        padded = num_blocks * block
        q, k, v = (
            F.pad(x, (0, 0, 0, padded - length)).unflatten(-2, (num_blocks, block)) for x in (queries, keys, values)
        )
        sorting = self.log_sorting(q, k, visible).exp()  # (*, M, nb, nb)
        own, rows, own_seen, own_k, own_v, group_q = self._groups(sorting, visible, q, k, v)
        # slot s of a group's sorted block: the visible keys at offset s of every block c, weighted P[row, c]
        mix = rows.unsqueeze(-1) * visible  # (*, G, nb, b)
        mix = mix / mix.sum(-2, keepdim=True).clamp_min(torch.finfo(mix.dtype).tiny)
        sorted_k, sorted_v = (torch.einsum("...gcs,...csd->...gsd", mix, x.to(mix.dtype)).to(x.dtype) for x in (k, v))
        keep = torch.cat(torch.broadcast_tensors(own_seen, visible.any(-2)), -1).unsqueeze(-2)  # (*, G, 1, 2b)
        group_k, group_v = (
            torch.cat(torch.broadcast_tensors(a, b), -2) for a, b in ((own_k, sorted_k), (own_v, sorted_v))
        )
        scores = torch.matmul(group_q, group_k.transpose(-2, -1)) * self.dot_scale(queries)  # (*, G, nq, 2b)
        weights = masked_softmax(scores, mask=keep)
        output = torch.matmul(self.dropout(weights), group_v).flatten(-3, -2)[..., :length, :]
        if not need_weights:
            return AttentionOutput(output)
        # for heatmaps: own-block weights at their keys, each sorted slot's weight spread over the keys it mixes
        own_weights, sorted_weights = weights.split(block, -1)  # (*, G, nq, b) each
        one_hot = F.one_hot(own, num_blocks).to(weights.dtype)[:, None, :, None]  # (G, 1, nb, 1)
        dense = own_weights.unsqueeze(-2) * one_hot + sorted_weights.unsqueeze(-2) * mix.unsqueeze(-3).to(weights.dtype)
        dense = dense.flatten(-2).flatten(-3, -2)[..., :length, :length]  # (*, Lq, Lk)
        return AttentionOutput(output, dense)

    @staticmethod
    def _groups(
        sorting: Tensor, visible: Tensor, q: Tensor, k: Tensor, v: Tensor
    ) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
        """The queries that share one sorted block: a group per block when one mask serves every
        query, else a group per query (its own mask row). Returns each group's block ``(G,)``, its
        row of the sorting matrix ``(*, G, nb)`` (the visibility it reads is ``visible``'s row of the
        group, or its only row), its own block's visibility ``(*, G, b)``, keys and values ``(*, G, b, d)``, and its queries
        ``(*, G, nq, d)``."""
        num_blocks, block = visible.shape[-2:]
        if visible.shape[-3] == 1:
            own = torch.arange(num_blocks, device=q.device)
            return own, sorting[..., 0, :, :], visible[..., 0, :, :], k, v, q
        positions = torch.arange(num_blocks * block, device=q.device)
        own = positions // block
        return (
            own,
            sorting[..., positions, own, :],
            visible[..., positions, own, :],
            k[..., own, :, :],
            v[..., own, :, :],
            q.flatten(-3, -2).unsqueeze(-2),
        )

    def extra_repr(self) -> str:
        scale = f", scale={self.scale}" if self.scale is not None else ""
        return (
            f"block_size={self.block_size}, sinkhorn_iters={self.sinkhorn_iters}, temperature={self.temperature}{scale}"
        )
