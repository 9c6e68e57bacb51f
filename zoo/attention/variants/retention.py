"""Retention (Sun et al., 2023, RetNet): linear attention with a fixed decay per head.

Per head ``h``, with row vectors and a ``(dk, dv)`` state::

    S_t = g_h S_{t-1} + k_t^T v_t,        o_t = q_t S_t,        q_t scaled by dk ** -0.5

The decays are RetNet's multi-scale choice ``g_h = 1 - 2 ** (-5 - h)`` over the heads
``h = 0 .. H - 1``: the first head forgets within about 32 tokens, the eighth within about 4,000.
Unrolled, ``o_i = sum_{j <= i} g_h^(i - j) (q_i . k_j) v_j``: the parallel form is
``(Q K^T * D) V`` with the decay mask ``D_ij = g_h^(i - j)`` for ``j <= i`` (formed from log decays,
:mod:`zoo.attention.kernels.decay`).

The output of each head is normalized (RMSNorm over its features, RetNet's GroupNorm as
torchscale and flash-linear-attention compute it) and multiplied by a swish gate of the layer's
input, ``silu(x W_g)``, before the layer's output projection (RetNet's ``Y = swish(X W_G) *
GroupNorm(retention)``).

No short convolution by default (``conv_size=0``): RetNet has none, nor flash-linear-attention's
``MultiScaleRetention``; with one (``conv_size=4``), queries, keys and values go through SiLU after
it, as flash-linear-attention's layers do.

Left out, and why:

* xPos, RetNet's rotation of queries and keys: the stack's position scheme does it here
  (``--model.position rope`` rotates as xPos does; the decay plays the part of xPos's scale).
* The doubled value width (RetNet's ``d_v = 2 d``): ``expand_v`` (default 1) sets it.
* torchscale's rescalings of the parallel form (the decay mask divided by the square root of its
  row sums, the scores by their absolute row sums): the per-head norm divides them out again (up
  to its epsilon); they only keep half-precision sums in range, which the float32 recurrence does
  here, and without them the three forms agree exactly.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from typing_extensions import Unpack

from zoo.attention.build.factory import register_attention_layer
from zoo.attention.modules.gating import HeadNorm
from zoo.attention.modules.recurrent import Recurrence, RecurrentLayer, RecurrentOptions

__all__ = ["RetentionAttention"]


@register_attention_layer("retention", aliases=("retnet", "multiscale_retention"))
class RetentionAttention(RecurrentLayer):
    """Multi-scale retention (see the module docstring).

    Args:
        embed_dim: The block's width.
        num_heads: Heads, one decay each.
        expand_v: The value width, in multiples of ``embed_dim``.
        options: :class:`~zoo.attention.modules.recurrent.RecurrentLayer`'s (``conv_size`` 0 here, RetNet's).

    Parameters of its own: ``gate`` (``embed_dim -> value width``, no bias), the swish output gate;
    ``norm``, the per-head RMSNorm's scale.
    """

    #: SiLU after a convolution only (RetNet has neither)
    silu = "convolved"

    def __init__(
        self, embed_dim: int, num_heads: int, *, expand_v: float = 1.0, **options: Unpack[RecurrentOptions]
    ) -> None:
        value_dim = int(embed_dim * expand_v)
        options.setdefault("conv_size", 0)  # RetNet has none
        super().__init__(embed_dim, num_heads, key_dim=embed_dim, value_dim=value_dim, **options)
        self.gate = nn.Linear(embed_dim, value_dim, bias=False)
        self.norm = HeadNorm(self.head_dim)

    def log_decays(self, dtype: torch.dtype, device: torch.device) -> Tensor:
        """``log(1 - 2 ** (-5 - h))`` for each head ``h``, ``(H,)``."""
        exponents = -5.0 - torch.arange(self.num_heads, dtype=dtype, device=device)
        return torch.log1p(-torch.exp2(exponents))

    def prepare(self, queries: Tensor, keys: Tensor, values: Tensor, layer_input: Tensor) -> Recurrence:
        log_decay = self.log_decays(queries.dtype, queries.device)[:, None, None]  # (H, 1, 1): every step
        return Recurrence(queries * self.key_head_dim**-0.5, keys, values, log_decay)

    def finish(self, output: Tensor, layer_input: Tensor) -> Tensor:
        return self.norm(output, self.split_heads(self.gate(layer_input)))
