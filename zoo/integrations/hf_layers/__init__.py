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
from zoo.integrations.hf_layers.mamba2 import mamba2_layer, mamba2_pair
from zoo.integrations.hf_layers.qwen3_next import qwen3_next_gated_deltanet_layer, qwen3_next_gated_deltanet_pair
from zoo.integrations.hf_layers.state_maps import LayerPair

__all__ = ["FAMILIES", "HFFamily", "from_hf_layer", "into_hf_layer"]


@dataclass(frozen=True)
class HFFamily:
    """A transformers layer class's zoo layer builder and state-dict map, each from its config."""

    build: Callable[..., nn.Module]
    pair: Callable[[Any], LayerPair]


#: the transformers layer classes the zoo computes, by class name
FAMILIES: dict[str, HFFamily] = {
    "Mamba2Mixer": HFFamily(mamba2_layer, mamba2_pair),
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
    layer = family.build(config, **options)
    parameter = next(module.parameters())
    layer.to(device=parameter.device, dtype=parameter.dtype)
    layer.load_state_dict(family.pair(config).to_zoo(module.state_dict()))
    return layer


def into_hf_layer(layer: nn.Module, module: nn.Module, config: Any) -> None:
    """Load the zoo ``layer``'s weights into transformers' ``module`` (both built from ``config``), strictly."""
    module.load_state_dict(_family(module).pair(config).from_zoo(layer.state_dict()))
