"""transformers' ``Gemma4TextAttention`` (``models/gemma4/modeling_gemma4.py``) and the zoo's ``qk_norm``
with ``head_dim``, ``scale``, ``v_norm``, ``window`` on the sliding layers and ``values="keys"`` on
the global ones, weight for weight.

Gemma 4's text attention, per head, for the layer's input ``x_i``:
``q_i = rot_i(RMSNorm_q(W_q x_i))``, ``k_j = rot_j(RMSNorm_k(W_k x_j))``, ``v_j = RMSNorm(W_v x_j)``
(no learned scale on the values' norm), ``o_i = sum_j softmax_j(q_i . k_j) v_j``: the scores are
not scaled (``scaling`` 1.0: the zoo's ``scale=1.0``), the queries' and keys' norms bound them.
The norms scale by ``w`` (not Gemma 3's ``1 + w``), so every tensor maps by name alone
(``o_proj`` is the zoo's ``out_proj``); their epsilon is ``rms_norm_eps``. transformers' norm
multiplies by ``(mean + eps) ** -0.5`` in float32 and casts back; the zoo's ``nn.RMSNorm`` in the
input's dtype: the same in float32, to rounding.

The two layer types (``layer_types``: five sliding layers to one global in the 31B model) differ
in more than the window. A sliding layer sees keys ``i - W + 1 .. i`` (``sliding_window`` ``W``,
1024 in 31B; the zoo's ``window`` with ``sink_tokens`` 0) and rotates every feature at base
10,000. A global layer sees every earlier key; its shape is its ``per_layer_config`` entry (31B:
heads of 512 and 4 key/value heads beside 256 and 16 on the sliding layers), and it rotates the
first quarter of the frequencies at base 1,000,000 (``rope_type`` ``"proportional"``,
``partial_rotary_factor`` 0.25: the zoo's ``partial="proportional"``, read by
:func:`~zoo.integrations.hf_layers.rope.hf_rotary`). With ``attention_k_eq_v`` a global layer has
no ``v_proj``: its values are the key projection's output before the keys' norm and rotation,
``v_j = RMSNorm(W_k x_j)`` (the zoo's ``values="keys"`` with ``v_norm``). The layer's place in the
model picks all of this, so the builder takes ``layer_index``.

KV sharing (``num_kv_shared_layers``: the last 20 of E2B's 35 layers): a ``"reuse"`` layer has only
``q_proj``, ``q_norm`` and ``o_proj`` and attends over the keys and values (after their norms and
rotation) that the last earlier layer of its type, its ``"store"`` layer, attended over
(``shared_kv_states``). It maps onto the zoo's layer with ``kv_source`` that layer's index, which
maps as any other and, given its ``layer_index``, hands its keys and values on through the forward's
:class:`~zoo.attention.contract.kv_sharing.KeyValueStore` (:mod:`~zoo.attention.variants.softmax_sharing`).
Every layer is built with its ``layer_index``, so a stack of the zoo's layers shares as transformers' does.

``use_bidirectional_attention="vision"`` lets image tokens see each other, a mask the model builds;
on text the layer is causal, as the zoo's. Refused in one line: ``use_bidirectional_attention="all"``
(the zoo's layer is built causal here, and transformers then halves the window), and a config whose
every layer reuses (``num_kv_shared_layers == num_hidden_layers``: no layer computes keys and values).
"""

from __future__ import annotations

from typing import Any

from zoo.attention.variants.softmax_recipes import QKNormAttention
from zoo.integrations.hf_layers.rope import hf_rotary
from zoo.integrations.hf_layers.state_maps import LayerPair, refuse

__all__ = ["gemma4_layer", "gemma4_pair"]

NAME = "Gemma4TextConfig"


def _gemma4_problem(config: Any, layer_index: int) -> str | None:
    if config.num_kv_shared_layers >= config.num_hidden_layers:
        return (
            f"num_kv_shared_layers {config.num_kv_shared_layers} of {config.num_hidden_layers} layers: every layer "
            "reuses keys and values no layer computes"
        )
    if config.use_bidirectional_attention == "all":
        return "use_bidirectional_attention 'all' (the layer is built causal)"
    return None


def _keys_are_values(config: Any, layer_index: int) -> bool:
    """Whether layer ``layer_index`` reads its key projection as its values (a global layer under
    ``attention_k_eq_v``)."""
    return bool(config.attention_k_eq_v) and config.layer_types[layer_index] != "sliding_attention"


def _kv_source(config: Any, layer_index: int) -> int | None:
    """The layer whose keys and values layer ``layer_index`` reuses (the last layer of its type
    before the shared ones, transformers' ``"store"`` layer); None for a layer that computes its own."""
    if config.kv_sharing_modes[layer_index] != "reuse":
        return None
    first_shared = config.num_hidden_layers - config.num_kv_shared_layers
    layer_type = config.layer_types[layer_index]
    return max(index for index in range(first_shared) if config.layer_types[index] == layer_type)


def gemma4_layer(config: Any, *, layer_index: int, **options: Any) -> QKNormAttention:
    """The zoo's QK-norm attention at the sizes of layer ``layer_index`` of a ``Gemma4TextConfig``,
    with its window, rotation and values (or its ``kv_source``), unscaled scores and the config's epsilon."""
    refuse(NAME, _gemma4_problem(config, layer_index))
    layer_type = config.layer_types[layer_index]
    shape = config.per_layer_config[layer_index]
    source = _kv_source(config, layer_index)
    values = {"v_norm": True, "values": "keys" if _keys_are_values(config, layer_index) else "projected"}
    layer = QKNormAttention(
        config.hidden_size, config.num_attention_heads, num_kv_heads=shape.num_key_value_heads,
        head_dim=shape.head_dim, bias=config.attention_bias, scale=1.0, **(values if source is None else {}),
        window=config.sliding_window if layer_type == "sliding_attention" else None, sink_tokens=0,
        position=hf_rotary(NAME, config, shape.head_dim, layer_type), kv_source=source, layer_index=layer_index,
        **options,
    )  # fmt: skip
    for norm in (layer.q_norm, layer.k_norm, layer.v_norm):
        if norm is not None:  # a reusing layer has the queries' norm only
            norm.eps = config.rms_norm_eps
    return layer


def gemma4_pair(config: Any, *, layer_index: int) -> LayerPair:
    """``Gemma4TextAttention``'s state dict and the zoo's QK-norm attention's at layer ``layer_index``
    (no value projection where the keys are the values; queries and output only on a reusing layer)."""
    refuse(NAME, _gemma4_problem(config, layer_index))
    suffixes = ("weight", "bias") if config.attention_bias else ("weight",)
    reuses = _kv_source(config, layer_index) is not None
    names = [("q_proj", "q_proj"), ("o_proj", "out_proj")] + ([] if reuses else [("k_proj", "k_proj")])
    if not reuses and not _keys_are_values(config, layer_index):
        names.append(("v_proj", "v_proj"))
    norms = (("q_norm.weight", "q_norm.weight"),) + (() if reuses else (("k_norm.weight", "k_norm.weight"),))
    return LayerPair(
        "Gemma4TextAttention", (), tuple((f"{hf}.{s}", f"{zoo}.{s}") for hf, zoo in names for s in suffixes) + norms
    )
