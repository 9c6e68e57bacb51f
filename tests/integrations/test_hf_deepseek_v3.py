"""transformers' ``DeepseekV3Attention`` and the zoo's ``mla``, weight for weight.

The layer is built from ``DeepseekV3Config`` shrunk in width and depth only: DeepSeek-V3's 7168
wide, 128 heads, q_lora_rank 1536, kv_lora_rank 512, heads of 128 + 64 rotary key features and
128 value features, divided to 112 wide (7168 / 64), 2 heads, q_lora_rank 24, kv_lora_rank 8, heads
of 8 + 4 and 8 (the ratios kept). Its weights, norm scales included, are seeded; it runs with the
eager kernel and gets ``cos`` and ``sin`` from ``DeepseekV3RotaryEmbedding``; the zoo's layer
computes its own. Outputs agree to float32 rounding (``1e-5``), with and without the interleaved
rotation.
"""

from __future__ import annotations

from functools import partial

import pytest
import torch

pytest.importorskip("transformers")

from transformers import DeepseekV3Config, DynamicCache  # noqa: E402
from transformers.models.deepseek_v3.modeling_deepseek_v3 import (  # noqa: E402
    DeepseekV3Attention,
    DeepseekV3RotaryEmbedding,
)

from tests.helpers.hf_layers import assert_round_trip, assert_steps_like_transformers
from zoo import AttentionContext  # noqa: E402
from zoo.errors import ConfigurationError  # noqa: E402
from zoo.integrations.hf_layers import from_hf_layer  # noqa: E402

TOLERANCE = {"rtol": 1e-5, "atol": 1e-5}
LENGTH, PROMPT = 24, 17


def config(**changes: object) -> DeepseekV3Config:
    """DeepSeek-V3's attention divided by 64 in width and heads (see the module docstring)."""
    options = {
        "hidden_size": 112, "num_attention_heads": 2, "num_key_value_heads": 2, "q_lora_rank": 24,
        "kv_lora_rank": 8, "qk_nope_head_dim": 8, "qk_rope_head_dim": 4, "v_head_dim": 8,
        "num_hidden_layers": 1, "intermediate_size": 32, "moe_intermediate_size": 16, "vocab_size": 32,
        "n_routed_experts": 4, "num_experts_per_tok": 2, "n_group": 1, "topk_group": 1,
        "attn_implementation": "eager",
    }  # fmt: skip
    return DeepseekV3Config(**(options | changes))


def hf_pair(**changes: object) -> tuple[DeepseekV3Attention, DeepseekV3RotaryEmbedding, DeepseekV3Config]:
    settings = config(**changes)
    torch.manual_seed(0)
    module = DeepseekV3Attention(settings, 0).eval()
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.copy_(0.3 * torch.randn_like(parameter) + (1.0 if parameter.dim() == 1 else 0.0))
    return module, DeepseekV3RotaryEmbedding(settings), settings


def hf_forward(module, rotary, x: torch.Tensor, first: int, cache: DynamicCache | None) -> torch.Tensor:
    """transformers' output at positions ``first ..``, causal (an additive mask over every key)."""
    length = x.shape[1]
    positions = torch.arange(first, first + length)[None]
    mask = None
    if length > 1:
        offsets = positions[0, :, None] - torch.arange(first + length)
        mask = torch.where(offsets >= 0, 0.0, float("-inf"))[None, None]
    return module(x, rotary(x, positions), mask, cache=cache)[0]


def inputs(settings: DeepseekV3Config) -> torch.Tensor:
    torch.manual_seed(1)
    return torch.randn(2, LENGTH, settings.hidden_size)


#: DeepSeek-V3's released YaRN (factor 40 over 4,096 positions) over 16, so the sequences run past it
YARN = {
    "rope_type": "yarn", "rope_theta": 10000.0, "factor": 40.0, "original_max_position_embeddings": 16,
    "beta_fast": 32, "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0,
}  # fmt: skip
VARIANTS = {
    "interleaved": {},
    "halves": {"rope_interleave": False},
    "no_q_lora": {"q_lora_rank": None},
    "yarn": {"rope_parameters": YARN, "max_position_embeddings": 640},
}


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_the_full_forward_is_transformers(variant: str) -> None:
    module, rotary, settings = hf_pair(**VARIANTS[variant])
    layer = from_hf_layer(module, settings).eval()
    x = inputs(settings)
    with torch.no_grad():
        expected = hf_forward(module, rotary, x, 0, None)
        output = layer(x, AttentionContext(is_causal=True)).output
    torch.testing.assert_close(output, expected, **TOLERANCE)


def test_decoding_token_by_token_is_transformers() -> None:
    """A prompt, then one token at a time: transformers' DynamicCache (the latent and rotary key)
    and the zoo's latent cache (the absorbed form after the prompt) give the same outputs."""
    module, rotary, settings = hf_pair()
    layer = from_hf_layer(module, settings).eval()
    x = inputs(settings)
    assert_steps_like_transformers(
        layer, partial(hf_forward, module, rotary), x[:, :LENGTH], PROMPT, DynamicCache(config=settings)
    )


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_the_map_keeps_every_tensor_both_ways(variant: str) -> None:
    module, _, settings = hf_pair(**VARIANTS[variant])
    assert_round_trip(module, settings)


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        ({"attention_bias": True}, "attention_bias"),
        ({"rope_parameters": {"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 4.0}}, "rope_type"),
    ],
)
def test_what_the_zoo_lacks_is_refused_in_one_line(changes: dict, named: str) -> None:
    module, _, settings = hf_pair(**changes)
    with pytest.raises(ConfigurationError, match=named) as caught:
        from_hf_layer(module, settings)
    assert "\n" not in str(caught.value)
