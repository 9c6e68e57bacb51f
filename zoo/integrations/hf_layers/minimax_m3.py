"""transformers' ``MiniMaxM3VLAttention`` (``models/minimax_m3_vl/modeling_minimax_m3_vl.py``, the text
model of MiniMax-M3) and the zoo's ``msa`` on its ``"minimax_m3_sparse"`` layers, ``qk_norm`` on its
``"full_attention"`` ones, weight for weight.

MiniMax-M3's attention: 64 query heads of 128 over 4 key-value heads beside a hidden size of 6144,
no biases, an RMSNorm on each head's queries and keys scaled by ``1 + w`` (zero-centred weights)
before the rotation, partial RoPE (``partial_rotary_factor`` of ``rope_parameters``: the config's
``rotary_dim`` field is not read by transformers' layer, so neither is it here), scores scaled by
``head_dim ** -0.5``. A sparse layer adds the indexer (``indexer.q_proj``, ``indexer.k_proj``,
``indexer.q_norm``, ``indexer.k_norm``, the zoo's names too) with ``index_n_heads`` heads of
``index_head_dim``, blocks of ``index_block_size``, ``index_topk_blocks`` and
``index_local_blocks``: the ``msa`` layer's ``num_kv_heads``, ``index_head_dim``, ``block_size``,
``topk_blocks`` and ``local_blocks``. Which type a layer is comes from ``layer_types``, so the
builder takes ``layer_index``.

The map renames ``o_proj`` to ``out_proj`` and keeps the other names; the zoo's norms scale by
``w``, so their scales are transformers' plus one (bit-exact both ways where ``w + 1`` is exact).
The norms' epsilon is ``rms_norm_eps``. transformers' norm computes in float32 and casts back, the
zoo's in the input's dtype: the same in float32.

Refused in one line: a layer type other than the two, ``index_n_heads`` other than
``num_key_value_heads`` (the zoo's index heads are its key-value heads), ``index_local_blocks``
above ``index_topk_blocks``, an ``index_head_dim`` narrower than the rotated features, attention
dropout on a sparse layer (the zoo's ``msa`` has none), and a rotation whose frequencies change
with the length read.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from zoo.attention.variants.msa import MiniMaxSparseAttention
from zoo.attention.variants.softmax_recipes import QKNormAttention
from zoo.integrations.hf_layers.qwen3_next_attention import ShiftedPair
from zoo.integrations.hf_layers.rope import hf_rotary
from zoo.integrations.hf_layers.state_maps import refuse

__all__ = ["minimax_m3_layer", "minimax_m3_pair"]

NAME = "MiniMaxM3VLTextConfig"
SPARSE, DENSE = "minimax_m3_sparse", "full_attention"
NORMS = ("q_norm.weight", "k_norm.weight")
INDEXER = ("indexer.q_proj.weight", "indexer.k_proj.weight", "indexer.q_norm.weight", "indexer.k_norm.weight")


def _problem(config: Any, kind: str, layer_index: int) -> str | None:
    rotated = int(config.head_dim * dict(config.rope_parameters or {}).get("partial_rotary_factor", 1.0))
    if kind not in (SPARSE, DENSE):
        return f"layer {layer_index}'s type {kind!r}"
    if kind == DENSE:
        return None
    if config.index_n_heads != config.num_key_value_heads:
        return f"index_n_heads {config.index_n_heads} beside num_key_value_heads {config.num_key_value_heads}"
    if config.index_local_blocks > config.index_topk_blocks:
        return f"index_local_blocks {config.index_local_blocks} above index_topk_blocks {config.index_topk_blocks}"
    if config.index_head_dim < rotated:
        return f"index_head_dim {config.index_head_dim} below the {rotated} rotated features"
    if config.attention_dropout:
        return f"attention_dropout {config.attention_dropout} on a sparse layer"
    return None


def minimax_m3_layer(config: Any, *, layer_index: int, **options: Any) -> nn.Module:
    """The zoo's ``msa`` (a sparse layer) or ``qk_norm`` (a full-attention one) at a
    ``MiniMaxM3VLTextConfig``'s sizes, rotation and epsilon, for layer ``layer_index``'s type."""
    kind = config.layer_types[layer_index]
    refuse(NAME, _problem(config, kind, layer_index))
    shared = {
        "num_kv_heads": config.num_key_value_heads, "head_dim": config.head_dim, "bias": False,
        "position": hf_rotary(NAME, config, config.head_dim),
    }  # fmt: skip
    if kind == SPARSE:
        sparse = {
            "block_size": config.index_block_size, "topk_blocks": config.index_topk_blocks,
            "local_blocks": config.index_local_blocks, "index_head_dim": config.index_head_dim,
            "eps": config.rms_norm_eps,
        }  # fmt: skip
        return MiniMaxSparseAttention(config.hidden_size, config.num_attention_heads, **shared, **sparse, **options)
    layer = QKNormAttention(
        config.hidden_size, config.num_attention_heads, dropout=config.attention_dropout, **shared, **options
    )
    layer.q_norm.eps = layer.k_norm.eps = config.rms_norm_eps
    return layer


def minimax_m3_pair(config: Any, *, layer_index: int) -> ShiftedPair:
    """``MiniMaxM3VLAttention``'s state dict and the zoo layer's for layer ``layer_index``'s type."""
    sparse = config.layer_types[layer_index] == SPARSE
    names = ("q_proj.weight", "k_proj.weight", "v_proj.weight", *NORMS, *(INDEXER if sparse else ()))
    shifted = NORMS + (INDEXER[2:] if sparse else ())
    renamed = tuple((name, name) for name in names) + (("o_proj.weight", "out_proj.weight"),)
    return ShiftedPair("MiniMaxM3VLAttention", (), renamed, shifted=shifted)
