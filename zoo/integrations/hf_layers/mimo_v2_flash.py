"""transformers' ``MiMoV2FlashAttention`` (``models/mimo_v2_flash/modeling_mimo_v2_flash.py``) and the
zoo's ``softmax`` with ``head_dim``, ``v_head_dim``, ``value_scale`` and, on the sliding layers,
``sinks`` and ``window``, weight for weight.

MiMo-V2-Flash's attention (hidden size 4096): 64 query heads whose queries and keys have ``d`` = 192
features and whose values have ``d_v`` = 128, no biases. Per head, with ``c`` the config's
``attention_value_scale`` (0.707, about ``sqrt(4096 / (64 * 128))``):

    z_ij = q_i . k_j / sqrt(d),    o_i = sum_j a_ij (c v_j),    out_i = W_o [o_i^1; ...; o_i^H]

The first ``int(0.334 d)`` features of each query and key (64 of 192) are rotated
(``partial_rotary_factor``). ``layer_types`` marks the first layer and every sixth full, the others
sliding, and the two kinds differ in four ways:

* full layers: 4 key/value heads, every earlier key, rotary base 5,000,000, ``a_ij`` the plain
  softmax over ``j``;
* sliding layers: 8 key/value heads, keys ``i - W + 1 .. i`` for ``sliding_window`` ``W`` (129: the
  reference SGLang code's 128 previous tokens plus the query), rotary base 10,000, and a learned sink
  logit ``s_h`` per head in the denominator only, ``a_ij = exp(z_ij) / (exp(s_h) + sum_l exp(z_il))``.

The zoo's ``softmax`` computes each term: ``v_head_dim`` ``d_v``, ``value_scale`` ``c`` (values
scaled after the projection, as transformers does, so the cache holds scaled values on both sides),
``sinks`` and ``window`` with ``sink_tokens`` 0 (the same rule as transformers' sliding mask). The
layer's place in the model picks its kind, so the builder takes ``layer_index``. The map renames
every tensor (``o_proj`` is the zoo's ``out_proj``; ``sinks`` exist on sliding layers only).

Rotation: :func:`~zoo.integrations.hf_layers.rope.hf_rotary` on the layer type's
``rope_parameters``. Where a ``"default"`` type's dict lacks ``partial_rotary_factor``, transformers'
MiMo rotary module reads 0.334 (not 1.0, as its other rope types and families do); the zoo reads the
same (:data:`DEFAULT_FRACTION`).

Refused in one line: ``attention_bias`` (biased query, key and value projections beside an unbiased
output projection; the zoo's ``bias`` is all four or none).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from zoo.attention.variants.softmax import SoftmaxAttention
from zoo.integrations.hf_layers.rope import hf_rope_parameters, hf_rotary
from zoo.integrations.hf_layers.state_maps import LayerPair, refuse
from zoo.positions.rotary import RotaryEmbedding

__all__ = ["DEFAULT_FRACTION", "mimo_v2_flash_layer", "mimo_v2_flash_pair"]

NAME = "MiMoV2FlashConfig"

#: the rotated share transformers' MiMo rotary module reads where a default type's dict has none
DEFAULT_FRACTION = 0.334


def _sliding(config: Any, layer_index: int) -> bool:
    return config.layer_types[layer_index] == "sliding_attention"


def _mimo_v2_flash_problem(config: Any) -> str | None:
    if config.attention_bias:
        return "attention_bias (biased query, key and value projections beside an unbiased output projection)"
    return None


def _rotary(config: Any, layer_type: str) -> RotaryEmbedding:
    """The rotation of ``layer_type``, with MiMo's own fraction where a default dict names none."""
    parameters = hf_rope_parameters(config, layer_type)
    if parameters.get("rope_type", "default") == "default":
        parameters.setdefault("partial_rotary_factor", DEFAULT_FRACTION)
    view = SimpleNamespace(
        rope_parameters=dict(config.rope_parameters) | {layer_type: parameters},
        max_position_embeddings=config.max_position_embeddings,
    )
    return hf_rotary(NAME, view, config.head_dim, layer_type)


def mimo_v2_flash_layer(config: Any, *, layer_index: int, **options: Any) -> SoftmaxAttention:
    """The zoo's softmax attention at a ``MiMoV2FlashConfig``'s sizes, value scale and rotation, with
    the key/value heads, window and sinks of layer ``layer_index``'s type."""
    refuse(NAME, _mimo_v2_flash_problem(config))
    sliding = _sliding(config, layer_index)
    return SoftmaxAttention(
        config.hidden_size, config.num_attention_heads, num_kv_heads=config.num_key_value_heads * (2 if sliding else 1),
        head_dim=config.head_dim, v_head_dim=config.v_head_dim, value_scale=config.attention_value_scale,
        sinks=sliding, window=config.sliding_window if sliding else None, sink_tokens=0, bias=False,
        dropout=config.attention_dropout, position=_rotary(config, config.layer_types[layer_index]), **options,
    )  # fmt: skip


def mimo_v2_flash_pair(config: Any, *, layer_index: int) -> LayerPair:
    """``MiMoV2FlashAttention``'s state dict and the zoo's softmax attention's (sinks on sliding layers)."""
    names = (("q_proj", "q_proj"), ("k_proj", "k_proj"), ("v_proj", "v_proj"), ("o_proj", "out_proj"))
    sinks = (("sinks", "sinks"),) if _sliding(config, layer_index) else ()
    return LayerPair("MiMoV2FlashAttention", (), tuple((f"{hf}.weight", f"{zoo}.weight") for hf, zoo in names) + sinks)
