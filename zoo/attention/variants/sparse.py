"""Fixed sparse attention (Child et al., 2019, "Generating Long Sequences with Sparse Transformers").

What it computes: scaled dot-product attention on the paper's *fixed* pattern with stride ``l``
(``block_size``): positions are cut into blocks of ``l``; a query sees every key of its own block
and the last ``summary`` positions (``c`` in the paper) of every block, the summaries that carry
a block's content to the others. Causal attention keeps the keys at or before the query: its own
block up to itself and the summaries of earlier blocks. Non-causal attention also sees the
summaries of later blocks (the paper's set ``j mod l >= l - c`` without the causal cut).

What it drops: every pair between two blocks except through their summary positions, so
information between blocks passes through ``c`` positions per block (two hops: into a summary,
then out of it).

Decoding keeps what a later query can read: its block's positions and every block's summaries,
``l + c L / l`` of ``L`` positions (:class:`~zoo.attention.contract.cache.PatternCache`).

Cost: each query scores ``l + c L / l`` keys: time and memory ``O(L (l + c L / l))``, not linear
for a fixed ``l``: with the default ``l = 128`` a query scores 136 keys at 1k tokens and 256 at 16k
(a time exponent near 1.23 over that range). ``l`` near ``sqrt(c L)`` is the paper's choice.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from zoo.attention.build.factory import register_attention
from zoo.attention.kernels import flex
from zoo.attention.variants.patterns import SparsePatternAttention

__all__ = ["FixedSparseAttention"]


@register_attention("sparse", aliases=("fixed_sparse",))
class FixedSparseAttention(SparsePatternAttention):
    """Attention on the fixed strided pattern of the Sparse Transformer (see the module docstring).

    Args:
        block_size: The stride ``l``: positions per block.
        summary: Summary positions ``c`` at the end of each block, seen by every other block.
        dropout: Dropout on the attention weights during training.
        scale: Multiplier of the dot products; ``None`` means ``1 / sqrt(d)``.
    """

    family = "sparse"
    cost = "L^1.5"

    def __init__(
        self, block_size: int = 128, summary: int = 1, dropout: float = 0.0, scale: float | None = None
    ) -> None:
        super().__init__(block_size, dropout, scale)
        if not isinstance(summary, int) or not 1 <= summary <= block_size:
            raise ValueError(
                f"FixedSparseAttention: summary must be an integer in [1, block_size={block_size}], got {summary!r}."
            )
        self.summary = summary

    def flex_pattern(self, num_keys: int, is_causal: bool, device: torch.device) -> flex.FlexMask:
        """Each block and the summary positions of every block, on positions."""
        return flex.fixed_sparse(self.block_size, self.summary, is_causal=is_causal)

    def candidates(self, blocks: Tensor, num_keys: int, is_causal: bool) -> Tensor:
        """Each block's own positions, and the summary positions of every block."""
        block, device = self.block_size, blocks.device
        own = blocks.unsqueeze(-1) * block + torch.arange(block, device=device)
        starts = torch.arange(math.ceil(num_keys / block), device=device).unsqueeze(-1) * block
        summaries = (starts + torch.arange(block - self.summary, block, device=device)).flatten()
        return torch.cat([own, summaries.expand(len(blocks), -1)], -1)

    def causal_keeps(self, positions: Tensor, length: int) -> Tensor:
        """Which ``positions`` a causal query at ``length`` or later can still read: those of the
        block ``length`` falls in, and every block's summaries."""
        block = self.block_size
        return (positions >= length // block * block) | (positions % block >= block - self.summary)

    def allowed(self, query_pos: Tensor, key_pos: Tensor, num_keys: int, is_causal: bool) -> Tensor:
        same_block = torch.div(query_pos, self.block_size, rounding_mode="floor") == torch.div(
            key_pos, self.block_size, rounding_mode="floor"
        )
        return same_block | (key_pos % self.block_size >= self.block_size - self.summary)

    def extra_repr(self) -> str:
        return f"summary={self.summary}, " + super().extra_repr()
