"""transformers' ``MiniMaxLightningAttention`` (``models/minimax/modeling_minimax.py``) and the zoo's
``lightning_attention``, weight for weight.

transformers fuses the query, key and value projections into one ``qkv_proj`` whose rows are, head
by head, that head's ``q``, ``k`` and ``v``; the zoo keeps one projection each. ``output_gate`` is the
zoo's ``gate``; ``norm`` and ``out_proj`` are the same tensors. transformers also stores four float32
buffers that follow from the config and the layer's index (``slope_rate`` and its ``block_size``-step
blocks' ``query_decay``, ``key_decay``, ``diagonal_decay``); the zoo computes its slopes instead. The map
checks them against the slopes of its ``layer_index`` on the way in (a mismatch is refused in one
line) and writes them out again from that index on the way back.

The layer's index is not in the config: ``from_hf_layer`` and ``into_hf_layer`` read it from the
module's ``layer_idx`` (:data:`FAMILIES` marks the family ``by_layer``); built by hand, layer ``i``
is ``minimax_layer(config, layer_index=i)`` with ``minimax_pair(config, i)``. Refused: ``hidden_act`` other than SiLU.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from zoo.attention.variants.lightning_attention import LightningAttention, minimax_slopes
from zoo.errors import ConfigurationError
from zoo.integrations.hf_layers.state_maps import Fused, LayerPair, refuse

__all__ = ["MiniMaxPair", "minimax_buffers", "minimax_layer", "minimax_pair"]


def _head_dim(config: Any) -> int:
    return getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads


def minimax_layer(config: Any, *, layer_index: int = 0, **options: Any) -> LightningAttention:
    """The zoo's ``lightning_attention`` with a ``MiniMaxConfig``'s sizes and depth, at ``layer_index``
    (``options``: the zoo's ``mode``, ``chunk_size``); one line for a config it cannot compute."""
    refuse("MiniMaxConfig", None if config.hidden_act == "silu" else f"hidden_act {config.hidden_act!r}")
    return LightningAttention(
        config.hidden_size, config.num_attention_heads, head_dim=_head_dim(config), layer_index=layer_index,
        num_layers=config.num_hidden_layers, bias=False, **options,
    )  # fmt: skip


def minimax_buffers(config: Any, layer_index: int) -> dict[str, Tensor]:
    """transformers' four decay buffers of the layer at ``layer_index``, in float32: the slopes
    ``(H, 1, 1)``; per block position ``i = 1 .. n`` (``n = block_size``) the queries' decays
    ``exp(-s i)`` and the keys' ``exp(-s (n - i))``, ``(H, n, 1)``; and the block's causal decay mask
    ``exp(-s (i - j))`` for ``j <= i``, else 0, ``(1, H, n, n)``."""
    slopes = minimax_slopes(config.num_attention_heads, layer_index, config.num_hidden_layers, torch.float32)
    slopes = slopes[:, None, None]
    positions = torch.arange(1, config.block_size + 1)
    distance = (positions[:, None] - positions[None, :])[None, None]
    scaled = slopes * distance
    return {
        "slope_rate": slopes,
        "query_decay": torch.exp(-slopes * positions[:, None]),
        "key_decay": torch.exp(-slopes * (config.block_size - positions[:, None])),
        "diagonal_decay": torch.exp(torch.where(scaled >= 0, -scaled, float("-inf"))),
    }


def _rounds_to(given: Tensor | None, expected: Tensor) -> bool:
    """Whether ``given`` is ``expected`` (float32) rounded to its own dtype, as ``module.to(dtype)`` rounds it."""
    if given is None:
        return False
    resolution = torch.finfo(given.dtype)
    return torch.allclose(given.float().cpu(), expected, rtol=resolution.eps, atol=resolution.tiny)


@dataclass(frozen=True)
class MiniMaxPair(LayerPair):
    """:class:`~zoo.integrations.hf_layers.state_maps.LayerPair` and transformers' decay buffers,
    which the zoo layer does not store: checked on the way in, written on the way back."""

    buffers: Mapping[str, Tensor]

    def to_zoo(self, hf_state: Mapping[str, Tensor]) -> dict[str, Tensor]:
        for name, expected in self.buffers.items():
            if not _rounds_to(hf_state.get(name), expected):
                raise ConfigurationError(
                    f"{self.name}: the buffer {name} is missing or not that of this pair's layer; "
                    f"build the pair with the module's layer_index (minimax_pair(config, module.layer_idx))."
                )
        return super().to_zoo({key: value for key, value in hf_state.items() if key not in self.buffers})

    def from_zoo(self, zoo_state: Mapping[str, Tensor]) -> dict[str, Tensor]:
        return super().from_zoo(zoo_state) | {name: value.clone() for name, value in self.buffers.items()}


def minimax_pair(config: Any, layer_index: int = 0) -> MiniMaxPair:
    """``MiniMaxLightningAttention``'s state dict, at ``layer_index``, and the zoo's ``lightning_attention``'s."""
    d = _head_dim(config)
    qkv = (("q_proj.weight", d), ("k_proj.weight", d), ("v_proj.weight", d))
    return MiniMaxPair(
        "MiniMaxLightningAttention",
        (Fused("qkv_proj.weight", qkv, groups=config.num_attention_heads),),
        (("output_gate.weight", "gate.weight"), ("norm.weight", "norm.weight"), ("out_proj.weight", "out_proj.weight")),
        minimax_buffers(config, layer_index),
    )
