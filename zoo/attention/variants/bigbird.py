"""BigBird attention (Zaheer et al., 2020): blocks of window, global and random keys.

What it computes: scaled dot-product attention over blocks of ``block_size`` positions. A query
in block ``b`` sees the keys of blocks ``b - 1``, ``b`` and ``b + 1`` (the window), of the first
and the last block (global: they also see every key), and of ``num_random_blocks`` blocks drawn
at random for block ``b``. The random draw is fixed by ``seed`` and the number of blocks, so the
same input always meets the same pattern (the paper redraws it; a fixed one keeps evaluation
deterministic and processes in agreement).

Not causal: the pattern depends on the whole sequence (its last block is global, the random
blocks are drawn among all blocks), so a prefix would meet another pattern when decoded step by
step than in training. As in the paper, which uses it in encoders (decoders keep full attention),
``bigbird`` declares ``supports_causal = False`` and decoders refuse it; ``longformer`` and
``sparse`` have causal forms.

What it drops: the pairs outside those blocks; information between two distant blocks flows
through the global blocks or a random one. The paper's result: with global tokens this sparse
pattern keeps full attention's expressiveness, at linear cost.

Cost: each query scores ``(5 + num_random_blocks) * block_size`` keys, each global query every
key: time and memory ``O(L block_size (5 + r))`` (blockwise, through
:class:`~zoo.attention.variants.patterns.SparsePatternAttention`). The pattern needs at least
``5 + num_random_blocks`` blocks; a shorter sequence is computed exactly (full attention), and a
warning says so once.
"""

from __future__ import annotations

import math
import warnings
from typing import ClassVar

import torch
from torch import Tensor

from zoo.attention.build.factory import register_attention
from zoo.attention.contract.base import Attention, AttentionOutput
from zoo.attention.contract.context import AttentionContext
from zoo.attention.kernels import flex
from zoo.attention.variants.patterns import SparsePatternAttention

__all__ = ["BigBirdAttention"]


@register_attention("bigbird", aliases=("big_bird",))
class BigBirdAttention(SparsePatternAttention):
    """Block-sparse attention with window, global and random blocks (see the module docstring).

    Args:
        block_size: Positions per block.
        num_random_blocks: Random key blocks per query block.
        seed: Seed of the random blocks.
        dropout: Dropout on the attention weights during training.
        scale: Multiplier of the dot products; ``None`` means ``1 / sqrt(d)``.
    """

    family = "sparse"
    cost = "L"

    supports_causal: ClassVar[bool] = False

    def __init__(
        self,
        block_size: int = 64,
        num_random_blocks: int = 3,
        seed: int = 0,
        dropout: float = 0.0,
        scale: float | None = None,
    ) -> None:
        super().__init__(block_size, dropout, scale)
        if not isinstance(num_random_blocks, int) or num_random_blocks < 0:
            raise ValueError(
                f"BigBirdAttention: num_random_blocks must be a non-negative integer, got {num_random_blocks!r}."
            )
        self.num_random_blocks, self.seed = num_random_blocks, seed
        self._warned_exact = False

    def min_blocks(self) -> int:
        """Blocks the pattern needs: window (3), global (2) and the random ones, all distinct."""
        return 5 + self.num_random_blocks

    def score(self, queries: Tensor, keys: Tensor) -> Tensor:
        """Scaled dot products, for the exact computation of sequences too short for the pattern."""
        scale = self.dot_scale(queries)
        return torch.matmul(queries, keys.transpose(-2, -1)) * scale

    def attend(self, queries: Tensor, keys: Tensor, values: Tensor, context: AttentionContext) -> AttentionOutput:
        """The block-sparse pattern, or exact attention (said once) when the sequence is too short for it."""
        if math.ceil(keys.shape[-2] / self.block_size) < self.min_blocks():
            if not self._warned_exact:
                warnings.warn(
                    f"BigBirdAttention: {keys.shape[-2]} keys make fewer than the {self.min_blocks()} blocks of "
                    f"{self.block_size} its pattern needs; such sequences are computed exactly (full attention). "
                    f"Lower block_size or num_random_blocks for a sparse pattern on short inputs.",
                    stacklevel=2,
                )
                self._warned_exact = True
            return Attention.attend(self, queries, keys, values, context)
        return super().attend(queries, keys, values, context)

    def flex_pattern(self, num_keys: int, is_causal: bool, device: torch.device) -> flex.FlexMask:
        """The window, the global blocks and the random blocks of a sequence long enough for the
        pattern (a shorter one never reaches flex: :meth:`attend` computes it exactly)."""
        return flex.bigbird(self.block_size, self.random_blocks(math.ceil(num_keys / self.block_size), device))

    def random_blocks(self, num_blocks: int, device: torch.device) -> Tensor:
        """``(num_blocks, r)``: the random key blocks of each query block, none in its window or global."""
        generator = torch.Generator().manual_seed(self.seed)
        draw = torch.rand(num_blocks, num_blocks, generator=generator)
        block = torch.arange(num_blocks)
        excluded = ((block.unsqueeze(-1) - block).abs() <= 1) | (block == 0) | (block == num_blocks - 1)
        return draw.masked_fill(excluded, -1.0).topk(self.num_random_blocks, dim=-1).indices.to(device)

    def global_queries(self, num_keys: int, device: torch.device) -> Tensor:
        last = (math.ceil(num_keys / self.block_size) - 1) * self.block_size
        return torch.cat([torch.arange(self.block_size, device=device), torch.arange(last, num_keys, device=device)])

    def candidates(self, blocks: Tensor, num_keys: int, is_causal: bool) -> Tensor:
        """Window, global and random blocks of each query block, as key positions."""
        num_blocks, device = math.ceil(num_keys / self.block_size), blocks.device
        window = blocks.unsqueeze(-1) + torch.arange(-1, 2, device=device)
        ends = torch.tensor([0, num_blocks - 1], device=device).expand(len(blocks), -1)
        random = self.random_blocks(num_blocks, device)[blocks.clamp(0, num_blocks - 1)]
        key_blocks = torch.cat([window, ends, random], -1)  # (nb, 5 + r)
        return (key_blocks.unsqueeze(-1) * self.block_size + torch.arange(self.block_size, device=device)).flatten(-2)

    def allowed(self, query_pos: Tensor, key_pos: Tensor, num_keys: int, is_causal: bool) -> Tensor:
        num_blocks = math.ceil(num_keys / self.block_size)
        query_block = torch.div(query_pos, self.block_size, rounding_mode="floor")
        key_block = torch.div(key_pos, self.block_size, rounding_mode="floor")
        near = (query_block - key_block).abs() <= 1
        ends = (key_block == 0) | (key_block == num_blocks - 1)
        random = self.random_blocks(num_blocks, key_pos.device)[
            query_block[..., :1, :].clamp(0, num_blocks - 1)
        ]  # (nb, 1, 1, r)
        return near | ends | (random == key_block.unsqueeze(-1)).any(-1)

    def extra_repr(self) -> str:
        return f"num_random_blocks={self.num_random_blocks}, seed={self.seed}, " + super().extra_repr()
