"""transformers' ``Qwen3NextGatedDeltaNet`` (``models/qwen3_next/modeling_qwen3_next.py``) and the zoo's
``gated_deltanet`` with ``num_key_heads``, weight for weight.

transformers' ``in_proj_qkvz`` holds, per key head, its query, its key, then the values and output
gates of its ``num_v_heads / num_k_heads`` value heads; its ``in_proj_ba`` per key head the write
strengths then the decays' inputs of those value heads. The zoo's ``q_proj``, ``k_proj``,
``v_proj``, ``gate``, ``beta``, ``decay.proj`` are those rows regrouped by kind, value heads in the
same order (head ``h`` reads key head ``h // group``). What the layer computes, where the zoo
differs and what is refused: :mod:`~zoo.integrations.hf_layers.gated_deltanet`, shared with Qwen3.5.
"""

from __future__ import annotations

from typing import Any

from zoo.attention.variants.deltanet import GatedDeltaNetAttention
from zoo.integrations.hf_layers.gated_deltanet import gated_deltanet_layer, renamed
from zoo.integrations.hf_layers.state_maps import Fused, LayerPair, fused_conv

__all__ = ["qwen3_next_gated_deltanet_layer", "qwen3_next_gated_deltanet_pair"]


def qwen3_next_gated_deltanet_layer(config: Any, **options: Any) -> GatedDeltaNetAttention:
    """The zoo's ``gated_deltanet`` with a ``Qwen3NextConfig``'s linear-attention sizes and its norm's
    epsilon (``options``: the zoo's ``mode``, ``chunk_size``)."""
    return gated_deltanet_layer("Qwen3NextConfig", config, config.rms_norm_eps, **options)


def qwen3_next_gated_deltanet_pair(config: Any) -> LayerPair:
    """``Qwen3NextGatedDeltaNet``'s state dict and the zoo's ``gated_deltanet``'s (with ``num_key_heads``)."""
    heads, key_dim = config.linear_num_key_heads, config.linear_key_head_dim
    group = config.linear_num_value_heads // heads
    group_values = group * config.linear_value_head_dim
    value_width = heads * group_values
    qkvz = (("q_proj.weight", key_dim), ("k_proj.weight", key_dim), ("v_proj.weight", group_values))
    channels = (("q_conv", heads * key_dim), ("k_conv", heads * key_dim), ("v_conv", value_width))
    return LayerPair(
        "Qwen3NextGatedDeltaNet",
        (
            Fused("in_proj_qkvz.weight", (*qkvz, ("gate.weight", group_values)), groups=heads),
            Fused("in_proj_ba.weight", (("beta.weight", group), ("decay.proj.weight", group)), groups=heads),
        )
        + fused_conv("conv1d", channels, bias=False),
        renamed(),
    )
