"""transformers' ``DeepseekV4Attention`` and the zoo's ``deepseek_v4``, weight for weight, on a
sliding-window layer; the compressed layers refused in one line.

DeepSeek-V4-Flash's config shrunk in width and depth only: hidden 4096, 64 heads of 512 (64 rotated),
query latent 1024, 8 output groups of 1024, window 128, as hidden 64, 16 heads of 32 (4 rotated),
query latent 16, 2 output groups of 16, window 128; three layers, one of each type. The sequences
run past the window, in the prompt and while decoding. transformers runs its eager kernel with the
``cos`` and ``sin`` of its model's rotary module; the zoo's layer computes its own. Outputs agree
to float32 rounding (``1e-5``).
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")

from transformers import DeepseekV4Config, DynamicCache  # noqa: E402
from transformers.models.deepseek_v4.modeling_deepseek_v4 import (  # noqa: E402
    DeepseekV4Attention,
    DeepseekV4RotaryEmbedding,
)

from tests.helpers.hf_layers import assert_round_trip  # noqa: E402
from zoo import AttentionContext  # noqa: E402
from zoo.errors import ConfigurationError  # noqa: E402
from zoo.integrations.hf_layers import from_hf_layer  # noqa: E402

TOLERANCE = {"rtol": 1e-5, "atol": 1e-5}
LENGTH, PROMPT = 150, 135
SLIDING = 0


def flash(**changes: object) -> DeepseekV4Config:
    sizes = dict(
        hidden_size=64, num_attention_heads=16, head_dim=32, q_lora_rank=16, o_groups=2, o_lora_rank=16,
        sliding_window=128, num_hidden_layers=3, vocab_size=32, attn_implementation="eager",
        layer_types=["sliding_attention", "heavily_compressed_attention", "compressed_sparse_attention"],
    )  # fmt: skip
    return DeepseekV4Config(**(sizes | changes))


def hf_pair(config: DeepseekV4Config, index: int = SLIDING) -> DeepseekV4Attention:
    """transformers' layer, seeded: weights at ``1 / sqrt(fan-in)``, norm scales and sinks at
    ``1 + 0.3 N(0, 1)``."""
    torch.manual_seed(0)
    module = DeepseekV4Attention(config, index).eval()
    with torch.no_grad():
        for parameter in module.parameters():
            if parameter.dim() == 2:
                parameter.copy_(torch.randn_like(parameter) / parameter.shape[1] ** 0.5)
            else:
                parameter.copy_(1 + 0.3 * torch.randn_like(parameter))
    return module


def hf_forward(module: DeepseekV4Attention, x: torch.Tensor, first: int, cache: DynamicCache | None) -> torch.Tensor:
    """transformers' output for ``x`` at positions ``first ..``: an additive windowed causal mask
    written here; one new token sees every key the cache returns (it holds the window)."""
    rotary = DeepseekV4RotaryEmbedding(module.config)
    length = x.shape[1]
    positions = torch.arange(first, first + length)[None]
    angles = {kind: rotary(x, positions, kind) for kind in ("main", "compress")}
    mask = None
    if length > 1:
        offsets = positions[0, :, None] - torch.arange(first + length)
        mask = torch.where((offsets >= 0) & (offsets < module.sliding_window), 0.0, float("-inf"))[None, None]
    return module(x, angles, positions, mask, cache=cache)[0]


def inputs(config: DeepseekV4Config) -> torch.Tensor:
    return torch.randn(2, LENGTH, config.hidden_size, generator=torch.Generator().manual_seed(1))


@torch.no_grad()
def test_the_full_forward_is_transformers() -> None:
    config = flash()
    module = hf_pair(config)
    layer = from_hf_layer(module, config).eval()
    x = inputs(config)
    expected = hf_forward(module, x, 0, None)
    torch.testing.assert_close(layer(x, AttentionContext(is_causal=True)).output, expected, **TOLERANCE)


@torch.no_grad()
def test_decoding_token_by_token_is_transformers() -> None:
    """A prompt past the window, then one token at a time: transformers' DynamicCache (its sliding
    layer keeps the window) and the zoo's cache give the same outputs."""
    config = flash()
    module = hf_pair(config)
    layer = from_hf_layer(module, config).eval()
    x = inputs(config)
    cache, zoo_cache = DynamicCache(config=config), None
    expected, outputs = [], []
    for first, last in [(0, PROMPT)] + [(t, t + 1) for t in range(PROMPT, LENGTH)]:
        expected.append(hf_forward(module, x[:, first:last], first, cache))
        output, zoo_cache = layer.attend_cached(x[:, first:last], zoo_cache)
        outputs.append(output)
    torch.testing.assert_close(torch.cat(outputs, 1), torch.cat(expected, 1), **TOLERANCE)
    torch.testing.assert_close(torch.cat(expected, 1), hf_forward(module, x, 0, None), **TOLERANCE)


def test_the_weights_go_both_ways_bit_for_bit() -> None:
    config = flash()
    assert_round_trip(hf_pair(config), config)


@pytest.mark.parametrize(("index", "kind"), [(1, "heavily_compressed_attention"), (2, "compressed_sparse_attention")])
def test_the_compressed_layers_are_refused_in_one_line(index: int, kind: str) -> None:
    config = flash()
    with pytest.raises(ConfigurationError, match=f"layer {index}'s '{kind}' \\(only sliding_attention\\)"):
        from_hf_layer(hf_pair(config, index), config)
