"""Absolute schemes besides the sinusoids: ``learned`` embeddings per position, and ``none``."""

from __future__ import annotations

from torch import Tensor, nn

from zoo.positions.base import PositionScheme, register_position

__all__ = ["LearnedPositions", "NoPositions"]


@register_position("learned", aliases=("learned_absolute",))
class LearnedPositions(PositionScheme):
    """A trained vector per position added to the embeddings (BERT, GPT-2).

    Unlike the sinusoids it cannot reach past ``max_len``, and rarely generalises to positions
    seen little in training.

    Args:
        d_model: Embedding size.
        max_len: Number of positions (plus ``offset``) learned.
        init_std: Standard deviation of the initial vectors.
    """

    kind = "absolute"

    def __init__(self, d_model: int, max_len: int = 4096, init_std: float = 0.02) -> None:
        super().__init__()
        self.embedding = nn.Embedding(max_len, d_model)
        nn.init.normal_(self.embedding.weight, std=init_std)

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        """``x``: ``(B, L, d_model)``; adds the vectors of positions ``offset .. offset + L - 1``."""
        max_len, d_model = self.embedding.weight.shape
        if x.dim() != 3 or x.shape[-1] != d_model:
            raise ValueError(f"LearnedPositions expects (batch, length, {d_model}); got {tuple(x.shape)}.")
        if offset < 0 or offset + x.shape[1] > max_len:
            raise ValueError(
                f"LearnedPositions: positions {offset}..{offset + x.shape[1] - 1} are outside the "
                f"{max_len} learned; build it with a larger max_len."
            )
        return x + self.embedding.weight[offset : offset + x.shape[1]].to(x.dtype)


@register_position("none", aliases=("nope",))
class NoPositions(PositionScheme):
    """No positions: the model reads a set, unless its attention builds in order (``local``)."""

    kind = "absolute"

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        return x
