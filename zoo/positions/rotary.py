"""Rotary position embedding, ``rope`` (Su et al., 2021, RoFormer).

Each head's query and key vectors are cut into ``d / 2`` pairs, and pair ``i`` of the vector at
position ``m`` is rotated by the angle ``m * theta_i`` with ``theta_i = base^(-2i / d)``. A dot
product of a query rotated to ``m`` with a key rotated to ``n`` then depends on the positions
only through ``m - n``: relative positions, with no parameters and no length limit.

Pairs are the two halves of the vector (feature ``i`` with feature ``i + d / 2``), as in
GPT-NeoX and LLaMA; the paper's adjacent pairs are a fixed permutation of the same features.
Keys are rotated once, before they are cached, so a cached decoding step rotates only its new
query and key, at the position after the cache.

Partial rotation (``fraction`` ``f``, transformers' ``partial_rotary_factor``; GPT-NeoX's
``rotary_pct``): only the first ``r = int(f * d)`` features of each head are rotated, as above with
``d`` replaced by ``r`` (``theta_i = base^(-2i / r)``, pairs ``i`` and ``i + r / 2``), and the last
``d - r`` pass unchanged, so those features score content only. Qwen3-Next rotates a quarter.
``f = 1`` (the default) is the full rotation. Gemma 4 rotates a fraction another way
(``partial="proportional"``, transformers' ``"proportional"`` rope type): the pairs stay
``i`` and ``i + d / 2`` of the whole head, pairs ``i < r / 2`` turn at ``theta_i = base^(-2i / d)``
and the rest at angle zero.

``scaling`` stretches the angles to read past the trained length (linear interpolation, Llama 3.1's
rule, YaRN; :mod:`zoo.positions.rope_scaling`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import torch
from torch import Tensor

from zoo.positions.base import PositionScheme, register_position
from zoo.positions.rope_scaling import LinearScaling, RopeScaling, rope_scaling

__all__ = ["RotaryEmbedding"]


@register_position("rope", aliases=("rotary",))
class RotaryEmbedding(PositionScheme):
    """Rotates per-head queries and keys by angles proportional to their positions.

    Args:
        head_dim: Size of each head's vectors; must be even.
        base: Wavelength base of the angles (10000 in the paper).
        fraction: Share of each head's features rotated, the first ``int(fraction * head_dim)``
            (an even count); the rest pass unchanged.
        partial: Which features a fraction below one rotates: ``"leading"`` (the first ones, in
            pairs ``i``, ``i + r / 2``) or ``"proportional"`` (pairs ``i``, ``i + d / 2`` of the whole
            head, ``r / 2`` of them, at the whole head's frequencies).
        scaling: A frequency-scaling rule, or a mapping naming one (``{"type": "yarn", ...}``).
    """

    kind = "rotary"

    def __init__(
        self,
        head_dim: int,
        base: float = 10000.0,
        *,
        fraction: float = 1.0,
        partial: Literal["leading", "proportional"] = "leading",
        scaling: RopeScaling | Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__()
        if head_dim % 2:
            raise ValueError(
                f"rope rotates pairs of features, so the head size must be even; got {head_dim}. Change d_model or num_heads."
            )
        if not 0.0 < fraction <= 1.0:
            raise ValueError(f"rope's fraction must be in (0, 1]; got {fraction!r}. Pass 1.0 to rotate every feature.")
        rotary_dim = int(fraction * head_dim)
        if rotary_dim == 0 or rotary_dim % 2:
            raise ValueError(
                f"rope's fraction {fraction!r} of head size {head_dim} rotates {rotary_dim} features; it needs a "
                "positive even count. Choose a fraction whose share of the head size is even."
            )
        if partial not in ("leading", "proportional"):
            raise ValueError(f"rope's partial must be 'leading' or 'proportional'; got {partial!r}.")
        self.scaling = rope_scaling(scaling)
        if partial == "proportional" and not isinstance(self.scaling, LinearScaling | None):
            raise ValueError(
                f"rope's proportional rotation takes linear scaling only; got {self.scaling.kind!r}. "
                "Use partial='leading' with it."
            )
        self.head_dim, self.base, self.fraction, self.rotary_dim = head_dim, base, fraction, rotary_dim
        self.partial = partial

    def forward(self, x: Tensor, positions: Tensor) -> Tensor:
        """``x``: ``(..., L, head_dim)``; ``positions``: integers broadcastable to ``(..., L)``."""
        if x.shape[-1] != self.head_dim:
            raise ValueError(f"RotaryEmbedding expects vectors of size {self.head_dim}; got shape {tuple(x.shape)}.")
        return self.rotate(x, *self.angles(positions))

    def angles(self, positions: Tensor) -> tuple[Tensor, Tensor]:
        """``cos`` and ``sin`` of the angles ``m * theta_i`` at integer ``positions`` ``(..., L)``:
        ``(..., L, head_dim / 2)`` in float32. Computed on each call, never stored: a buffer would
        follow ``model.half()`` and lose the precision that angles at large positions need (a model
        computes them once a forward, :meth:`zoo.attention.contract.context.AttentionContext.memoized`).
        With a ``fraction`` below one they are ``(..., L, rotary_dim / 2)`` (``partial="leading"``).
        Under a scaling rule, the scaled frequencies, and both multiplied by its amplitude."""
        angles = positions.to(torch.float32).unsqueeze(-1) * self.inverse_frequency(positions.device)
        if self.scaling is None or self.scaling.amplitude == 1.0:
            return angles.cos(), angles.sin()
        return angles.cos() * self.scaling.amplitude, angles.sin() * self.scaling.amplitude

    def inverse_frequency(self, device: torch.device | None = None) -> Tensor:
        """Each rotated pair's angle per position, ``theta_i``, float32: ``(rotary_dim / 2,)``, or
        ``(head_dim / 2,)`` with zeros past the rotated pairs for ``partial="proportional"``."""
        width = self.rotary_dim if self.partial == "leading" else self.head_dim
        inverse_frequency = self.base ** (
            -torch.arange(0, self.rotary_dim, 2, device=device, dtype=torch.float32) / width
        )
        if self.scaling is not None:
            inverse_frequency = self.scaling.scale(inverse_frequency, self.base)
        if self.partial == "proportional":
            inverse_frequency = torch.cat(
                [inverse_frequency, inverse_frequency.new_zeros((self.head_dim - self.rotary_dim) // 2)]
            )
        return inverse_frequency

    @staticmethod
    def rotate(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        """``x`` ``(..., L, head_dim)`` rotated by the angles whose ``cos`` and ``sin`` are given
        (:meth:`angles`), in ``x``'s dtype: its first ``2 * cos.shape[-1]`` features, the rest as they are."""
        if cos.dtype != x.dtype:
            cos, sin = cos.to(x.dtype), sin.to(x.dtype)
        rotary_dim = 2 * cos.shape[-1]
        whole = rotary_dim == x.shape[-1]  # a decoded token's rotation is a few microseconds an op
        first, second = (x if whole else x[..., :rotary_dim]).chunk(2, dim=-1)
        rotated = [first * cos - second * sin, first * sin + second * cos]
        return torch.cat(rotated if whole else [*rotated, x[..., rotary_dim:]], dim=-1)

    def for_head_dim(self, head_dim: int) -> RotaryEmbedding:
        """This scheme for heads of ``head_dim`` features (the same base): a layer whose query and
        key heads are narrower or wider than the stack's (``gla``'s halved keys, Mamba-2's state), and
        the same fraction of them rotated."""
        if head_dim == self.head_dim:
            return self
        return RotaryEmbedding(head_dim, self.base, fraction=self.fraction, partial=self.partial, scaling=self.scaling)

    def extra_repr(self) -> str:
        partial = f", fraction={self.fraction}" if self.fraction != 1.0 else ""
        partial += f", partial={self.partial!r}" if self.partial != "leading" else ""
        scaling = f", scaling={self.scaling}" if self.scaling is not None else ""
        return f"head_dim={self.head_dim}, base={self.base}{partial}{scaling}"
