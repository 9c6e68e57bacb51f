"""transformers' ``DeepseekV32Attention`` and the zoo's ``dsa``, weight for weight.

The layer is built from ``DeepseekV32Config`` shrunk as DeepSeek-V3's test shrinks it (112 wide, 2
heads, q_lora_rank 24, kv_lora_rank 8, heads of 8 + 4 and 8), its indexer from 64 heads of 128 to
4 heads of 8 (the width of a head's key features, as V3.2's 128), and ``index_topk`` 8 of 24
tokens, so that the selection acts on most queries. Its weights, norm scales included, are seeded;
it runs with the eager kernel (the selection an additive mask) and gets ``cos`` and ``sin`` from
``DeepseekV32RotaryEmbedding``; the zoo's layer computes its own. Outputs agree to float32
rounding (``1e-5``) in one pass and decoding token by token with transformers' cache (which holds
the indexer's keys beside the latents); the seeded scores have no tie at any query's cut.
"""

from __future__ import annotations

from functools import partial

import pytest
import torch

pytest.importorskip("transformers")

from transformers import DeepseekV32Config, DynamicCache  # noqa: E402
from transformers.models.deepseek_v32.modeling_deepseek_v32 import (  # noqa: E402
    DeepseekV32Attention,
    DeepseekV32RotaryEmbedding,
)

from tests.helpers.hf_layers import assert_round_trip, assert_steps_like_transformers
from zoo import AttentionContext  # noqa: E402
from zoo.attention.variants.dsa import DeepSeekSparseAttention  # noqa: E402
from zoo.errors import ConfigurationError  # noqa: E402
from zoo.integrations.hf_layers import from_hf_layer  # noqa: E402

TOLERANCE = {"rtol": 1e-5, "atol": 1e-5}
LENGTH, PROMPT, TOPK = 24, 13, 8


def config(**changes: object) -> DeepseekV32Config:
    """DeepSeek-V3.2's attention shrunk (see the module docstring)."""
    options = {
        "hidden_size": 112, "num_attention_heads": 2, "num_key_value_heads": 2, "q_lora_rank": 24,
        "kv_lora_rank": 8, "qk_nope_head_dim": 8, "qk_rope_head_dim": 4, "v_head_dim": 8,
        "index_n_heads": 4, "index_head_dim": 8, "index_topk": TOPK,
        "num_hidden_layers": 1, "intermediate_size": 32, "moe_intermediate_size": 16, "vocab_size": 32,
        "n_routed_experts": 4, "num_experts_per_tok": 2, "n_group": 1, "topk_group": 1,
        "attn_implementation": "eager",
    }  # fmt: skip
    return DeepseekV32Config(**(options | changes))


def hf_pair(**changes: object) -> tuple[DeepseekV32Attention, DeepseekV32RotaryEmbedding, DeepseekV32Config]:
    settings = config(**changes)
    torch.manual_seed(0)
    module = DeepseekV32Attention(settings, 0).eval()
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.copy_(0.3 * torch.randn_like(parameter) + (1.0 if parameter.dim() == 1 else 0.0))
    return module, DeepseekV32RotaryEmbedding(settings), settings


def hf_forward(module, rotary, x: torch.Tensor, first: int, cache: DynamicCache | None) -> torch.Tensor:
    """transformers' output at positions ``first ..``, causal (an additive mask over every key: the
    indexer reads it even for one query)."""
    positions = torch.arange(first, first + x.shape[1])[None]
    offsets = positions[0, :, None] - torch.arange(first + x.shape[1])
    mask = torch.where(offsets >= 0, 0.0, float("-inf"))[None, None]
    return module(x, rotary(x, positions), mask, cache=cache)[0]


def inputs(settings: DeepseekV32Config) -> torch.Tensor:
    torch.manual_seed(1)
    return torch.randn(2, LENGTH, settings.hidden_size)


def test_the_full_forward_is_transformers_and_the_selection_acts() -> None:
    module, rotary, settings = hf_pair()
    layer = from_hf_layer(module, settings).eval()
    assert isinstance(layer, DeepSeekSparseAttention) and layer.index_topk == TOPK
    x = inputs(settings)
    with torch.no_grad():
        expected = hf_forward(module, rotary, x, 0, None)
        output, weights = layer(x, AttentionContext(is_causal=True, need_weights=True))
    torch.testing.assert_close(output, expected, **TOLERANCE)
    assert torch.equal((weights[:, 0] > 0).sum(-1)[:, TOPK:], torch.full((2, LENGTH - TOPK), TOPK))
    # the selection matters: the same weights without it (mla's computation) give another output
    layer.index_topk = LENGTH
    with torch.no_grad():
        dense = layer(x, AttentionContext(is_causal=True)).output
    assert (dense - expected).abs().max() > 1e-2


def test_decoding_token_by_token_is_transformers() -> None:
    """A prompt, then one token at a time: transformers' cache (latents, rotary keys and index keys)
    and the zoo's indexed latent cache give the same outputs."""
    module, rotary, settings = hf_pair()
    layer = from_hf_layer(module, settings).eval()
    x = inputs(settings)
    assert_steps_like_transformers(
        layer, partial(hf_forward, module, rotary), x[:, :LENGTH], PROMPT, DynamicCache(config=settings)
    )


def test_the_map_keeps_every_tensor_both_ways() -> None:
    module, _, settings = hf_pair()
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
