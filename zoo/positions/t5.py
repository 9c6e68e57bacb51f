"""T5's relative position bias, ``t5`` (Raffel et al., 2020).

Each head learns one scalar per *bucket* of relative distance ``key - query``. Half the buckets
hold exact distances (0, 1, 2, ...); the rest grow logarithmically up to ``max_distance``, past
which every distance shares the last bucket. Bidirectional attention (an encoder) spends half
the buckets on keys after the query; causal attention (a decoder) sees only keys at or before
the query and spends all of them on those.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from zoo.positions.base import PositionScheme, register_position

__all__ = ["T5RelativeBias", "t5_bucket"]


def t5_bucket(relative: Tensor, *, bidirectional: bool, num_buckets: int = 32, max_distance: int = 128) -> Tensor:
    """The bucket ``(long)`` of each relative distance ``key - query`` (an integer tensor)."""
    relative = relative.long()
    if bidirectional:
        num_buckets //= 2
        offset = torch.where(relative > 0, num_buckets, 0)  # keys after the query: upper half
        distance = relative.abs()
    else:
        offset = torch.zeros_like(relative)
        distance = (-relative).clamp_min(0)  # keys after the query all fall into bucket 0
    exact = num_buckets // 2
    # log-spaced from `exact` (bucket `exact`) to `max_distance` (bucket `num_buckets`)
    spread = torch.log(distance.clamp_min(1).float() / exact) / math.log(max_distance / exact) * (num_buckets - exact)
    logarithmic = (exact + spread.long()).clamp_max(num_buckets - 1)
    return offset + torch.where(distance < exact, distance, logarithmic)


@register_position("t5", aliases=("t5_bias",))
class T5RelativeBias(PositionScheme):
    """A learned bias per head and per bucket of relative distance.

    Args:
        num_heads: Heads, each with its own bias per bucket.
        causal: The stack's self-attention is causal: unidirectional buckets.
        num_buckets: Buckets (T5: 32).
        max_distance: Distance from which all fall into the last bucket (T5: 128).
        init_std: Standard deviation of the initial biases.
    """

    kind = "bias"
    relative = True

    def __init__(
        self,
        num_heads: int,
        causal: bool = False,
        num_buckets: int = 32,
        max_distance: int = 128,
        init_std: float = 0.02,
    ) -> None:
        super().__init__()
        if num_buckets < 4 or max_distance <= num_buckets // 2:
            raise ValueError(
                f"t5 needs num_buckets >= 4 and max_distance > num_buckets // 2 (or > num_buckets // 4 "
                f"bidirectional); got num_buckets={num_buckets}, max_distance={max_distance}."
            )
        self.causal, self.num_buckets, self.max_distance = causal, num_buckets, max_distance
        self.bias = nn.Parameter(torch.randn(num_heads, num_buckets) * init_std)

    def forward(self, query_positions: Tensor, key_positions: Tensor) -> Tensor:
        """Integer positions that broadcast together to ``S``; returns ``(num_heads, *S)``."""
        bucket = t5_bucket(
            key_positions - query_positions,
            bidirectional=not self.causal,
            num_buckets=self.num_buckets,
            max_distance=self.max_distance,
        )
        return self.bias[:, bucket]

    def extra_repr(self) -> str:
        return f"num_heads={len(self.bias)}, causal={self.causal}, num_buckets={self.num_buckets}, max_distance={self.max_distance}"
