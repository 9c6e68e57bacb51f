"""transformers' ``Qwen3NextGatedDeltaNet`` (``models/qwen3_next/modeling_qwen3_next.py``) and the zoo's
``gated_deltanet`` with ``num_key_heads``, weight for weight.

transformers' ``in_proj_qkvz`` holds, per key head, its query, its key, then the values and output
gates of its ``num_v_heads / num_k_heads`` value heads; its ``in_proj_ba`` per key head the write
strengths then the decays' inputs of those value heads. The zoo's ``q_proj``, ``k_proj``,
``v_proj``, ``gate``, ``beta``, ``decay.proj`` are those rows regrouped by kind, value heads in the
same order (head ``h`` reads key head ``h // group``).

Where the zoo differs: its per-head norm takes epsilon 1e-5 where Qwen3-Next's ``rms_norm_eps`` is
1e-6, so the builder sets the built layer's ``norm.eps`` to the config's (an attribute, not a
constructor argument: a zoo checkpoint does not record it). transformers (as fla) L2-normalizes
queries and keys by ``rsqrt(|x|^2 + 1e-6)``, the zoo by ``1 / max(|x|, 1e-12)``: a relative
difference of ``5e-7 / |x|^2``, float32's rounding at the norms the convolved projections have.
Refused in one line: a key width other than the hidden size (the zoo's keys are ``embed_dim``
wide), a value width that ``expand_v`` cannot state, an activation other than SiLU.
"""

from __future__ import annotations

from typing import Any

from zoo.attention.variants.deltanet import GatedDeltaNetAttention
from zoo.integrations.hf_layers.state_maps import Fused, LayerPair, fused_conv, refuse

__all__ = ["qwen3_next_gated_deltanet_layer", "qwen3_next_gated_deltanet_pair"]


def _qwen3_next_problem(config: Any) -> str | None:
    key_width = config.linear_num_key_heads * config.linear_key_head_dim
    value_width = config.linear_num_value_heads * config.linear_value_head_dim
    if key_width != config.hidden_size:
        return f"a key width of {key_width} beside hidden_size {config.hidden_size} (the zoo's keys are as wide)"
    if config.linear_num_value_heads % config.linear_num_key_heads:
        return "linear_num_value_heads not a multiple of linear_num_key_heads"
    if int(config.hidden_size * (value_width / config.hidden_size)) != value_width:
        return f"a value width of {value_width} that expand_v cannot state"
    if config.hidden_act != "silu":
        return f"hidden_act {config.hidden_act!r} after the convolution (the zoo's is silu)"
    return None


def qwen3_next_gated_deltanet_layer(config: Any, **options: Any) -> GatedDeltaNetAttention:
    """The zoo's ``gated_deltanet`` with a ``Qwen3NextConfig``'s linear-attention sizes and its norm's
    epsilon (see the module docstring; ``options``: the zoo's ``mode``, ``chunk_size``)."""
    refuse("Qwen3NextConfig", _qwen3_next_problem(config))
    value_width = config.linear_num_value_heads * config.linear_value_head_dim
    layer = GatedDeltaNetAttention(
        config.hidden_size, config.linear_num_value_heads, expand_v=value_width / config.hidden_size,
        num_key_heads=config.linear_num_key_heads, conv_size=config.linear_conv_kernel_dim, bias=False, **options,
    )  # fmt: skip
    layer.norm.eps = config.rms_norm_eps
    return layer


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
        (
            ("dt_bias", "decay.dt_bias"), ("A_log", "decay.A_log"), ("norm.weight", "norm.weight"),
            ("out_proj.weight", "out_proj.weight"),
        ),
    )  # fmt: skip
