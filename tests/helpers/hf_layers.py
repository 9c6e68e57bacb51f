"""The weight maps of ``zoo.integrations.hf_layers``, checked both ways."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from zoo.integrations.hf_layers import from_hf_layer, into_hf_layer


def assert_round_trip(module: nn.Module, config: Any) -> None:
    """transformers -> zoo -> transformers and zoo -> transformers -> zoo keep every tensor, bit for
    bit. ``module``'s parameters are zeroed before the zoo layer's weights are written back, so a
    tensor the map leaves out (or writes to the wrong place) fails by name."""
    hf_state = {key: value.clone() for key, value in module.state_dict().items()}
    layer = from_hf_layer(module, config)
    zoo_state = {key: value.clone() for key, value in layer.state_dict().items()}
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.zero_()
    into_hf_layer(layer, module, config)
    assert module.state_dict().keys() == hf_state.keys()
    for key, value in module.state_dict().items():
        assert torch.equal(value, hf_state[key]), key
    again = from_hf_layer(module, config).state_dict()
    assert again.keys() == zoo_state.keys()
    for key, value in again.items():
        assert torch.equal(value, zoo_state[key]), key
