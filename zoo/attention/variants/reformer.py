"""Reformer's LSH attention (Kitaev et al., 2020): each query scores only the keys hashed near it.

What it computes. Queries double as keys (the paper's shared-QK attention): the key of position
``j`` is its query, normalized, ``k_j = q_j / |q_j|``. Positions are hashed by random rotations
(angular LSH): with ``R`` a random ``(d, n_buckets / 2)`` matrix, ``bucket(x) = argmax([x R, -x R])``,
so vectors at a small angle tend to share a bucket. The positions are sorted by (bucket, position)
and cut into chunks of ``bucket_size``; each query attends to the keys of its own chunk and of the
chunk before it, masked by the padding mask. (The paper's first chunk also looks back to the last;
here it does not, so the chunks of real tokens never depend on the padding after them.) Padding,
the positions no query may see, hashes to an extra last bucket, so it never moves a real token's
chunk. A mask that differs per query (``valid_lens`` per query, a general ``attn_mask``) gives
each query its own order, of the positions it may see: ``O(L^2)``, as dense as the mask. A query
scores its own key only when it sees no other (shared-QK makes ``q . q / |q|`` the largest score).
With ``num_hashes`` rounds, each with its own rotations, every round gives an output and a
log-sum-exp per query, and the rounds are combined by the softmax of those: attention over all the
rounds' candidates together, a key found in several rounds counted once per round (the paper's
estimator, without its correction for such repeats).

What it drops. The keys given to it (``reads_keys = False``: a multi-head layer over it builds no
key projection). Keys that share no bucket-chunk with a query get no weight however high their
score would be. Hashing is by position within one sequence and needs every query's position, so
the variant is non-causal self-attention only (no cached decoding, no cross-attention). Unlike the
paper, which draws new rotations at every call, the rotations come from ``seed`` (and the number
of buckets), so the same input hashes the same way in training and at evaluation.

Cost. ``O(L * num_hashes * bucket_size * d)`` time and memory (sorting adds ``O(L log L)``).
With ``need_weights=True`` the weights are scattered into a dense ``(L, L)`` tensor (for heatmaps).
"""

from __future__ import annotations

import math
from typing import ClassVar

import torch
from torch import Tensor

from zoo.attention.build.factory import register_attention
from zoo.attention.contract.base import AttentionOutput
from zoo.attention.contract.context import AttentionContext
from zoo.attention.modules.scaled_dot import ScaledDotScores

__all__ = ["ReformerAttention", "lsh_buckets"]

#: a query's score for its own key: low enough to count for nothing beside any other visible key
SELF_SCORE = -1e4
#: the score of a hidden key: finite, so a query that sees nothing keeps finite gradients
HIDDEN_SCORE = -1e9


