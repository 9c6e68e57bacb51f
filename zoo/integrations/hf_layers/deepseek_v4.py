"""transformers' ``DeepseekV4Attention`` (``models/deepseek_v4/modeling_deepseek_v4.py``) and the
zoo's ``deepseek_v4``, weight for weight, on the three layer types: ``"sliding_attention"``,
``"heavily_compressed_attention"`` (the zoo's ``compression="hca"``) and
``"compressed_sparse_attention"`` (``compression="csa"``).

DeepSeek-V4's attention: ``q_a_proj``, ``q_a_norm``, ``q_b_proj`` (then a weight-free RMSNorm on
every head), ``kv_proj`` and ``kv_norm`` (one head read as key and value), ``sinks``, the grouped
``o_a_proj`` and ``o_b_proj``: the zoo layer's tensors under the same names. A compressed layer's
``compressor`` (``kv_proj``, ``gate_proj``, ``position_bias``, ``kv_norm``) keeps its names too;
CSA's ``compressor.indexer`` is the zoo's ``indexer``: its ``kv_proj``, ``gate_proj``,
``position_bias`` and ``kv_norm`` under ``indexer.compressor``, ``q_b_proj`` as it is and
``scorer.weights_proj`` as ``weights_proj``. The sliding layers rotate with the ``"main"`` rotary
parameters, the compressed ones with ``"compress"`` (``compress_rope_theta``, YaRN in DeepSeek-V4's
configs): the zoo layer's ``rope_base`` and ``rope_scaling``; ``partial_rotary_factor`` its
``rope_head_dim``; ``sliding_window`` its ``window``; ``compress_rates`` its ``compress_rate``;
``index_topk``, ``index_n_heads``, ``index_head_dim`` its indexer's; the norms' epsilon
``rms_norm_eps``.

The rotation: transformers rotates each head's *last* ``r`` features in adjacent pairs ``(x_2i,
x_2i+1)`` at angle ``theta_i``; the zoo rotates its *first* ``r`` features in pairs ``(x_i,
x_i+r/2)``. The map permutes the features of every rotated vector the same way, the rotated ones
first (evens, then odds) and the rest after: the rows of ``q_b_proj`` (per head), of ``kv_proj``
and the entries of ``kv_norm``'s weight, and, since the output heads come out in the zoo's order,
the columns of ``o_a_proj`` (per head). A compressor pools each feature on its own, so its
``kv_proj`` and ``gate_proj`` rows and ``position_bias`` columns (per series) take the same order,
and so do the indexer's (at its width ``index_head_dim``, with its ``q_b_proj`` per index head).
Scores, weights and outputs are then equal; ``from_zoo`` undoes the order.

Refused in one line: more than one key-value head, and a rotation whose frequencies change with
the length read.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from zoo.attention.variants.deepseek_v4 import DeepseekV4Attention
from zoo.integrations.hf_layers.rope import hf_rope_parameters, hf_rope_scaling
from zoo.integrations.hf_layers.state_maps import LayerPair, refuse

__all__ = ["deepseek_v4_layer", "deepseek_v4_pair"]

NAME = "DeepseekV4Config"

#: transformers' layer types and the zoo layer's ``compression``
COMPRESSION = {"sliding_attention": None, "heavily_compressed_attention": "hca", "compressed_sparse_attention": "csa"}

SHARED = ("q_a_proj.weight", "q_a_norm.weight", "q_b_proj.weight", "kv_proj.weight", "kv_norm.weight", "sinks",
          "o_a_proj.weight", "o_b_proj.weight")  # fmt: skip
POOLING = ("kv_proj.weight", "gate_proj.weight", "position_bias", "kv_norm.weight")


def renamed(kind: str) -> tuple[tuple[str, str], ...]:
    """``(transformers name, zoo name)`` of a layer of type ``kind``."""
    names = [(name, name) for name in SHARED]
    if COMPRESSION[kind] is not None:
        names += [(f"compressor.{name}", f"compressor.{name}") for name in POOLING]
    if COMPRESSION[kind] == "csa":
        names += [(f"compressor.indexer.{name}", f"indexer.compressor.{name}") for name in POOLING]
        names += [
            ("compressor.indexer.q_b_proj.weight", "indexer.q_b_proj.weight"),
            ("compressor.indexer.scorer.weights_proj.weight", "indexer.weights_proj.weight"),
        ]
    return tuple(names)


def rotary_features(config: Any) -> int:
    """Each head's rotated features under the ``"main"`` rotation (the ``"compress"`` one rotates as many)."""
    return int(config.head_dim * hf_rope_parameters(config, "main").get("partial_rotary_factor", 1.0))


