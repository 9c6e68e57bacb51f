"""transformers' softmax production layers (Qwen3-Next's gated attention, gpt-oss's sink attention,
Qwen3's QK-norm attention) and the zoo's, weight for weight.

Each transformers layer is built from its production config shrunk in width and depth only (head
counts and sizes divided with their ratios kept: query to key/value heads, heads' width to the
hidden size, the rotary fraction, the window), run with the eager kernel, its weights seeded and
perturbed (norm scales, sinks, biases away from their initial values). transformers gets ``cos`` and
``sin`` from its model's rotary module for the config; the zoo's layer computes its own from the
positions. Outputs agree to float32 rounding (``1e-5``).
"""

from __future__ import annotations

from functools import partial

import pytest
import torch

pytest.importorskip("transformers")

from transformers import DynamicCache, GptOssConfig, Qwen3Config, Qwen3NextConfig  # noqa: E402
from transformers.models.gpt_oss.modeling_gpt_oss import GptOssAttention, GptOssRotaryEmbedding  # noqa: E402
from transformers.models.qwen3.modeling_qwen3 import Qwen3Attention, Qwen3RotaryEmbedding  # noqa: E402
from transformers.models.qwen3_next.modeling_qwen3_next import (  # noqa: E402
    Qwen3NextAttention,
    Qwen3NextRotaryEmbedding,
)

from tests.helpers.hf_layers import assert_round_trip, assert_steps_like_transformers
from zoo import AttentionContext  # noqa: E402
from zoo.errors import ConfigurationError  # noqa: E402
from zoo.integrations.hf_layers import from_hf_layer  # noqa: E402

TOLERANCE = {"rtol": 1e-5, "atol": 1e-5}
LENGTH, PROMPT = 150, 135  # past gpt-oss's window of 128, in the prompt and while decoding


def qwen3_next_config() -> Qwen3NextConfig:
    """Qwen3-Next's attention (hidden 2048, 16 heads of 256, 2 key/value heads, a quarter rotated)
    divided: hidden 64, 8 heads of 16, 1 key/value head, a quarter rotated (4 features)."""
    return Qwen3NextConfig(
        hidden_size=64, num_attention_heads=8, num_key_value_heads=1, head_dim=16, num_hidden_layers=1,
        layer_types=["full_attention"], vocab_size=32, attn_implementation="eager",
    )  # fmt: skip


def gpt_oss_config() -> GptOssConfig:
    """gpt-oss's attention (hidden 2880, 64 heads of 64, 8 key/value heads, window 128 on alternate
    layers, YaRN by 32 over an original 4,096 positions) divided: hidden 45, 8 heads of 8, 1 key/value
    head, window 128, YaRN by 32 over an original 64 positions (the sequences run past them)."""
    return GptOssConfig(
        hidden_size=45, num_attention_heads=8, num_key_value_heads=1, head_dim=8, num_hidden_layers=2,
        num_local_experts=2, num_experts_per_tok=1, intermediate_size=32, vocab_size=32,
        rope_parameters=GptOssConfig().rope_parameters | {"original_max_position_embeddings": 64},
        attn_implementation="eager",
    )  # fmt: skip


def qwen3_config() -> Qwen3Config:
    """Qwen3-0.6B's attention (hidden 1024, 16 heads of 128, 8 key/value heads) divided: hidden 32,
    8 heads of 8, 4 key/value heads."""
    return Qwen3Config(
        hidden_size=32, num_attention_heads=8, num_key_value_heads=4, head_dim=8, num_hidden_layers=1,
        intermediate_size=64, vocab_size=32, attn_implementation="eager",
    )  # fmt: skip


#: name: (transformers' layer, its rotary module, the config, the layer's index in the model)
PAIRS = {
    "qwen3_next": (Qwen3NextAttention, Qwen3NextRotaryEmbedding, qwen3_next_config, 0),
    "gpt_oss_sliding": (GptOssAttention, GptOssRotaryEmbedding, gpt_oss_config, 0),
    "gpt_oss_full": (GptOssAttention, GptOssRotaryEmbedding, gpt_oss_config, 1),
    "qwen3": (Qwen3Attention, Qwen3RotaryEmbedding, qwen3_config, 0),
}


