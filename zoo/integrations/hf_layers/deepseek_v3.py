"""transformers' ``DeepseekV3Attention`` (``models/deepseek_v3/modeling_deepseek_v3.py``) and the
zoo's ``mla``, weight for weight.

DeepSeek-V3's multi-head latent attention: ``q_a_proj``, ``q_a_layernorm``, ``q_b_proj`` (or
``q_proj`` without ``q_lora_rank``), ``kv_a_proj_with_mqa`` (the latent and one rotary key shared by
the heads), ``kv_a_layernorm``, ``kv_b_proj`` (each head's ``qk_nope_head_dim`` key rows then
``v_head_dim`` value rows), ``o_proj``; scale ``1 / sqrt(qk_nope_head_dim + qk_rope_head_dim)``.
These are the zoo's ``q_down``, ``q_norm``, ``q_up`` (``q_proj``), ``kv_down``, ``kv_norm``,
``kv_up`` and ``out_proj`` in the same row order; the norms' epsilon is set to ``rms_norm_eps`` and
the zoo's own RoPE takes ``rope_theta``.

The rotation: with ``rope_interleave`` (the config's default), transformers rotates adjacent pairs
``(x_2i, x_2i+1)`` at angle ``theta_i`` and writes the result as halves; the zoo rotates the pair
``(x_i, x_i+r/2)``. The map reorders the rotary rows of the query projection (each head's last
``qk_rope_head_dim`` rows) and of ``kv_a_proj_with_mqa`` (its last ``qk_rope_head_dim`` rows), evens
first then odds, so the zoo's rotated features are transformers' and every score is equal;
``from_zoo`` undoes the order. Without ``rope_interleave`` the rows are taken as they are.

DeepSeek-V3's released checkpoints rotate with YaRN (factor 40 over 4,096 positions, ``mscale`` and
``mscale_all_dim`` 1): the zoo's MLA takes the same rule as ``rope_scaling``, which also multiplies
its softmax scale by ``mscale_all_dim``'s temperature squared, as transformers' ``yarn_apply_mscale``.

Refused in one line: biases (``attention_bias``), a ``rope_type`` whose frequencies change with the
length read (``"dynamic"``, ``"longrope"``), and fewer key/value heads than query heads.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import torch
from torch import Tensor

from zoo.attention.variants.mla import MultiHeadLatentAttention
from zoo.integrations.hf_layers.rope import hf_rope_parameters, hf_rope_scaling
from zoo.integrations.hf_layers.state_maps import LayerPair, refuse

__all__ = ["RotaryRowOrder", "deepseek_v3_layer", "deepseek_v3_pair", "latent_layer", "latent_pair"]

LayerT = TypeVar("LayerT", bound=MultiHeadLatentAttention)

NAME = "DeepseekV3Config"


def latent_layer(config: Any, name: str, variant: type[LayerT], **arguments: Any) -> LayerT:
    """``variant`` (the zoo's MLA or a layer built on it) at a DeepSeek config's sizes, rotation base
    and epsilon; ``arguments`` its own options. One line for what the zoo's MLA cannot compute."""
    refuse(name, "attention_bias" if config.attention_bias else None)
    scaling = hf_rope_scaling(name, config, hf_rope_parameters(config))
    heads = config.num_attention_heads
    refuse(name, None if config.num_key_value_heads == heads else "num_key_value_heads below num_attention_heads")
    layer = variant(
        config.hidden_size, heads, kv_lora_rank=config.kv_lora_rank, q_lora_rank=config.q_lora_rank,
        qk_nope_head_dim=config.qk_nope_head_dim, qk_rope_head_dim=config.qk_rope_head_dim,
        v_head_dim=config.v_head_dim, rope_base=config.rope_parameters["rope_theta"], rope_scaling=scaling, **arguments,
    )  # fmt: skip
    layer.kv_norm.eps = config.rms_norm_eps
    if config.q_lora_rank is not None:
        layer.q_norm.eps = config.rms_norm_eps
    return layer


def deepseek_v3_layer(config: Any, **options: Any) -> MultiHeadLatentAttention:
    """The zoo's MLA at a ``DeepseekV3Config``'s sizes, rotation base and epsilon."""
    return latent_layer(config, NAME, MultiHeadLatentAttention, **options)


@dataclass(frozen=True)
class RotaryRowOrder:
    """A :class:`LayerPair` whose named weights have their rotary rows reordered: ``rows`` gives each
    weight's block length and the rotary rows' offset in every block (the rotary rows end it)."""

    pair: LayerPair
    rows: tuple[tuple[str, int], ...]
    rope_dim: int

    def _reorder(self, state: Mapping[str, Tensor], inverse: bool) -> dict[str, Tensor]:
        order = torch.cat([torch.arange(0, self.rope_dim, 2), torch.arange(1, self.rope_dim, 2)])
        order = torch.argsort(order) if inverse else order
        reordered = dict(state)
        for name, block in self.rows:
            weight = state[name].unflatten(0, (-1, block))
            rope = weight[:, block - self.rope_dim :][:, order]
            reordered[name] = torch.cat([weight[:, : block - self.rope_dim], rope], dim=1).flatten(0, 1)
        return reordered

    def to_zoo(self, hf_state: Mapping[str, Tensor]) -> dict[str, Tensor]:
        """The zoo layer's state dict from transformers'."""
        return self._reorder(self.pair.to_zoo(hf_state), inverse=False)

    def from_zoo(self, zoo_state: Mapping[str, Tensor]) -> dict[str, Tensor]:
        """transformers' state dict from the zoo layer's."""
        return self.pair.from_zoo(self._reorder(zoo_state, inverse=True))


def latent_pair(config: Any, hf_name: str, interleaved: bool, more: tuple[tuple[str, str], ...] = ()) -> RotaryRowOrder:
    """A DeepSeek attention's state dict and the zoo's MLA's (``more``: a derived layer's own
    tensors, renamed), the rotary rows reordered where transformers rotates interleaved pairs."""
    if config.q_lora_rank is None:
        query = (("q_proj.weight", "q_proj.weight"),)
    else:
        query = (
            ("q_a_proj.weight", "q_down.weight"),
            ("q_a_layernorm.weight", "q_norm.weight"),
            ("q_b_proj.weight", "q_up.weight"),
        )
    renamed = query + (
        ("kv_a_proj_with_mqa.weight", "kv_down.weight"),
        ("kv_a_layernorm.weight", "kv_norm.weight"),
        ("kv_b_proj.weight", "kv_up.weight"),
        ("o_proj.weight", "out_proj.weight"),
    )
    rope = config.qk_rope_head_dim
    query_name = "q_proj.weight" if config.q_lora_rank is None else "q_up.weight"
    rows = ((query_name, config.qk_nope_head_dim + rope), ("kv_down.weight", config.kv_lora_rank + rope))
    return RotaryRowOrder(LayerPair(hf_name, (), renamed + more), rows if interleaved else (), rope)


def deepseek_v3_pair(config: Any) -> RotaryRowOrder:
    """``DeepseekV3Attention``'s state dict and the zoo's MLA's."""
    return latent_pair(config, "DeepseekV3Attention", config.rope_interleave)
