"""transformers' ``DeepseekV32Attention`` (``models/deepseek_v32/modeling_deepseek_v32.py``) and the
zoo's ``dsa``, weight for weight.

DeepSeek-V3.2's attention is DeepSeek-V3's multi-head latent attention (the map of
:mod:`zoo.integrations.hf_layers.deepseek_v3`: ``q_a_proj``, ``q_a_layernorm``, ``q_b_proj``,
``kv_a_proj_with_mqa``, ``kv_a_layernorm``, ``kv_b_proj``, ``o_proj`` as the zoo's ``q_down``,
``q_norm``, ``q_up``, ``kv_down``, ``kv_norm``, ``kv_up``, ``out_proj``) with a lightning indexer
whose top ``index_topk`` keys per query the softmax is restricted to: its ``wq_b`` (on the
normalized query latent), ``wk`` and ``k_norm`` (one LayerNorm'd key per token) and
``weights_proj`` are the zoo's ``indexer.q_proj``, ``indexer.k_proj``, ``indexer.k_norm`` and
``indexer.weights_proj``; ``index_n_heads``, ``index_head_dim`` and ``index_topk`` the zoo's
``index_heads``, ``index_head_dim`` and ``index_topk``.

The rotation: transformers' V3.2 attention always rotates MLA's rotary features as adjacent pairs
(``apply_rotary_pos_emb_interleave``, whatever ``rope_interleave`` says), so the rotary rows of
``q_b_proj`` and ``kv_a_proj_with_mqa`` are reordered as DeepSeek-V3's map does; the indexer's
leading ``qk_rope_head_dim`` features are rotated as halves on both sides, so its rows are taken as
they are.

Where the two may differ: transformers' ``topk`` leaves ties in the indexer's scores to the kernel,
the zoo gives them to the earlier key; ReLU makes exact ties (zeros) possible, so a query whose
``index_topk``-th score is tied can attend to other, equally scored, keys.

Refused in one line: what DeepSeek-V3's map refuses (biases, a ``rope_type`` other than the
default, fewer key/value heads than query heads). ``DeepseekV32Config`` requires a ``q_lora_rank``
(its attention has no uncompressed query), so the index queries are read from the query latent,
as the zoo's layer does with one.
"""

from __future__ import annotations

from typing import Any

from zoo.attention.variants.dsa import DeepSeekSparseAttention
from zoo.integrations.hf_layers.deepseek_v3 import RotaryRowOrder
from zoo.integrations.hf_layers.state_maps import LayerPair, refuse

__all__ = ["deepseek_v32_layer", "deepseek_v32_pair"]

NAME = "DeepseekV32Config"


def deepseek_v32_layer(config: Any, **options: Any) -> DeepSeekSparseAttention:
    """The zoo's DSA at a ``DeepseekV32Config``'s sizes, rotation base, epsilon and indexer."""
    rope_type = dict(config.rope_parameters or {}).get("rope_type", "default")
    refuse(NAME, "attention_bias" if config.attention_bias else None)
    refuse(NAME, None if rope_type == "default" else f"rope_type {rope_type!r} (the zoo's MLA rotates by the default)")
    heads = config.num_attention_heads
    refuse(NAME, None if config.num_key_value_heads == heads else "num_key_value_heads below num_attention_heads")
    layer = DeepSeekSparseAttention(
        config.hidden_size, heads, kv_lora_rank=config.kv_lora_rank, q_lora_rank=config.q_lora_rank,
        qk_nope_head_dim=config.qk_nope_head_dim, qk_rope_head_dim=config.qk_rope_head_dim,
        v_head_dim=config.v_head_dim, rope_base=config.rope_parameters["rope_theta"],
        index_topk=config.index_topk, index_heads=config.index_n_heads, index_head_dim=config.index_head_dim,
        **options,
    )  # fmt: skip
    layer.kv_norm.eps = layer.q_norm.eps = config.rms_norm_eps
    return layer


def deepseek_v32_pair(config: Any) -> RotaryRowOrder:
    """``DeepseekV32Attention``'s state dict and the zoo's DSA's."""
    renamed = (
        ("q_a_proj.weight", "q_down.weight"),
        ("q_a_layernorm.weight", "q_norm.weight"),
        ("q_b_proj.weight", "q_up.weight"),
        ("kv_a_proj_with_mqa.weight", "kv_down.weight"),
        ("kv_a_layernorm.weight", "kv_norm.weight"),
        ("kv_b_proj.weight", "kv_up.weight"),
        ("o_proj.weight", "out_proj.weight"),
        ("indexer.wq_b.weight", "indexer.q_proj.weight"),
        ("indexer.wk.weight", "indexer.k_proj.weight"),
        ("indexer.k_norm.weight", "indexer.k_norm.weight"),
        ("indexer.k_norm.bias", "indexer.k_norm.bias"),
        ("indexer.weights_proj.weight", "indexer.weights_proj.weight"),
    )
    rope = config.qk_rope_head_dim
    rows = (("q_up.weight", config.qk_nope_head_dim + rope), ("kv_down.weight", config.kv_lora_rank + rope))
    return RotaryRowOrder(LayerPair("DeepseekV32Attention", (), renamed), rows, rope)
