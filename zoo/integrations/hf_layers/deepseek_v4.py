"""transformers' ``DeepseekV4Attention`` (``models/deepseek_v4/modeling_deepseek_v4.py``) and the
zoo's ``deepseek_v4``, weight for weight, on the sliding-window layers.

DeepSeek-V4's attention: ``q_a_proj``, ``q_a_norm``, ``q_b_proj`` (then a weight-free RMSNorm on
every head), ``kv_proj`` and ``kv_norm`` (one head read as key and value), ``sinks``, the grouped
``o_a_proj`` and ``o_b_proj``: the zoo layer's tensors under the same names. Its ``"main"`` rotary
parameters (``rope_theta``, ``partial_rotary_factor``) are the zoo layer's ``rope_base`` and
``rope_head_dim``; ``sliding_window`` its ``window``; the norms' epsilon ``rms_norm_eps``.

The rotation: transformers rotates each head's *last* ``r`` features in adjacent pairs ``(x_2i,
x_2i+1)`` at angle ``theta_i``; the zoo rotates its *first* ``r`` features in pairs ``(x_i,
x_i+r/2)``. The map permutes every head's features the same way, the rotated ones first (evens,
then odds) and the rest after: the rows of ``q_b_proj`` (per head), of ``kv_proj`` and the entries
of ``kv_norm``'s weight, and, since the output heads come out in the zoo's order, the columns of
``o_a_proj`` (per head). Scores, weights and outputs are then equal; ``from_zoo`` undoes the order.

Refused in one line: the compressed layers (``"compressed_sparse_attention"``,
``"heavily_compressed_attention"``: the zoo layer has no compressor nor indexer), a scaled ``"main"``
rotation, and more than one key-value head.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from zoo.attention.variants.deepseek_v4 import DeepseekV4Attention
from zoo.integrations.hf_layers.rope import hf_rope_parameters
from zoo.integrations.hf_layers.state_maps import LayerPair, refuse

__all__ = ["deepseek_v4_layer", "deepseek_v4_pair"]

NAME = "DeepseekV4Config"

RENAMED = tuple(
    (name, name)
    for name in (
        "q_a_proj.weight", "q_a_norm.weight", "q_b_proj.weight", "kv_proj.weight", "kv_norm.weight", "sinks",
        "o_a_proj.weight", "o_b_proj.weight",
    )
)  # fmt: skip


def rotary_features(config: Any) -> int:
    """Each head's rotated features under the ``"main"`` rotation."""
    return int(config.head_dim * hf_rope_parameters(config, "main").get("partial_rotary_factor", 1.0))


def deepseek_v4_layer(config: Any, *, layer_index: int, **options: Any) -> DeepseekV4Attention:
    """The zoo's ``deepseek_v4`` at a ``DeepseekV4Config``'s sizes, window and rotation; one line
    for a layer it cannot compute (``layer_index`` names the layer's type)."""
    kind = config.layer_types[layer_index]
    refuse(NAME, None if kind == "sliding_attention" else f"layer {layer_index}'s {kind!r} (only sliding_attention)")
    refuse(NAME, None if config.num_key_value_heads == 1 else "num_key_value_heads other than 1")
    main = hf_rope_parameters(config, "main")
    refuse(NAME, None if main.get("rope_type", "default") == "default" else f"a {main['rope_type']!r} main rotation")
    return DeepseekV4Attention(
        config.hidden_size, config.num_attention_heads, head_dim=config.head_dim,
        rope_head_dim=rotary_features(config), q_lora_rank=config.q_lora_rank, o_groups=config.o_groups,
        o_lora_rank=config.o_lora_rank, window=config.sliding_window, rope_base=main["rope_theta"],
        eps=config.rms_norm_eps, **options,
    )  # fmt: skip


@dataclass(frozen=True)
class HeadFeatureOrder:
    """A :class:`LayerPair` whose per-head features are permuted from transformers' order (rotated
    features last, adjacent pairs) to the zoo's (rotated first, halves): see the module docstring."""

    pair: LayerPair
    head_dim: int
    rope_dim: int

    def _order(self, inverse: bool) -> Tensor:
        kept = self.head_dim - self.rope_dim
        rotated = kept + torch.cat([torch.arange(0, self.rope_dim, 2), torch.arange(1, self.rope_dim, 2)])
        order = torch.cat([rotated, torch.arange(kept)])
        return torch.argsort(order) if inverse else order

    def _permute(self, state: Mapping[str, Tensor], inverse: bool) -> dict[str, Tensor]:
        order, d = self._order(inverse), self.head_dim
        permuted = dict(state)
        for name in ("q_b_proj.weight", "kv_proj.weight", "kv_norm.weight"):
            permuted[name] = state[name].unflatten(0, (-1, d))[:, order].flatten(0, 1)
        columns = state["o_a_proj.weight"]
        permuted["o_a_proj.weight"] = columns.unflatten(1, (-1, d))[:, :, order].flatten(1, 2)
        return permuted

    def to_zoo(self, hf_state: Mapping[str, Tensor]) -> dict[str, Tensor]:
        """The zoo layer's state dict from transformers'."""
        return self._permute(self.pair.to_zoo(hf_state), inverse=False)

    def from_zoo(self, zoo_state: Mapping[str, Tensor]) -> dict[str, Tensor]:
        """transformers' state dict from the zoo layer's."""
        return self.pair.from_zoo(self._permute(zoo_state, inverse=True))


def deepseek_v4_pair(config: Any, *, layer_index: int) -> HeadFeatureOrder:
    """``DeepseekV4Attention``'s state dict and the zoo layer's (the same names on a sliding layer)."""
    del layer_index  # the sliding layers share one map; the builder refuses the others
    return HeadFeatureOrder(LayerPair("DeepseekV4Attention", (), RENAMED), config.head_dim, rotary_features(config))
