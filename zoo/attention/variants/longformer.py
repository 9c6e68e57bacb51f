"""Longformer attention (Beltagy et al., 2020): a sliding window plus global positions.

What it computes: scaled dot-product attention where a query at position ``p`` sees the keys in a
window around it (non-causal: ``|p - j| <= window // 2``; causal: ``0 <= p - j < window``, as
``local``), every query sees the *global* keys, and the global queries see every key. Which
positions are global is an input of the constructor: the first ``global_tokens`` positions (the
first token by default, the one a classifier pools or a ``[CLS]`` holds), or a list of positions.
In causal attention a global key is seen only by the queries at or after it, and a global query
only sees the keys up to it.

What it drops: every pair that is neither within the window nor global; information between two
distant ordinary positions flows only through the global ones (or through depth, ``window`` per
layer). The paper's dilated windows are not included.

Cost: time and memory ``O(L (w + g))`` for window ``w`` and ``g`` global positions: the window
and global keys blockwise (:class:`~zoo.attention.variants.patterns.SparsePatternAttention`), the ``g``
global queries as dense rows.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from zoo.attention.build.factory import register_attention
from zoo.attention.kernels import flex
from zoo.attention.variants.patterns import SparsePatternAttention

__all__ = ["LongformerAttention"]


@register_attention("longformer")
class LongformerAttention(SparsePatternAttention):
    """Sliding-window attention with global positions (see the module docstring).

    Args:
        window: Width of the window: a causal query sees itself and the ``window - 1`` keys before
            it; a non-causal one ``window // 2`` keys on each side.
        global_tokens: How many leading positions are global, or the list of global positions.
        block_size: Queries per block; ``None`` takes half the window.
        dropout: Dropout on the attention weights during training.
        scale: Multiplier of the dot products; ``None`` means ``1 / sqrt(d)``.
    """

    family = "sparse"
    cost = "L"

    def __init__(
        self,
        window: int = 128,
        global_tokens: int | Sequence[int] = 1,
        block_size: int | None = None,
        dropout: float = 0.0,
        scale: float | None = None,
    ) -> None:
        self.require_positive(window=window)
        super().__init__(block_size or max(1, window // 2), dropout, scale)
        positions = range(global_tokens) if isinstance(global_tokens, int) else global_tokens
        if (isinstance(global_tokens, int) and global_tokens < 0) or any(
            not isinstance(p, int) or p < 0 for p in positions
        ):
            raise ValueError(
                f"LongformerAttention: global_tokens must be a count of leading positions or a list of "
                f"non-negative positions, got {global_tokens!r}."
            )
        self.window, self.global_tokens = window, global_tokens
        self.register_buffer(
            "global_positions", torch.tensor(sorted(set(positions)), dtype=torch.long), persistent=False
        )

    @property
    def causal_reach(self) -> int:
        """A causal query reads the ``window - 1`` positions before it besides the global ones."""
        return self.window

    @property
    def causal_sinks(self) -> int:
        """The leading positions up to the last global one: with :attr:`causal_reach`, all that a
        multi-head layer keeps when decoding (a global query reads only keys up to it, all of
        them among these)."""
        return int(self.global_positions.max()) + 1 if len(self.global_positions) else 0

    def _reach(self, is_causal: bool) -> tuple[int, int]:
        """Keys the window reaches before and after its query."""
        return (self.window - 1, 0) if is_causal else (self.window // 2, self.window // 2)

    def flex_pattern(self, num_keys: int, is_causal: bool, device: torch.device) -> flex.FlexMask:
        """The window and the global positions, on positions."""
        return flex.longformer(self.window, self.global_positions.to(device), is_causal=is_causal)

    def global_queries(self, num_keys: int, device: torch.device) -> Tensor:
        return self.global_positions[self.global_positions < num_keys].to(device)

    def candidates(self, blocks: Tensor, num_keys: int, is_causal: bool) -> Tensor:
        """The window around each block, and the global positions."""
        before, after = self._reach(is_causal)
        window = blocks.unsqueeze(-1) * self.block_size + torch.arange(
            -before, self.block_size + after, device=blocks.device
        )
        return torch.cat([window, self.global_queries(num_keys, blocks.device).expand(len(blocks), -1)], -1)

    def allowed(self, query_pos: Tensor, key_pos: Tensor, num_keys: int, is_causal: bool) -> Tensor:
        before, after = self._reach(is_causal)
        distance = query_pos - key_pos
        is_global = torch.zeros(num_keys, dtype=torch.bool, device=key_pos.device)
        is_global[self.global_queries(num_keys, key_pos.device)] = True
        return ((distance <= before) & (distance >= -after)) | is_global[key_pos.clamp(0, num_keys - 1)]

    def extra_repr(self) -> str:
        return f"window={self.window}, global_tokens={self.global_tokens}, " + super().extra_repr()