def hf_pair(name: str) -> tuple[torch.nn.Module, torch.nn.Module, object]:
    """transformers' layer (seeded, every parameter perturbed; norm scales on a grid of 2^-6 so that
    Qwen3-Next's ``1 + w`` shift is exact both ways), its rotary module and config."""
    layer_class, rotary_class, config_fn, index = PAIRS[name]
    config = config_fn()
    torch.manual_seed(0)
    module = layer_class(config, index).eval()
    with torch.no_grad():
        for key, parameter in module.named_parameters():
            parameter.copy_(0.3 * torch.randn_like(parameter))
            if "norm" in key:
                parameter.copy_((parameter * 64).round() / 64)
    return module, rotary_class(config), config


def hf_forward(module, rotary, x: torch.Tensor, first: int, cache: DynamicCache | None) -> torch.Tensor:
    """transformers' output for ``x`` at positions ``first ..`` (after ``first`` cached positions):
    an additive causal mask, with the layer's window where it has one; one new token sees every key
    its cache returns (a sliding layer's cache holds only its window)."""
    length = x.shape[1]
    positions = torch.arange(first, first + length)[None]
    mask = None
    if length > 1:
        offsets = positions[0, :, None] - torch.arange(first + length)
        window = getattr(module, "sliding_window", None) or first + length + 1
        mask = torch.where((offsets >= 0) & (offsets < window), 0.0, float("-inf"))[None, None]
    return module(x, rotary(x, positions), mask, cache=cache)[0]


def seeded_inputs(config: object) -> torch.Tensor:
    torch.manual_seed(1)
    return torch.randn(2, LENGTH, config.hidden_size)


@pytest.mark.parametrize("name", list(PAIRS))
def test_the_full_forward_is_transformers(name: str) -> None:
    module, rotary, config = hf_pair(name)
    layer = from_hf_layer(module, config).eval()
    x = seeded_inputs(config)
    with torch.no_grad():
        expected = hf_forward(module, rotary, x, 0, None)
        output = layer(x, AttentionContext(is_causal=True)).output
    torch.testing.assert_close(output, expected, **TOLERANCE)


@pytest.mark.parametrize("name", list(PAIRS))
def test_decoding_token_by_token_is_transformers(name: str) -> None:
    """A prompt, then one token at a time: transformers' DynamicCache (a sliding window's keeps its
    window) and the zoo's cache give the same outputs."""
    module, rotary, config = hf_pair(name)
    layer = from_hf_layer(module, config).eval()
    x = seeded_inputs(config)
    assert_steps_like_transformers(
        layer, partial(hf_forward, module, rotary), x[:, :LENGTH], PROMPT, DynamicCache(config=config)
    )


@pytest.mark.parametrize("name", list(PAIRS))
def test_the_map_keeps_every_tensor_both_ways(name: str) -> None:
    module, _, config = hf_pair(name)
    assert_round_trip(module, config)


def test_qwen3_next_query_rows_split_per_head_and_norms_shift_by_one() -> None:
    """Head ``h``'s query is transformers' ``q_proj`` rows ``2hd .. 2hd + d``, its gate the next
    ``d``; the zoo's norm scale is transformers' ``1 + w``."""
    module, _, config = hf_pair("qwen3_next")
    layer = from_hf_layer(module, config)
    rows = module.q_proj.weight.unflatten(0, (config.num_attention_heads, 2 * config.head_dim))
    d = config.head_dim
    assert torch.equal(layer.q_proj.weight, rows[:, :d].flatten(0, 1))
    assert torch.equal(layer.gate_proj.weight, rows[:, d:].flatten(0, 1))
    assert torch.equal(layer.q_norm.weight, 1 + module.q_norm.weight)
    assert layer.rotary.rotary_dim == 4 and layer.q_norm.eps == config.rms_norm_eps


def test_a_rotation_that_changes_with_the_length_is_refused_in_one_line() -> None:
    config = gpt_oss_config()
    config.rope_parameters = {"rope_type": "dynamic", "rope_theta": 150000.0, "factor": 32.0}
    module = GptOssAttention(config, 0)
    with pytest.raises(ConfigurationError, match="rope_type 'dynamic'") as error:
        from_hf_layer(module, config)
    assert "\n" not in str(error.value)
