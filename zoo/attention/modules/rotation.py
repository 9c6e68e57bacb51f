"""Rotating per-head queries and keys with a rotary scheme, its tables computed once a forward."""

from __future__ import annotations

import torch
from torch import Tensor

from zoo.attention.contract.context import AttentionContext
from zoo.positions import PositionScheme

__all__ = ["rotate_heads"]


def rotate_heads(scheme: PositionScheme | None, x: Tensor, first: int, context: AttentionContext | None) -> Tensor:
    """Heads ``x`` ``(..., L, d)`` rotated by ``scheme`` at positions ``first .. first + L - 1``;
    as they are without a scheme.

    A scheme that splits its work into tables and a rotation (``angles(positions)`` and
    ``rotate(x, cos, sin)``, as :class:`~zoo.positions.rotary.RotaryEmbedding` does) has its
    tables computed once a forward, kept on ``context`` and shared by every layer and by queries
    and keys at the same positions; any other rotary scheme is called as ``scheme(x, positions)``.
    """
    if scheme is None:
        return x
    length = x.shape[-2]
    angles = getattr(scheme, "angles", None)
    if angles is None or context is None:
        return scheme(x, torch.arange(first, first + length, device=x.device))
    cos, sin = context.memoized(
        ("rotary", id(scheme), first, length, x.device),
        lambda: angles(torch.arange(first, first + length, device=x.device)),
    )
    return scheme.rotate(x, cos, sin)
