"""transformers' ``Qwen3NextAttention`` (``models/qwen3_next/modeling_qwen3_next.py``) and the zoo's
``{name: gated_attention, qk_norm: true}`` with ``head_dim``, weight for weight.

Qwen3-Next's full-attention layer: ``H`` query heads of ``head_dim`` (16 of 256 beside a hidden size
of 2048) over ``num_key_value_heads`` key/value heads, QK-norm, an elementwise sigmoid gate on the
heads' outputs (Qiu et al., 2025) and rotary positions on the first quarter of each head
(``partial_rotary_factor`` 0.25, base ``rope_theta``), no biases.

The map: transformers' ``q_proj`` holds, per head, its query rows then its gate rows; the zoo's
``q_proj`` and ``gate_proj`` are those rows regrouped by kind. Its QK-norms scale by ``1 + w``
(zero-centred weights, initialized at 0), the zoo's ``nn.RMSNorm`` by ``w``: the zoo's scale is
transformers' plus one (:class:`ShiftedPair`): a round trip is bit-exact for scales whose shift by
one is exact in their dtype (the tests put them on a grid of 2^-6), else exact to the rounding of
``w + 1``. The norms' epsilon is set to ``rms_norm_eps``; the rotary scheme
is :func:`~zoo.integrations.hf_layers.rope.hf_rotary`'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from torch import Tensor

from zoo.attention.variants.softmax_recipes import GatedAttention
from zoo.integrations.hf_layers.rope import hf_rotary
from zoo.integrations.hf_layers.state_maps import Fused, LayerPair

__all__ = ["ShiftedPair", "qwen3_next_attention_layer", "qwen3_next_attention_pair"]


@dataclass(frozen=True)
class ShiftedPair(LayerPair):
    """A :class:`LayerPair` whose ``shifted`` zoo tensors are transformers' plus one (zero-centred
    norm scales ``1 + w`` as plain scales)."""

    shifted: tuple[str, ...] = ()

    def to_zoo(self, hf_state: Mapping[str, Tensor]) -> dict[str, Tensor]:
        state = super().to_zoo(hf_state)
        return state | {name: state[name] + 1 for name in self.shifted}

    def from_zoo(self, zoo_state: Mapping[str, Tensor]) -> dict[str, Tensor]:
        return super().from_zoo({**zoo_state, **{name: zoo_state[name] - 1 for name in self.shifted}})


def qwen3_next_attention_layer(config: Any, **options: Any) -> GatedAttention:
    """The zoo's gated attention with QK-norm at a ``Qwen3NextConfig``'s sizes, rotation and epsilon."""
    layer = GatedAttention(
        config.hidden_size, config.num_attention_heads, qk_norm=True, num_kv_heads=config.num_key_value_heads,
        head_dim=config.head_dim, bias=config.attention_bias,
        position=hf_rotary("Qwen3NextConfig", config, config.head_dim), **options,
    )  # fmt: skip
    layer.q_norm.eps = layer.k_norm.eps = config.rms_norm_eps
    return layer


def qwen3_next_attention_pair(config: Any) -> ShiftedPair:
    """``Qwen3NextAttention``'s state dict and the zoo's gated attention's."""
    biases, width = (("weight", "bias") if config.attention_bias else ("weight",)), config.head_dim
    return ShiftedPair(
        "Qwen3NextAttention",
        tuple(
            Fused(f"q_proj.{s}", ((f"q_proj.{s}", width), (f"gate_proj.{s}", width)), groups=config.num_attention_heads)
            for s in biases
        ),
        tuple((f"{p}.{s}", f"{p}.{s}") for p in ("k_proj", "v_proj") for s in biases)
        + tuple((f"o_proj.{s}", f"out_proj.{s}") for s in biases)
        + (("q_norm.weight", "q_norm.weight"), ("k_norm.weight", "k_norm.weight")),
        shifted=("q_norm.weight", "k_norm.weight"),
    )
