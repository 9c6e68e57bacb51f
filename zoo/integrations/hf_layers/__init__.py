"""Hugging Face transformers' production layers and the zoo's, weight for weight.

Why: a model trained with transformers (a Mamba-2 checkpoint, Qwen3-Next's linear layers) can run
as the zoo's layer with the same weights, and a zoo layer can be written back into transformers'
module, so each side checks the other (``tests/integrations/test_hf_layer_equality.py`` holds the
full forward and token-by-token decoding equal). One module of this package per transformers
family gives the zoo layer built from the transformers config and the map between the two state
dicts (a :class:`~zoo.integrations.hf_layers.state_maps.LayerPair`: ``to_zoo`` and ``from_zoo``,
every tensor accounted for); :data:`FAMILIES` lists them by transformers class name, and
:func:`from_hf_layer` / :func:`into_hf_layer` do both for a built module::

    layer = from_hf_layer(hf_mixer, config)        # the zoo's Mamba-2, equal to the Mamba2Mixer
    into_hf_layer(layer, hf_mixer, config)          # and back

It reads configs by attribute and state dicts by key, so it does not import transformers. What a
config needs that the zoo's layer has no option for is refused in one line
(:class:`~zoo.errors.ConfigurationError`); each family's module says where the two differ.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from torch import nn

from zoo.errors import ConfigurationError
from zoo.integrations.hf_layers.deepseek_v3 import deepseek_v3_layer, deepseek_v3_pair
from zoo.integrations.hf_layers.deepseek_v32 import deepseek_v32_layer, deepseek_v32_pair
from zoo.integrations.hf_layers.deepseek_v4 import deepseek_v4_layer, deepseek_v4_pair
from zoo.integrations.hf_layers.falcon_h1 import falcon_h1_layer, falcon_h1_pair
from zoo.integrations.hf_layers.gemma3 import gemma3_layer, gemma3_pair
from zoo.integrations.hf_layers.gemma4 import gemma4_layer, gemma4_pair
from zoo.integrations.hf_layers.gpt_oss import gpt_oss_layer, gpt_oss_pair
from zoo.integrations.hf_layers.kimi_linear import kimi_linear_kda_layer, kimi_linear_kda_pair
from zoo.integrations.hf_layers.mamba2 import mamba2_layer, mamba2_pair
from zoo.integrations.hf_layers.mimo_v2_flash import mimo_v2_flash_layer, mimo_v2_flash_pair
from zoo.integrations.hf_layers.minimax import minimax_layer, minimax_pair
from zoo.integrations.hf_layers.minimax_m3 import minimax_m3_layer, minimax_m3_pair
from zoo.integrations.hf_layers.olmo_hybrid import olmo_hybrid_gated_deltanet_layer, olmo_hybrid_gated_deltanet_pair
from zoo.integrations.hf_layers.qwen3 import qwen3_layer, qwen3_pair
from zoo.integrations.hf_layers.qwen3_5 import qwen3_5_gated_deltanet_layer, qwen3_5_gated_deltanet_pair
from zoo.integrations.hf_layers.qwen3_next import qwen3_next_gated_deltanet_layer, qwen3_next_gated_deltanet_pair
from zoo.integrations.hf_layers.qwen3_next_attention import qwen3_next_attention_layer, qwen3_next_attention_pair
from zoo.integrations.hf_layers.state_maps import LayerPair

__all__ = ["FAMILIES", "HFFamily", "from_hf_layer", "into_hf_layer"]


@dataclass(frozen=True)
class HFFamily:
    """A transformers layer class's zoo layer builder and state-dict map, each from its config; with
    ``by_layer``, from the module's ``layer_idx`` too (given as ``layer_index``: MiniMax's decays
    follow the layer's depth, and windows and rotary bases the layer's type in ``layer_types``)."""

    build: Callable[..., nn.Module]
    pair: Callable[..., LayerPair]
    by_layer: bool = False

    def layer(self, module: nn.Module) -> dict[str, int]:
        """The keyword naming ``module``'s place in its model, where the map depends on it."""
        return {"layer_index": module.layer_idx} if self.by_layer else {}


#: the transformers layer classes the zoo computes, by class name
FAMILIES: dict[str, HFFamily] = {
    "DeepseekV3Attention": HFFamily(deepseek_v3_layer, deepseek_v3_pair),
    "DeepseekV32Attention": HFFamily(deepseek_v32_layer, deepseek_v32_pair),
    "DeepseekV4Attention": HFFamily(deepseek_v4_layer, deepseek_v4_pair, by_layer=True),
    "FalconH1Mixing": HFFamily(falcon_h1_layer, falcon_h1_pair),  # a FalconH1DecoderLayer's two branches
    "Gemma3Attention": HFFamily(gemma3_layer, gemma3_pair, by_layer=True),
    "Gemma4TextAttention": HFFamily(gemma4_layer, gemma4_pair, by_layer=True),
    "GptOssAttention": HFFamily(gpt_oss_layer, gpt_oss_pair, by_layer=True),
    "KimiLinearDeltaAttention": HFFamily(kimi_linear_kda_layer, kimi_linear_kda_pair),
    "Mamba2Mixer": HFFamily(mamba2_layer, mamba2_pair),
    "MiMoV2FlashAttention": HFFamily(mimo_v2_flash_layer, mimo_v2_flash_pair, by_layer=True),
    "MiniMaxLightningAttention": HFFamily(minimax_layer, minimax_pair, by_layer=True),
    "MiniMaxM3VLAttention": HFFamily(minimax_m3_layer, minimax_m3_pair, by_layer=True),
    "OlmoHybridGatedDeltaNet": HFFamily(olmo_hybrid_gated_deltanet_layer, olmo_hybrid_gated_deltanet_pair),
    "Qwen3Attention": HFFamily(qwen3_layer, qwen3_pair, by_layer=True),
    "Qwen3_5GatedDeltaNet": HFFamily(qwen3_5_gated_deltanet_layer, qwen3_5_gated_deltanet_pair),
    "Qwen3NextAttention": HFFamily(qwen3_next_attention_layer, qwen3_next_attention_pair),
    "Qwen3NextGatedDeltaNet": HFFamily(qwen3_next_gated_deltanet_layer, qwen3_next_gated_deltanet_pair),
}


def _family(module: nn.Module) -> HFFamily:
    name = type(module).__name__
    if name not in FAMILIES:
        raise ConfigurationError(f"no zoo layer maps {name}; the layers that do: {', '.join(FAMILIES)}.")
    return FAMILIES[name]


def from_hf_layer(module: nn.Module, config: Any, **options: Any) -> nn.Module:
    """The zoo's layer equal to transformers' ``module`` (built from ``config``), with its weights,
    on its device and in its dtype; ``options`` go to the zoo layer (``mode``, ``chunk_size``)."""
    family = _family(module)
    layer = family.build(config, **family.layer(module), **options)
    parameter = next(module.parameters())
    layer.to(device=parameter.device, dtype=parameter.dtype)
    layer.load_state_dict(family.pair(config, **family.layer(module)).to_zoo(module.state_dict()))
    return layer


def into_hf_layer(layer: nn.Module, module: nn.Module, config: Any) -> None:
    """Load the zoo ``layer``'s weights into transformers' ``module`` (both built from ``config``), strictly."""
    family = _family(module)
    module.load_state_dict(family.pair(config, **family.layer(module)).from_zoo(layer.state_dict()))
