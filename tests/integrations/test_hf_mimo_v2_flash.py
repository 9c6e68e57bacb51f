"""transformers' ``MiMoV2FlashAttention`` and the zoo's ``softmax`` (``head_dim``, ``v_head_dim``,
``value_scale``; ``sinks`` and ``window`` on the sliding layers), weight for weight.

MiMo-V2-Flash's production config (``MiMoV2FlashConfig()``'s defaults: hidden 4096, 64 heads, query
and key heads of 192, value heads of 128, 4 key/value heads (8 on sliding layers), window 129, rotary
bases 5,000,000 and 10,000 on a third of each head, ``attention_value_scale`` 0.707, 48 layers)
shrunk in width and depth only: hidden 128 (/32), 16 heads (/4), 1 key/value head (/4; 2 on sliding
layers), heads of 24 and 16 (/8), so that heads per key/value head (16), the query-to-value head
ratio (1.5), the hidden size over the heads' value features (1/2, whose square root the value scale
is) and the rotated share (8 of 24, ``int(0.334 d)``) are kept; the window, the rotary bases, the
value scale and the pattern (layer 0 and every sixth full) kept, over 6 layers. The sliding layer's
sequence runs past the window, in the prompt and while decoding. Weights are drawn from seed 0 at
``1 / sqrt(fan-in)`` and the sinks at ``4 + N(0, 1)``, near ``log 129``, so that they take a fair
share of each row. transformers runs its eager kernel and gets ``cos`` and ``sin`` from its model's
rotary module; the zoo's layer computes its own. Outputs agree to float32 rounding (``1e-5``).
"""

from __future__ import annotations

import math

import pytest
import torch

pytest.importorskip("transformers")

from transformers import MiMoV2FlashConfig  # noqa: E402
from transformers.models.mimo_v2_flash.modeling_mimo_v2_flash import (  # noqa: E402
    MiMoV2FlashAttention,
    MiMoV2FlashRotaryEmbedding,
)

from tests.helpers.hf_layers import (  # noqa: E402
    assert_round_trip,
    assert_windowed_decoding_like_transformers,
    windowed_hf_forward,
)
from zoo import AttentionContext  # noqa: E402
from zoo.attention.variants.softmax import SoftmaxAttention  # noqa: E402
from zoo.errors import ConfigurationError  # noqa: E402
from zoo.integrations.hf_layers import from_hf_layer  # noqa: E402

TOLERANCE = {"rtol": 1e-5, "atol": 1e-5}
FULL, SLIDING = 5, 1  # layer_types: full at 0 and 5, sliding at 1 .. 4


def mimo_config(**changes: object) -> MiMoV2FlashConfig:
    sizes = dict(
        hidden_size=128, num_attention_heads=16, num_key_value_heads=1, head_dim=24, v_head_dim=16,
        num_hidden_layers=6, intermediate_size=64, moe_intermediate_size=16, n_routed_experts=4,
        num_experts_per_tok=2, vocab_size=32, attn_implementation="eager",
    )  # fmt: skip
    return MiMoV2FlashConfig(**(sizes | changes))


#: a default rope type's dict without partial_rotary_factor: transformers' MiMo module reads 0.334
NO_FRACTION = {
    "full_attention": {"rope_type": "default", "rope_theta": 5_000_000.0},
    "sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0},
}

#: name: (the config's changes, the layer's index, the sequence's length, the prompt's)
CASES = {
    "sliding": ({}, SLIDING, 150, 138),
    "sliding_blockwise": ({}, SLIDING, 400, 390),  # long enough beside the window for the blockwise kernel
    "full": ({}, FULL, 40, 30),
    "sliding_without_fraction": ({"rope_parameters": NO_FRACTION}, SLIDING, 40, 30),
}


def hf_pair(name: str) -> tuple[MiMoV2FlashAttention, MiMoV2FlashRotaryEmbedding, MiMoV2FlashConfig]:
    """transformers' layer (seeded, every parameter drawn anew, sinks included), its model's rotary
    module and the config."""
    changes, index, _, _ = CASES[name]
    config = mimo_config(**changes)
    torch.manual_seed(0)
    module = MiMoV2FlashAttention(config, index).eval()
    with torch.no_grad():  # projections at 1 / sqrt(fan-in); sinks near log(129), a fair share of each row
        for parameter in module.parameters():
            drawn = torch.randn_like(parameter)
            parameter.copy_(drawn * parameter.shape[-1] ** -0.5 if parameter.dim() > 1 else 4 + drawn)
    return module, MiMoV2FlashRotaryEmbedding(config), config


def inputs(name: str, config: MiMoV2FlashConfig) -> torch.Tensor:
    torch.manual_seed(1)
    return torch.randn(2, CASES[name][2], config.hidden_size)


