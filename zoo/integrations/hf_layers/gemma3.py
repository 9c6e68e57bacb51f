"""transformers' ``Gemma3Attention`` (``models/gemma3/modeling_gemma3.py``) and the zoo's ``qk_norm``
with ``head_dim``, ``scale`` and, on the sliding layers, ``window``, weight for weight.

Gemma 3's attention: query heads of ``head_dim`` over grouped key/value heads (Gemma 3 1B: 4 heads
of 256 and one key/value head beside a hidden size of 1152), no biases, RMSNorm on each head's
queries and keys scaled by ``1 + w`` (zero-centred weights) before the rotation, and scores
``q_i . k_j / sqrt(query_pre_attn_scalar)``: ``head_dim`` in the 1B, 4B and 12B models, 168 beside
heads of 128 in the 27B one (the zoo's ``scale``, set only where it differs from ``head_dim ** -0.5``).
Five layers of six (``layer_types``) are ``sliding_attention``: query ``i`` sees keys ``i - W + 1
.. i`` for ``sliding_window`` ``W`` (512 in 1B, 1024 above), the zoo's ``window`` with
``sink_tokens`` 0, and rotate with their own base (``rope_parameters["sliding_attention"]``,
10,000); the others attend to every earlier key and rotate with base 1,000,000. The layer's place
in the model picks both, so the builder takes ``layer_index``.

The map renames every tensor (``o_proj`` is the zoo's ``out_proj``); the zoo's QK-norm scales by
``w``, so its scale is transformers' plus one (:class:`~zoo.integrations.hf_layers.qwen3_next_attention.ShiftedPair`,
bit-exact both ways where ``w + 1`` is exact). The norms' epsilon is set to ``rms_norm_eps``.
transformers' norm multiplies in float32 and casts back; the zoo's ``nn.RMSNorm`` in the input's
dtype: the same in float32.

The global layers of the 4B, 12B and 27B models scale their positions linearly (``rope_type``
``"linear"``, factor 8; the 1B model has none): the zoo's ``rope`` with linear scaling.

Refused in one line: ``attn_logit_softcapping`` (Gemma 2's cap, which the zoo's softmax lacks;
transformers' Gemma 3 layer stores it but does not apply it, so either reading would be a guess);
``use_bidirectional_attention`` (the zoo's layer is causal here, and transformers then halves the
window).
"""

from __future__ import annotations

from typing import Any

from zoo.attention.variants.softmax_recipes import QKNormAttention
from zoo.integrations.hf_layers.qwen3_next_attention import ShiftedPair
from zoo.integrations.hf_layers.rope import hf_rotary
from zoo.integrations.hf_layers.state_maps import refuse

__all__ = ["gemma3_layer", "gemma3_pair"]

NAME = "Gemma3TextConfig"


def _gemma3_problem(config: Any) -> str | None:
    if config.attn_logit_softcapping is not None:
        return f"attn_logit_softcapping {config.attn_logit_softcapping} (a cap on the scores)"
    if config.use_bidirectional_attention:
        return "use_bidirectional_attention (the layer is built causal)"
    return None


def gemma3_layer(config: Any, *, layer_index: int, **options: Any) -> QKNormAttention:
    """The zoo's QK-norm attention at a ``Gemma3TextConfig``'s sizes, scale and epsilon, with the
    window and rotation of layer ``layer_index``."""
    refuse(NAME, _gemma3_problem(config))
    layer_type = config.layer_types[layer_index]
    head_dim, scalar = config.head_dim, config.query_pre_attn_scalar
    layer = QKNormAttention(
        config.hidden_size, config.num_attention_heads, num_kv_heads=config.num_key_value_heads,
        head_dim=head_dim, bias=config.attention_bias,
        window=config.sliding_window if layer_type == "sliding_attention" else None, sink_tokens=0,
        scale=None if scalar == head_dim else scalar**-0.5,
        position=hf_rotary(NAME, config, head_dim, layer_type), **options,
    )  # fmt: skip
    layer.q_norm.eps = layer.k_norm.eps = config.rms_norm_eps
    return layer


def gemma3_pair(config: Any, *, layer_index: int) -> ShiftedPair:
    """``Gemma3Attention``'s state dict and the zoo's QK-norm attention's (the same at every layer)."""
    del layer_index  # the window and the rotation have no weights
    biases = ("weight", "bias") if config.attention_bias else ("weight",)
    names = (("q_proj", "q_proj"), ("k_proj", "k_proj"), ("v_proj", "v_proj"), ("o_proj", "out_proj"))
    norms = (("q_norm.weight", "q_norm.weight"), ("k_norm.weight", "k_norm.weight"))
    return ShiftedPair(
        "Gemma3Attention",
        (),
        tuple((f"{hf}.{s}", f"{zoo}.{s}") for hf, zoo in names for s in biases) + norms,
        shifted=("q_norm.weight", "k_norm.weight"),
    )
