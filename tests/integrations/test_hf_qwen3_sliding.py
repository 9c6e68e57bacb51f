"""transformers' ``Qwen3Attention`` on a sliding layer and the zoo's ``qk_norm`` with ``window``,
weight for weight.

Qwen3-0.6B's attention (hidden 1024, 16 heads of 128, 8 key/value heads) shrunk in width and depth:
hidden 32, 8 heads of 8, 4 key/value heads, two layers with ``use_sliding_window`` and
``max_window_layers`` 1, so layer 1 is ``sliding_attention``. The window is 64 rather than the
config's default 4096: Qwen3's released models leave sliding windows off, so no production window
exists to keep, and 64 lets the sequence run past it in the prompt and while decoding. transformers
runs its eager kernel; outputs agree to float32 rounding (``1e-5``).
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")

from transformers import DynamicCache, Qwen3Config  # noqa: E402
from transformers.models.qwen3.modeling_qwen3 import Qwen3Attention, Qwen3RotaryEmbedding  # noqa: E402

from tests.helpers.hf_layers import assert_round_trip  # noqa: E402
from zoo import AttentionContext  # noqa: E402
from zoo.integrations.hf_layers import from_hf_layer  # noqa: E402

TOLERANCE = {"rtol": 1e-5, "atol": 1e-5}
WINDOW, LENGTH, PROMPT = 64, 90, 75


def sliding_pair() -> tuple[Qwen3Attention, Qwen3RotaryEmbedding, Qwen3Config]:
    """transformers' sliding layer (seeded, every parameter perturbed), its rotary module, the config."""
    config = Qwen3Config(
        hidden_size=32, num_attention_heads=8, num_key_value_heads=4, head_dim=8, num_hidden_layers=2,
        intermediate_size=64, vocab_size=32, use_sliding_window=True, sliding_window=WINDOW, max_window_layers=1,
        attn_implementation="eager",
    )  # fmt: skip
    torch.manual_seed(0)
    module = Qwen3Attention(config, 1).eval()
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.copy_(0.3 * torch.randn_like(parameter))
    return module, Qwen3RotaryEmbedding(config), config


def hf_forward(module: Qwen3Attention, rotary, x: torch.Tensor, first: int, cache: DynamicCache | None):
    """transformers' output at positions ``first ..``: a windowed causal mask written here; one new
    token sees the keys its sliding cache returns."""
    length = x.shape[1]
    positions = torch.arange(first, first + length)[None]
    mask = None
    if length > 1:
        offsets = positions[0, :, None] - torch.arange(first + length)
        mask = torch.where((offsets >= 0) & (offsets < WINDOW), 0.0, float("-inf"))[None, None]
    return module(x, rotary(x, positions), mask, cache=cache)[0]


@torch.no_grad()
def test_the_sliding_layer_is_transformers_in_full_and_decoding_past_its_window() -> None:
    module, rotary, config = sliding_pair()
    layer = from_hf_layer(module, config).eval()
    assert module.sliding_window == WINDOW and layer.window == WINDOW and layer.sink_tokens == 0
    torch.manual_seed(1)
    x = torch.randn(2, LENGTH, config.hidden_size)
    expected = hf_forward(module, rotary, x, 0, None)
    torch.testing.assert_close(layer(x, AttentionContext(is_causal=True)).output, expected, **TOLERANCE)

    cache, zoo_cache, decoded, outputs = DynamicCache(config=config), None, [], []
    for first, last in [(0, PROMPT)] + [(t, t + 1) for t in range(PROMPT, LENGTH)]:
        decoded.append(hf_forward(module, rotary, x[:, first:last], first, cache))
        output, zoo_cache = layer.attend_cached(x[:, first:last], zoo_cache)
        outputs.append(output)
    torch.testing.assert_close(torch.cat(decoded, 1), expected, **TOLERANCE)
    torch.testing.assert_close(torch.cat(outputs, 1), expected, **TOLERANCE)
    assert zoo_cache.keys.shape[-2] == WINDOW - 1


def test_the_map_keeps_every_tensor_both_ways_on_the_sliding_layer() -> None:
    module, _, config = sliding_pair()
    assert_round_trip(module, config)