@pytest.mark.parametrize("name", list(CASES))
@torch.no_grad()
def test_the_full_forward_is_transformers(name: str) -> None:
    module, rotary, config = hf_pair(name)
    layer = from_hf_layer(module, config).eval()
    x = inputs(name, config)
    expected = windowed_hf_forward(module, rotary, x, 0, None)
    torch.testing.assert_close(layer(x, AttentionContext(is_causal=True)).output, expected, **TOLERANCE)


@pytest.mark.parametrize("name", ["sliding", "full"])
@torch.no_grad()
def test_decoding_token_by_token_is_transformers(name: str) -> None:
    """A prompt, then one token at a time (past the window on the sliding layer): transformers'
    DynamicCache and the zoo's cache (a WindowCache on a sliding layer) give the same outputs."""
    module, rotary, config = hf_pair(name)
    x, prompt = inputs(name, config), CASES[name][3]
    zoo_cache = assert_windowed_decoding_like_transformers(module, rotary, config, x, prompt)
    held = zoo_cache.keys.shape[-2]
    assert held == (config.sliding_window - 1 if module.sliding_window else x.shape[1])


@pytest.mark.parametrize("name", ["sliding", "full"])
def test_the_map_keeps_every_tensor_both_ways(name: str) -> None:
    module, _, config = hf_pair(name)
    assert_round_trip(module, config)


def test_each_layer_type_takes_its_heads_window_sinks_and_base() -> None:
    """Sliding layers: 2 key/value heads, window 129, sinks, base 10,000; full ones: 1 key/value
    head, every key, no sinks, base 5,000,000; both rotate 8 of 24 features and scale values by 0.707."""
    module, _, config = hf_pair("sliding")
    sliding = from_hf_layer(module, config)
    assert (sliding.num_kv_heads, sliding.window, sliding.sink_tokens, sliding.rotary.base) == (2, 129, 0, 10_000)
    assert torch.equal(sliding.sinks, module.sinks)
    full = from_hf_layer(MiMoV2FlashAttention(config, FULL), config)
    assert (full.num_kv_heads, full.window, full.sinks, full.rotary.base) == (1, None, None, 5_000_000)
    for layer in (sliding, full):
        assert (layer.head_dim, layer.v_head_dim, layer.rotary.rotary_dim, layer.value_scale) == (24, 16, 8, 0.707)
    _, _, bare = hf_pair("sliding_without_fraction")
    assert from_hf_layer(MiMoV2FlashAttention(bare, FULL), bare).rotary.rotary_dim == 8


@torch.no_grad()
def test_narrow_value_heads_with_a_value_scale_and_a_gate_are_the_equation() -> None:
    """The zoo's options alone, against the equation written here: ``o_i = sigmoid(x_i W_g) * c *
    sum_j a_ij v_j`` per head, values of 3 features beside queries and keys of 5, causal softmax,
    two query heads per key/value head."""
    torch.manual_seed(2)
    layer = SoftmaxAttention(12, 4, num_kv_heads=2, head_dim=5, v_head_dim=3, value_scale=0.5, gate="elementwise")
    x = torch.randn(2, 7, 12)
    q = layer.q_proj(x).unflatten(-1, (4, 5)).transpose(1, 2)
    k = layer.k_proj(x).unflatten(-1, (2, 5)).transpose(1, 2).repeat_interleave(2, 1)
    v = layer.v_proj(x).unflatten(-1, (2, 3)).transpose(1, 2).repeat_interleave(2, 1)
    scores = (q @ k.transpose(-2, -1) / math.sqrt(5)).masked_fill(torch.ones(7, 7).triu(1).bool(), float("-inf"))
    heads = scores.softmax(-1) @ (0.5 * v) * torch.sigmoid(layer.gate_proj(x)).unflatten(-1, (4, 3)).transpose(1, 2)
    expected = layer.out_proj(heads.transpose(1, 2).flatten(-2))
    torch.testing.assert_close(layer(x, AttentionContext(is_causal=True)).output, expected, **TOLERANCE)
    assert layer.v_proj.out_features == 6 and layer.out_proj.in_features == 12


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        ({"attention_bias": True}, "attention_bias"),
        ({"rope_parameters": {kind: {"rope_type": "dynamic", "factor": 2.0, "rope_theta": 1e4} for kind in NO_FRACTION}},
         "dynamic"),
    ],
)  # fmt: skip
def test_a_config_the_zoo_cannot_compute_is_refused_in_one_line(changes: dict, named: str) -> None:
    config = mimo_config(**changes)
    with pytest.raises(ConfigurationError, match=named) as caught:
        from_hf_layer(MiMoV2FlashAttention(config, SLIDING), config)
    assert "\n" not in str(caught.value)
