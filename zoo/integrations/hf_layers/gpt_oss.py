"""transformers' ``GptOssAttention`` (``models/gpt_oss/modeling_gpt_oss.py``) and the zoo's
``sink_attention`` with ``head_dim`` (and ``window`` on the sliding layers), weight for weight.

gpt-oss's attention: 64 query heads of 64 beside a hidden size of 2880, 8 key/value heads, biased
projections, a learned sink logit per head in the softmax's denominator
(``a_ij = exp(z_ij) / (exp(s_h) + sum_l exp(z_il))``), and on the layers ``layer_types`` marks
``sliding_attention`` a window of ``sliding_window`` (128) positions, query ``i`` seeing keys
``i - 127 .. i``: the zoo's ``window`` with ``sink_tokens`` 0, the same rule. The map renames every
tensor. The layer's place in the model picks the window, so the builder takes ``layer_index``.

gpt-oss's checkpoints rotate with YaRN (``rope_type`` ``"yarn"``, factor 32 over an original 4,096
positions, ``beta_fast`` 32, ``beta_slow`` 1, ``truncate`` false): the zoo's ``rope`` with the same
scaling rule (:func:`~zoo.integrations.hf_layers.rope.hf_rotary`). Dropout, biases and the sinks'
softmax are the same.
"""

from __future__ import annotations

from typing import Any

from zoo.attention.variants.softmax_recipes import SinkAttention
from zoo.integrations.hf_layers.rope import hf_rotary
from zoo.integrations.hf_layers.state_maps import LayerPair

__all__ = ["gpt_oss_layer", "gpt_oss_pair"]


def gpt_oss_layer(config: Any, *, layer_index: int, **options: Any) -> SinkAttention:
    """The zoo's sink attention at a ``GptOssConfig``'s sizes and rotation, with its window on a
    sliding layer ``layer_index``."""
    sliding = config.layer_types[layer_index] == "sliding_attention"
    return SinkAttention(
        config.hidden_size, config.num_attention_heads, num_kv_heads=config.num_key_value_heads,
        head_dim=config.head_dim, bias=config.attention_bias, window=config.sliding_window if sliding else None,
        position=hf_rotary("GptOssConfig", config, config.head_dim), **options,
    )  # fmt: skip


def gpt_oss_pair(config: Any, *, layer_index: int) -> LayerPair:
    """``GptOssAttention``'s state dict and the zoo's sink attention's (the same at every layer)."""
    del layer_index  # the window has no weights
    biases = ("weight", "bias") if config.attention_bias else ("weight",)
    names = (("q_proj", "q_proj"), ("k_proj", "k_proj"), ("v_proj", "v_proj"), ("o_proj", "out_proj"))
    return LayerPair(
        "GptOssAttention",
        (),
        tuple((f"{hf}.{s}", f"{zoo}.{s}") for hf, zoo in names for s in biases) + (("sinks", "sinks"),),
    )