def lsh_buckets(x: Tensor, num_buckets: int, num_hashes: int, seed: int) -> Tensor:
    """Angular LSH buckets ``(*batch, num_hashes, L)`` of the rows of ``x`` ``(*batch, L, d)``:
    ``argmax([x R, -x R])`` with ``R`` a seeded random ``(d, num_buckets / 2)`` per round."""
    generator = torch.Generator().manual_seed(seed * 1_000_003 + num_buckets)
    rotations = torch.randn(num_hashes, x.shape[-1], num_buckets // 2, generator=generator)
    rotated = torch.matmul(x.detach().unsqueeze(-3), rotations.to(x.device, x.dtype))  # (*batch, h, L, nb/2)
    return torch.cat([rotated, -rotated], dim=-1).argmax(-1)


def _take(x: Tensor, index: Tensor) -> Tensor:
    """Rows of ``x`` ``(*batch, L, f)`` at ``index`` ``(*batch, *rest)``: ``(*batch, *rest, f)``."""
    lead = index.dim() - (x.dim() - 2)
    rows = index.flatten(-lead) if lead > 1 else index
    out = x.gather(-2, rows.unsqueeze(-1).expand(*rows.shape, x.shape[-1]))
    return out.unflatten(-2, index.shape[-lead:]) if lead > 1 else out


@register_attention("reformer", aliases=("lsh",))
class ReformerAttention(ScaledDotScores):
    """LSH attention with shared queries and keys (see the module docstring).

    Args:
        bucket_size: Positions per chunk of the sorted sequence; a query sees two chunks.
        num_hashes: Hashing rounds (more rounds: fewer keys missed, proportionally more cost).
        num_buckets: Buckets per round (even); ``None``: ``2 * ceil(L / (2 * bucket_size))``,
            about one chunk per bucket, as in the paper.
        dropout: Dropout on the attention weights during training.
        seed: Seed of the random rotations; ``None`` draws one from torch's generator (so
            ``seed_everything`` fixes it).
        scale: Multiplier of the dot products; ``None`` means ``1 / sqrt(d)``.
    """

    family = "hashing"
    cost = "L log L"

    supports_causal: ClassVar[bool] = False
    supports_cross_attention: ClassVar[bool] = False
    supports_position_bias: ClassVar[bool] = False
    supports_rotary: ClassVar[bool] = False
    reads_keys = False  # shared-QK: the queries are the keys

    def __init__(
        self,
        bucket_size: int = 64,
        num_hashes: int = 2,
        num_buckets: int | None = None,
        dropout: float = 0.0,
        seed: int | None = None,
        scale: float | None = None,
    ) -> None:
        super().__init__(dropout, scale)
        self.require_positive(bucket_size=bucket_size, num_hashes=num_hashes, num_buckets=num_buckets)
        if num_buckets is not None and num_buckets % 2:
            raise ValueError(
                f"ReformerAttention: num_buckets must be even (rotations and their negatives), got {num_buckets}."
            )
        self.bucket_size, self.num_hashes, self.num_buckets = bucket_size, num_hashes, num_buckets
        self.seed = int(torch.randint(2**31 - 1, ())) if seed is None else seed

    def check_layout(self, queries: Tensor, keys: Tensor, is_causal: bool) -> None:
        """Hashing is by position within one sequence: queries and keys of one sequence."""
        self.check_one_sequence(queries, keys, is_causal, "hashing of positions")

    def num_buckets_for(self, length: int) -> int:
        """Buckets per round for a sequence of ``length``: ``num_buckets``, or about one chunk each."""
        return self.num_buckets or max(2, 2 * math.ceil(length / (2 * self.bucket_size)))

    def buckets(self, queries: Tensor) -> Tensor:
        """The LSH bucket of every position in every round, ``(*batch, num_hashes, L)``."""
        return lsh_buckets(queries, self.num_buckets_for(queries.shape[-2]), self.num_hashes, self.seed)

    def attend(self, queries: Tensor, keys: Tensor, values: Tensor, context: AttentionContext) -> AttentionOutput:
        """Each round's chunked attention (a dense one for a mask per query), combined by log-sum-exp."""
        mask, need_weights = context.mask, context.need_weights
        length = queries.shape[-2]
        compute = torch.promote_types(queries.dtype, torch.float32)
        q, v = queries.to(compute), values.to(compute)
        batch = torch.broadcast_shapes(q.shape[:-2], v.shape[:-2])
        q, v = q.expand(*batch, *q.shape[-2:]), v.expand(*batch, *v.shape[-2:])
        k = q / q.norm(dim=-1, keepdim=True).clamp_min(1e-6)  # shared-QK: the normalized queries
        buckets = self.buckets(q)  # (*batch, h, L)
        visible = None
        if mask is not None:
            while mask.dim() < 2:
                mask = mask.unsqueeze(0)
            visible = mask.expand(*batch, *mask.shape[-2:])  # (*batch, 1 or L, L)
            padding = ~visible.any(-2)  # positions no query may see: an extra, last bucket
            buckets = torch.where(padding.unsqueeze(-2), self.num_buckets_for(length), buckets)
        order = (buckets * length + torch.arange(length, device=q.device)).argsort(-1)  # (*batch, h, L)
        slot = order.argsort(-1)  # each position's place in the order
        scale = self.dot_scale(q)
        if visible is not None and visible.shape[-2] > 1:
            scores, keep, value_rows = self._per_query(q, k, visible, order, slot, scale)
        else:
            scores, keep, value_rows = self._chunks(q, k, visible, order, scale)
        # in float32 under autocast too (its matmuls give half scores, and HIDDEN_SCORE overflows half)
        scores = scores.to(compute).masked_fill(~keep, HIDDEN_SCORE)
        lse = torch.logsumexp(scores, dim=-1, keepdim=True)
        weights = torch.exp(scores - lse) * keep  # a query that sees no key: all zero
        lse = torch.where(keep.any(-1, keepdim=True), lse, HIDDEN_SCORE)  # such a round counts for nothing
        rounds = torch.matmul(
            self.dropout(weights), _take(v, value_rows) if value_rows is not None else v.unsqueeze(-3)
        )
        if value_rows is not None:  # chunks: back from the sorted slots to positions
            rows = slot.unsqueeze(-1)
            rounds = rounds.flatten(-3, -2).gather(-2, rows.expand(*rows.shape[:-1], rounds.shape[-1]))
            lse = lse.flatten(-3, -2).gather(-2, rows)
        share = torch.softmax(lse, dim=-3)  # (*batch, h, L, 1): the rounds' shares of each query
        output = (share * rounds).sum(-3).to(values.dtype)
        if not need_weights:
            return AttentionOutput(output, None)
        if value_rows is not None:  # scatter each chunk's weights into (L, L), back in position order
            dense = weights.new_zeros((*weights.shape[:-3], weights.shape[-3] * weights.shape[-2], length))
            index = value_rows.unsqueeze(-2).expand_as(weights).flatten(-3, -2)
            dense = dense.scatter_add(-1, index, weights.flatten(-3, -2))
            weights = dense.gather(-2, slot.unsqueeze(-1).expand(*slot.shape, length))
        return AttentionOutput(output, (share * weights).sum(-3).to(values.dtype))

    def _chunks(
        self, q: Tensor, k: Tensor, visible: Tensor | None, order: Tensor, scale: float
    ) -> tuple[Tensor, Tensor, Tensor]:
        """One mask for every query: the sorted positions cut into chunks, each query scoring its
        chunk and the one before. Scores and what they may see ``(*batch, h, nc, c, S)``, and the
        key positions ``(*batch, h, nc, S)``."""
        length = q.shape[-2]
        chunk = min(self.bucket_size, length)
        num_chunks = math.ceil(length / chunk)
        order = torch.cat([order, order.new_full((*order.shape[:-1], num_chunks * chunk - length), -1)], -1)
        query_pos = order.unflatten(-1, (num_chunks, chunk))  # (*batch, h, nc, c), -1 past the end
        before = torch.cat([torch.full_like(query_pos[..., :1, :], -1), query_pos[..., :-1, :]], -2)
        key_pos = torch.cat([before, query_pos], -1)  # (*batch, h, nc, 2c): the chunk before, then its own
        keep = (query_pos.unsqueeze(-1) >= 0) & (key_pos.unsqueeze(-2) >= 0)
        query_rows, key_rows = query_pos.clamp_min(0), key_pos.clamp_min(0)
        if visible is not None:  # a padding mask: whether each key may be seen
            keep = keep & _take(visible[..., 0, :, None], key_rows).squeeze(-1).unsqueeze(-2)
        scores = torch.matmul(_take(q, query_rows), _take(k, key_rows).transpose(-2, -1)) * scale
        own = query_pos.unsqueeze(-1) == key_pos.unsqueeze(-2)
        return scores.masked_fill(own, SELF_SCORE), keep, key_rows

    def _per_query(
        self, q: Tensor, k: Tensor, visible: Tensor, order: Tensor, slot: Tensor, scale: float
    ) -> tuple[Tensor, Tensor, None]:
        """A mask per query: each query orders the positions it may see (with the padding) and
        scores the visible keys in its chunk of that order and the one before; ``O(L^2)``, as
        dense as the mask. Scores and what they may see ``(*batch, h, L, L)``."""
        length = q.shape[-2]
        chunk = min(self.bucket_size, length)
        member = (visible | ~visible.any(-2, keepdim=True)).unsqueeze(-3)  # (*batch, 1, L, L)
        member_sorted = member.expand(*order.shape[:-1], length, length).gather(
            -1, order.unsqueeze(-2).expand(*order.shape[:-1], length, length)
        )  # (*batch, h, query, sorted slot)
        count = member_sorted.long().cumsum(-1)  # members up to and including each slot
        rank = count.gather(-1, slot.unsqueeze(-2).expand_as(count)) - 1  # each key's place in the query's order
        outside = ~torch.diagonal(member, dim1=-2, dim2=-1)  # a query not in its own order goes after
        query_rank = torch.diagonal(rank, dim1=-2, dim2=-1) + outside  # the members before it
        distance = query_rank.unsqueeze(-1) // chunk - rank // chunk
        keep = visible.unsqueeze(-3) & (distance >= 0) & (distance <= 1)
        scores = (torch.matmul(q, k.transpose(-2, -1)).unsqueeze(-3) * scale).expand(keep.shape)
        own = torch.eye(length, dtype=torch.bool, device=q.device)
        return scores.masked_fill(own, SELF_SCORE), keep, None

    def extra_repr(self) -> str:
        buckets = f", num_buckets={self.num_buckets}" if self.num_buckets is not None else ""
        return f"bucket_size={self.bucket_size}, num_hashes={self.num_hashes}{buckets}, seed={self.seed}"
