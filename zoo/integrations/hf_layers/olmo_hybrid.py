"""transformers' ``OlmoHybridGatedDeltaNet`` (``models/olmo_hybrid/modeling_olmo_hybrid.py``, Olmo
Hybrid 7B's linear layers) and the zoo's ``gated_deltanet`` with ``expand_k`` and
``negative_eigenvalues``, weight for weight.

Olmo's hybrid gated delta net computes what Qwen3-Next's does (the equations, the L2
normalization's epsilon and what is refused: :mod:`~zoo.integrations.hf_layers.gated_deltanet`)
at other sizes, with another layout and two other settings. Sizes: ``OlmoHybridConfig``'s
defaults give 30 key and 30 value heads beside a hidden size of 3840, keys of ``0.75 * 3840 / 30``
(96, ``expand_k`` 3/4) and values twice as wide (192, ``expand_v`` 3/2). Layout: separate
``q_proj``, ``k_proj``, ``v_proj`` (the zoo's as they are), ``b_proj`` (``beta``), ``a_proj``
(``decay.proj``), ``g_proj`` (``gate``), ``o_norm`` (``norm``) and ``o_proj`` (``out_proj``); one
``conv1d`` over the query, key and value channels in that order, split by rows. Settings: with
``linear_allow_neg_eigval`` (on by default) the write strength is ``2 sigmoid(x_t w_b)``, the zoo's
``negative_eigenvalues``; the output norm's epsilon is 1e-5 whatever ``rms_norm_eps`` says (as
flash-linear-attention's fused gated norm), the zoo's default, which the builder sets all the same.
"""

from __future__ import annotations

from typing import Any

from zoo.attention.variants.deltanet import GatedDeltaNetAttention
from zoo.integrations.hf_layers.gated_deltanet import gated_deltanet_layer, renamed
from zoo.integrations.hf_layers.state_maps import LayerPair, fused_conv

__all__ = ["olmo_hybrid_gated_deltanet_layer", "olmo_hybrid_gated_deltanet_pair"]

#: the output norm's epsilon, fixed in transformers' layer
NORM_EPS = 1e-5


def olmo_hybrid_gated_deltanet_layer(config: Any, **options: Any) -> GatedDeltaNetAttention:
    """The zoo's ``gated_deltanet`` with an ``OlmoHybridConfig``'s linear-attention sizes and write
    range (``options``: the zoo's ``mode``, ``chunk_size``)."""
    return gated_deltanet_layer(
        "OlmoHybridConfig", config, NORM_EPS, negative_eigenvalues=config.linear_allow_neg_eigval, **options
    )


def olmo_hybrid_gated_deltanet_pair(config: Any) -> LayerPair:
    """``OlmoHybridGatedDeltaNet``'s state dict and the zoo's ``gated_deltanet``'s."""
    key_width = config.linear_num_key_heads * config.linear_key_head_dim
    value_width = config.linear_num_value_heads * config.linear_value_head_dim
    channels = (("q_conv", key_width), ("k_conv", key_width), ("v_conv", value_width))
    same = tuple((f"{p}.weight", f"{p}.weight") for p in ("q_proj", "k_proj", "v_proj"))
    projections = (
        ("b_proj.weight", "beta.weight"),
        ("a_proj.weight", "decay.proj.weight"),
        ("g_proj.weight", "gate.weight"),
    )
    return LayerPair(
        "OlmoHybridGatedDeltaNet",
        fused_conv("conv1d", channels, bias=False),
        same + projections + renamed(norm="o_norm", out="o_proj"),
    )
