"""A positional scheme applied around the variant under test, the way a model applies it."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from zoo.positions import PositionScheme, create_position

__all__ = ["Placement"]


class Placement:
    """A positional scheme applied around the variant the way a model applies it: absolute
    vectors added to queries and keys; for a scoring attention, queries and keys rotated or the
    bias handed over (a layer built with the scheme does those itself). One scheme per size."""

    def __init__(self, name: str, kind: str, on_scores: bool) -> None:
        self.name, self.kind, self.on_scores = name, kind, on_scores
        self.schemes: dict[int, PositionScheme] = {}

    def scheme(self, size: int) -> PositionScheme:
        if size not in self.schemes:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(0)
                self.schemes[size] = create_position(self.name, d_model=size, num_heads=1, max_len=64)
        return self.schemes[size]

    def apply(
        self, inputs: tuple[Tensor, Tensor, Tensor], kwargs: dict[str, Any]
    ) -> tuple[tuple[Tensor, Tensor, Tensor], dict[str, Any]]:
        if self.kind == "bias":
            return inputs, {
                **kwargs,
                "position_bias": self.scheme(1).to(inputs[0].device),
            } if self.on_scores else kwargs
        if self.kind == "rotary" and not self.on_scores:
            return inputs, kwargs
        q, k, v = inputs
        key_first = max(0, q.shape[-2] - k.shape[-2])  # no negative positions when Lq > Lk
        first = key_first + k.shape[-2] - q.shape[-2]  # bottom-right: query i at key position Lk - Lq + i

        def place(t: Tensor, offset: int) -> Tensor:
            scheme = self.scheme(t.shape[-1]).to(t.device)
            if self.kind == "absolute":
                return scheme(t, offset)
            return scheme(t, torch.arange(offset, offset + t.shape[-2], device=t.device))

        return (
            place(q, first),
            place(k, key_first),
            v,
        ), kwargs  # values carry no positions: the weights check reads them
