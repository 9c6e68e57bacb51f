"""transformers' ``Qwen3_5GatedDeltaNet`` (``models/qwen3_5/modeling_qwen3_5.py``) and the zoo's
``gated_deltanet`` with ``num_key_heads`` and ``expand_k``, weight for weight.

Qwen3.5's gated delta net computes what Qwen3-Next's does (the equations, where the zoo differs
and what is refused: :mod:`~zoo.integrations.hf_layers.gated_deltanet`) at other sizes and with
another layout. Sizes: 16 key heads of 128 and 32 value heads of 128 beside a hidden size of 4096
(``Qwen3_5TextConfig``'s defaults, Qwen3.5-9B), so the keys are half the hidden size
(``expand_k`` 1/2) and each key head serves two value heads. Layout: the projections are
separate and laid out by kind, not by key head: ``in_proj_qkv`` holds every query row, then every
key row, then every value row (value heads in order, head ``h`` reading key head ``h // group``,
the zoo's order); ``in_proj_z``, ``in_proj_b`` and ``in_proj_a`` are the zoo's ``gate``, ``beta``
and ``decay.proj`` as they are; ``conv1d`` runs over the query, key and value channels in that
order. The map splits the two fused tensors by rows and renames the rest.
"""

from __future__ import annotations

from typing import Any

from zoo.attention.variants.deltanet import GatedDeltaNetAttention
from zoo.integrations.hf_layers.gated_deltanet import gated_deltanet_layer, renamed
from zoo.integrations.hf_layers.state_maps import Fused, LayerPair, fused_conv

__all__ = ["qwen3_5_gated_deltanet_layer", "qwen3_5_gated_deltanet_pair"]


def qwen3_5_gated_deltanet_layer(config: Any, **options: Any) -> GatedDeltaNetAttention:
    """The zoo's ``gated_deltanet`` with a ``Qwen3_5TextConfig``'s linear-attention sizes and its norm's
    epsilon (``options``: the zoo's ``mode``, ``chunk_size``)."""
    return gated_deltanet_layer("Qwen3_5TextConfig", config, config.rms_norm_eps, **options)


def qwen3_5_gated_deltanet_pair(config: Any) -> LayerPair:
    """``Qwen3_5GatedDeltaNet``'s state dict and the zoo's ``gated_deltanet``'s."""
    key_width = config.linear_num_key_heads * config.linear_key_head_dim
    value_width = config.linear_num_value_heads * config.linear_value_head_dim
    qkv = (("q_proj.weight", key_width), ("k_proj.weight", key_width), ("v_proj.weight", value_width))
    channels = (("q_conv", key_width), ("k_conv", key_width), ("v_conv", value_width))
    separate = (("in_proj_z.weight", "gate.weight"), ("in_proj_b.weight", "beta.weight"))
    return LayerPair(
        "Qwen3_5GatedDeltaNet",
        (Fused("in_proj_qkv.weight", qkv),) + fused_conv("conv1d", channels, bias=False),
        separate + (("in_proj_a.weight", "decay.proj.weight"),) + renamed(),
    )