def deepseek_v4_layer(config: Any, *, layer_index: int, **options: Any) -> DeepseekV4Attention:
    """The zoo's ``deepseek_v4`` at a ``DeepseekV4Config``'s sizes, window, rotation and compression
    for layer ``layer_index``'s type; one line for a layer it cannot compute."""
    kind = config.layer_types[layer_index]
    refuse(NAME, None if kind in COMPRESSION else f"layer {layer_index}'s type {kind!r}")
    refuse(NAME, None if config.num_key_value_heads == 1 else "num_key_value_heads other than 1")
    compression = COMPRESSION[kind]
    rotation = hf_rope_parameters(config, "main" if compression is None else "compress")
    if compression is not None:
        options = {"compression": compression, "compress_rate": config.compress_rates[kind]} | options
    if compression == "csa":
        indexing = {"index_topk": config.index_topk, "index_heads": config.index_n_heads}
        options = indexing | {"index_head_dim": config.index_head_dim} | options
    return DeepseekV4Attention(
        config.hidden_size, config.num_attention_heads, head_dim=config.head_dim,
        rope_head_dim=rotary_features(config), q_lora_rank=config.q_lora_rank, o_groups=config.o_groups,
        o_lora_rank=config.o_lora_rank, window=config.sliding_window, rope_base=rotation["rope_theta"],
        rope_scaling=hf_rope_scaling(NAME, config, rotation), eps=config.rms_norm_eps, **options,
    )  # fmt: skip


def feature_order(width: int, rotated: int, inverse: bool) -> Tensor:
    """The zoo's order of a ``width``-feature vector's features from transformers' (see the module
    docstring); with ``inverse``, transformers' from the zoo's."""
    kept = width - rotated
    order = torch.cat([kept + torch.arange(0, rotated, 2), kept + torch.arange(1, rotated, 2), torch.arange(kept)])
    return torch.argsort(order) if inverse else order


def permuted(tensor: Tensor, width: int, order: Tensor, axis: int) -> Tensor:
    """``tensor`` with every block of ``width`` along ``axis`` (0 or 1) reordered by ``order``."""
    blocks = tensor.unflatten(axis, (-1, width))
    return (blocks[:, order] if axis == 0 else blocks[:, :, order]).flatten(axis, axis + 1)


@dataclass(frozen=True)
class HeadFeatureOrder:
    """A :class:`LayerPair` whose rotated vectors' features are permuted from transformers' order
    (rotated features last, adjacent pairs) to the zoo's (rotated first, halves): see the module
    docstring. ``index_dim``: the CSA indexer's width (None: no indexer)."""

    pair: LayerPair
    head_dim: int
    rope_dim: int
    compressed: bool
    index_dim: int | None

    def _permute(self, state: Mapping[str, Tensor], inverse: bool) -> dict[str, Tensor]:
        order, d = feature_order(self.head_dim, self.rope_dim, inverse), self.head_dim
        rows = ["q_b_proj.weight", "kv_proj.weight", "kv_norm.weight"]
        columns = ["o_a_proj.weight"]
        pools = [("compressor.", d)] if self.compressed else []
        pools += [] if self.index_dim is None else [("indexer.compressor.", self.index_dim)]
        out = dict(state)
        for prefix, width in pools:
            blocks = feature_order(width, self.rope_dim, inverse)
            for name in POOLING:
                out[prefix + name] = permuted(state[prefix + name], width, blocks, 1 if name == "position_bias" else 0)
        if self.index_dim is not None:
            blocks = feature_order(self.index_dim, self.rope_dim, inverse)
            out["indexer.q_b_proj.weight"] = permuted(state["indexer.q_b_proj.weight"], self.index_dim, blocks, 0)
        out |= {name: permuted(state[name], d, order, 0) for name in rows}
        out |= {name: permuted(state[name], d, order, 1) for name in columns}
        return out

    def to_zoo(self, hf_state: Mapping[str, Tensor]) -> dict[str, Tensor]:
        """The zoo layer's state dict from transformers'."""
        return self._permute(self.pair.to_zoo(hf_state), inverse=False)

    def from_zoo(self, zoo_state: Mapping[str, Tensor]) -> dict[str, Tensor]:
        """transformers' state dict from the zoo layer's."""
        return self.pair.from_zoo(self._permute(zoo_state, inverse=True))


def deepseek_v4_pair(config: Any, *, layer_index: int) -> HeadFeatureOrder:
    """``DeepseekV4Attention``'s state dict and the zoo layer's for layer ``layer_index``'s type."""
    kind = config.layer_types[layer_index]
    compression = COMPRESSION[kind]
    index_dim = config.index_head_dim if compression == "csa" else None
    pair = LayerPair("DeepseekV4Attention", (), renamed(kind))
    return HeadFeatureOrder(pair, config.head_dim, rotary_features(config), compression is not None, index_dim)
