"""The weight maps of ``zoo.integrations.hf_layers``, checked both ways."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from zoo.attention.contract.cache import LayerCache
from zoo.integrations.hf_layers import from_hf_layer, into_hf_layer

#: float32's rounding of the recurrences' sums
TOLERANCE = {"rtol": 1e-5, "atol": 1e-5}


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


def assert_decoding_like_transformers(
    module: nn.Module, config: Any, prompt: int = 12, length: int = 18
) -> tuple[Any, LayerCache]:
    """A ``prompt`` of tokens, then one token at a time to ``length``: the zoo layer's outputs equal
    transformers' with its ``DynamicCache`` (and those equal its full forward), and the recurrent
    state after them is transformers'. Returns both caches, for a family's own checks of them."""
    from transformers import DynamicCache

    layer = from_hf_layer(module, config).eval()
    x = torch.randn(2, length, config.hidden_size)
    cache = DynamicCache(config=config)
    expected = [module(x[:, :prompt], cache=cache)]
    expected += [module(x[:, t : t + 1], cache=cache) for t in range(prompt, length)]
    output, zoo_cache = layer.attend_cached(x[:, :prompt], None)
    actual = [output]
    for t in range(prompt, length):
        output, zoo_cache = layer.attend_cached(x[:, t : t + 1], zoo_cache)
        actual.append(output)
    torch.testing.assert_close(torch.cat(expected, 1), module(x), **TOLERANCE)
    torch.testing.assert_close(torch.cat(actual, 1), torch.cat(expected, 1), **TOLERANCE)
    torch.testing.assert_close(zoo_cache.state, cache.get_recurrent_state(0, state_idx=0))
    return cache, zoo_cache


def assert_steps_like_transformers(
    layer: nn.Module,
    hf_step: Callable[[torch.Tensor, int, Any], torch.Tensor],
    x: torch.Tensor,
    prompt: int,
    cache: Any,
) -> LayerCache:
    """``x``'s first ``prompt`` positions, then one position at a time: the zoo ``layer``'s cached
    outputs equal ``hf_step(x[:, first:last], first, cache)``'s, transformers' layer driven through
    its own ``cache``. Returns the zoo's cache, for a family's own checks of it."""
    expected, actual, zoo_cache = [], [], None
    with torch.no_grad():
        for first, last in [(0, prompt)] + [(t, t + 1) for t in range(prompt, x.shape[1])]:
            expected.append(hf_step(x[:, first:last], first, cache))
            output, zoo_cache = layer.attend_cached(x[:, first:last], zoo_cache)
            actual.append(output)
    torch.testing.assert_close(torch.cat(actual, 1), torch.cat(expected, 1), **TOLERANCE)
    return zoo_cache


def windowed_hf_forward(
    module: nn.Module, rotary: nn.Module, x: torch.Tensor, first: int, cache: Any, *arguments: Any
) -> torch.Tensor:
    """A transformers softmax layer's output for ``x`` at positions ``first ..`` (Gemma 3 and 4,
    MiMo-V2-Flash): its model's ``rotary`` tables for the layer's type and an additive causal mask,
    windowed on a sliding layer, written here; one new token sees every key the cache returns (a
    sliding layer's cache holds its window). ``arguments`` follow the mask (Gemma 4's shared states)."""
    length = x.shape[1]
    positions = torch.arange(first, first + length)[None]
    mask = None
    if length > 1:
        offsets = positions[0, :, None] - torch.arange(first + length)
        window = module.sliding_window or first + length + 1
        mask = torch.where((offsets >= 0) & (offsets < window), 0.0, float("-inf"))[None, None]
    return module(x, rotary(x, positions, module.layer_type), mask, *arguments, cache=cache)[0]


def assert_windowed_decoding_like_transformers(
    module: nn.Module, rotary: nn.Module, config: Any, x: torch.Tensor, prompt: int, *arguments: Any
) -> LayerCache:
    """A ``prompt`` of ``x``, then one token at a time: the zoo layer's outputs equal transformers' with
    its ``DynamicCache`` (:func:`windowed_hf_forward`). Returns the zoo's cache, for a family's checks."""
    from transformers import DynamicCache

    layer = from_hf_layer(module, config).eval()
    cache, zoo_cache = DynamicCache(config=config), None
    expected, outputs = [], []
    for first, last in [(0, prompt)] + [(t, t + 1) for t in range(prompt, x.shape[1])]:
        expected.append(windowed_hf_forward(module, rotary, x[:, first:last], first, cache, *arguments))
        output, zoo_cache = layer.attend_cached(x[:, first:last], zoo_cache)
        outputs.append(output)
    torch.testing.assert_close(torch.cat(outputs, 1), torch.cat(expected, 1), **TOLERANCE)
    return zoo_cache
