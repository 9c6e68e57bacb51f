"""transformers' ``Qwen3Attention`` (``models/qwen3/modeling_qwen3.py``) and the zoo's ``qk_norm``
with ``head_dim`` (and ``window`` on a sliding layer), weight for weight.

Qwen3's attention: query heads of ``head_dim`` (128, wider than ``hidden_size / num_attention_heads``
in the small models: 16 heads of 128 beside 1024), grouped key/value heads, RMSNorm with plain
scales ``w`` on each head's queries and keys before the full rotation (base ``rope_theta``), no
biases by default. The map renames every tensor (``o_proj`` is the zoo's ``out_proj``); the
norms' epsilon is set to ``rms_norm_eps``.

A sliding layer (``use_sliding_window``, which Qwen3's released models leave off, and a layer at or
past ``max_window_layers``, which ``layer_types`` marks ``sliding_attention``): query ``i`` sees keys
``i - W + 1 .. i`` for ``sliding_window`` ``W``, the zoo's ``window`` with ``sink_tokens`` 0. The
layer's place in the model picks the window, so the builder takes ``layer_index``.
"""

from __future__ import annotations

from typing import Any

from zoo.attention.variants.softmax_recipes import QKNormAttention
from zoo.integrations.hf_layers.rope import hf_rotary
from zoo.integrations.hf_layers.state_maps import LayerPair

__all__ = ["qwen3_layer", "qwen3_pair"]


def qwen3_layer(config: Any, *, layer_index: int, **options: Any) -> QKNormAttention:
    """The zoo's QK-norm attention at a ``Qwen3Config``'s sizes, rotation and epsilon, with its
    window on a sliding layer ``layer_index``."""
    sliding = config.layer_types[layer_index] == "sliding_attention"
    layer = QKNormAttention(
        config.hidden_size, config.num_attention_heads, num_kv_heads=config.num_key_value_heads,
        head_dim=config.head_dim, bias=config.attention_bias,
        window=config.sliding_window if sliding else None, sink_tokens=0,
        position=hf_rotary("Qwen3Config", config, config.head_dim), **options,
    )  # fmt: skip
    layer.q_norm.eps = layer.k_norm.eps = config.rms_norm_eps
    return layer


def qwen3_pair(config: Any, *, layer_index: int) -> LayerPair:
    """``Qwen3Attention``'s state dict and the zoo's QK-norm attention's (the same at every layer)."""
    del layer_index  # the window has no weights
    biases = ("weight", "bias") if config.attention_bias else ("weight",)
    names = (("q_proj", "q_proj"), ("k_proj", "k_proj"), ("v_proj", "v_proj"), ("o_proj", "out_proj"))
    renamed = tuple((f"{hf}.{s}", f"{zoo}.{s}") for hf, zoo in names for s in biases)
    return LayerPair(
        "Qwen3Attention", (), renamed + (("q_norm.weight", "q_norm.weight"), ("k_norm.weight", "k_norm.weight"))
    )
