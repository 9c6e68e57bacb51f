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

Rotary scaling (YaRN) and refusals as DeepSeek-V3's map (biases, a ``rope_type`` whose frequencies
change with the length read, fewer key/value heads than query heads). ``DeepseekV32Config`` requires a ``q_lora_rank``
(its attention has no uncompressed query), so the index queries are read from the query latent,
as the zoo's layer does with one.
"""

from __future__ import annotations

from typing import Any

from zoo.attention.variants.dsa import DeepSeekSparseAttention
from zoo.integrations.hf_layers.deepseek_v3 import RotaryRowOrder, latent_layer, latent_pair

__all__ = ["deepseek_v32_layer", "deepseek_v32_pair"]

NAME = "DeepseekV32Config"


def deepseek_v32_layer(config: Any, **options: Any) -> DeepSeekSparseAttention:
    """The zoo's DSA at a ``DeepseekV32Config``'s sizes, rotation base, epsilon and indexer."""
    indexer = {
        "index_topk": config.index_topk, "index_heads": config.index_n_heads, "index_head_dim": config.index_head_dim
    }  # fmt: skip
    return latent_layer(config, NAME, DeepSeekSparseAttention, **indexer, **options)


def deepseek_v32_pair(config: Any) -> RotaryRowOrder:
    """``DeepseekV32Attention``'s state dict and the zoo's DSA's: MLA's (transformers always rotates
    its main attention's pairs interleaved, so the rotary rows are reordered), then the indexer's."""
    indexer = (
        ("indexer.wq_b.weight", "indexer.q_proj.weight"),
        ("indexer.wk.weight", "indexer.k_proj.weight"),
        ("indexer.k_norm.weight", "indexer.k_norm.weight"),
        ("indexer.k_norm.bias", "indexer.k_norm.bias"),
        ("indexer.weights_proj.weight", "indexer.weights_proj.weight"),
    )
    return latent_pair(config, "DeepseekV32Attention", interleaved=True, more=indexer)
