"""Gated linear attention (Yang et al., 2023, GLA): linear attention whose state decays per key
dimension, by a gate that depends on the data.

Per head, with row vectors and a ``(dk, dv)`` state::

    S_t = Diag(a_t) S_{t-1} + k_t^T v_t,        o_t = q_t S_t,        q_t scaled by dk ** -0.5

The gate ``a_t`` in ``(0, 1)^dk`` comes from a low-rank projection of the layer's input ``x_t``,
as in the paper and flash-linear-attention::

    log a_t = logsigmoid(x_t W_1 W_2 + b) / 16        W_1: (embed_dim, 16), W_2: (16, key width)

The rank (16) keeps the gate's parameters few; dividing the log-sigmoid by 16 (the paper's
normalizer ``tau``) keeps the gates near 1 at the start, so the state remembers over tens of
tokens rather than a few. The decay per key dimension is what the kernels sum in log space
within 16-step sub-chunks (:mod:`zoo.attention.kernels.decay`).

The output of each head is normalized (RMSNorm) and multiplied by a swish gate of the layer's
input, ``silu(x W_g)``, before the layer's output projection: the paper's
``LayerNorm(o) * swish(x W_r)`` as flash-linear-attention fuses it.

Widths and the convolution, as the paper and flash-linear-attention's ``GatedLinearAttention``
set them: the keys (and queries) half the block's width (``expand_k = 0.5``), the values its width
(``expand_v = 1``); a short causal convolution (kernel 4) on queries, keys and values with a SiLU
after it, on by default here as in Zoology's GLA, since associative recall depends on it
(flash-linear-attention's GLA has it off by default); ``conv_size=0`` turns it off, and queries,
keys and values then get no feature map, as in the paper.
"""

from __future__ import annotations

from typing import Any

import torch.nn.functional as F
from torch import Tensor, nn
from typing_extensions import Unpack

from zoo.attention.build.factory import register_attention_layer
from zoo.attention.modules.gating import HeadNorm
from zoo.attention.modules.recurrent import Recurrence, RecurrentLayer, RecurrentOptions

__all__ = ["GatedLinearAttention"]


@register_attention_layer("gla", aliases=("gated_linear_attention",))
class GatedLinearAttention(RecurrentLayer):
    """Gated linear attention (see the module docstring).

    Args:
        embed_dim: The block's width: what the gates are projected from.
        num_heads: Heads.
        expand_k: The query and key width, in multiples of ``embed_dim`` (the paper's 0.5).
        expand_v: The value width, in multiples of ``embed_dim``.
        gate_rank: Rank of the decay gate's projection (the paper's 16).
        gate_normalizer: What the gate's log-sigmoid is divided by (the paper's 16).
        options: :class:`~zoo.attention.modules.recurrent.RecurrentLayer`'s (``conv_size`` 4).

    Parameters of its own: ``decay_gate`` (``embed_dim -> gate_rank -> key width``, a bias on the
    second), the decay per key dimension; ``gate`` (``embed_dim -> value width``, no bias), the
    swish output gate; ``norm``, the per-head RMSNorm's scale.
    """

    #: SiLU after the convolution only, as flash-linear-attention's GLA
    silu = "convolved"

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        *,
        expand_k: float = 0.5,
        expand_v: float = 1.0,
        gate_rank: int = 16,
        gate_normalizer: float = 16.0,
        **options: Unpack[RecurrentOptions],
    ) -> None:
        key_dim, value_dim = int(embed_dim * expand_k), int(embed_dim * expand_v)
        super().__init__(embed_dim, num_heads, key_dim=key_dim, value_dim=value_dim, **options)
        self.require_positive(gate_rank=gate_rank)
        if gate_normalizer <= 0:
            raise ValueError(f"GatedLinearAttention: gate_normalizer must be positive, got {gate_normalizer}.")
        self.gate_normalizer = gate_normalizer
        self.decay_gate = nn.Sequential(nn.Linear(embed_dim, gate_rank, bias=False), nn.Linear(gate_rank, key_dim))
        self.gate = nn.Linear(embed_dim, value_dim, bias=False)
        self.norm = HeadNorm(self.head_dim)

    @classmethod
    def legacy_layout(cls, embed_dim: int, num_heads: int) -> dict[str, Any]:
        """Before it was a layer, GLA's keys were the block's width and it had no convolution."""
        return {**super().legacy_layout(embed_dim, num_heads), "expand_k": 1.0}

    def prepare(self, queries: Tensor, keys: Tensor, values: Tensor, layer_input: Tensor) -> Recurrence:
        logits = self.split_heads(self.decay_gate(layer_input)).to(queries.dtype)  # (B, H, T, dk)
        log_decay = F.logsigmoid(logits) / self.gate_normalizer
        return Recurrence(queries * self.key_head_dim**-0.5, keys, values, log_decay)

    def finish(self, output: Tensor, layer_input: Tensor) -> Tensor:
        return self.norm(output, self.split_heads(self.gate(layer_input)))
