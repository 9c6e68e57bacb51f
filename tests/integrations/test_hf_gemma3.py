"""transformers' ``Gemma3Attention`` and the zoo's ``qk_norm`` (``head_dim``, ``scale``, ``window``),
weight for weight, on a sliding layer and a global one.

Two production configs shrunk in width and depth only (head counts and sizes divided with their
ratios kept; the window, the rotary bases and the pattern of five sliding layers to one global
kept): Gemma 3 1B (hidden 1152, 4 heads of 256, 1 key/value head, ``query_pre_attn_scalar`` 256,
window 512) as hidden 72, 4 heads of 16, 1 key/value head, scalar 16, window 512; and Gemma 3 27B
(hidden 5376, 32 heads of 128, 16 key/value heads, scalar 168, window 1024) as hidden 168, 8 heads
of 16, 4 key/value heads, scalar 21 (the zoo's ``scale``), window 1024, its global layers' positions
scaled linearly by 8 as the released model's.
The sequences run past the window, in the prompt and while decoding. transformers runs its eager
kernel and gets ``cos`` and ``sin`` for the layer's type from its model's rotary module; the zoo's
layer computes its own. Norm weights sit on a grid of 2^-6 so that the ``1 + w`` shift is exact
both ways. Outputs agree to float32 rounding (``1e-5``).
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")

from transformers import Gemma3TextConfig  # noqa: E402
from transformers.models.gemma3.modeling_gemma3 import Gemma3Attention, Gemma3RotaryEmbedding  # noqa: E402

from tests.helpers.hf_layers import (  # noqa: E402
    assert_round_trip,
    assert_windowed_decoding_like_transformers,
    windowed_hf_forward,
)
from zoo import AttentionContext  # noqa: E402
from zoo.errors import ConfigurationError  # noqa: E402
from zoo.integrations.hf_layers import from_hf_layer  # noqa: E402
from zoo.positions.rope_scaling import LinearScaling  # noqa: E402

TOLERANCE = {"rtol": 1e-5, "atol": 1e-5}
SLIDING, GLOBAL = 0, 5  # layer_types: five sliding layers, then a global one


def gemma3_1b(**changes: object) -> Gemma3TextConfig:
    sizes = dict(
        hidden_size=72, num_attention_heads=4, num_key_value_heads=1, head_dim=16, query_pre_attn_scalar=16,
        sliding_window=512, num_hidden_layers=6, intermediate_size=64, vocab_size=32, attn_implementation="eager",
    )  # fmt: skip
    return Gemma3TextConfig(**(sizes | changes))


def gemma3_27b(**changes: object) -> Gemma3TextConfig:
    sizes = dict(
        hidden_size=168, num_attention_heads=8, num_key_value_heads=4, head_dim=16, query_pre_attn_scalar=21,
        sliding_window=1024, num_hidden_layers=6, intermediate_size=64, vocab_size=32, attn_implementation="eager",
        rope_parameters={
            "sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0},
            "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1_000_000.0},
        },
    )  # fmt: skip
    return Gemma3TextConfig(**(sizes | changes))


#: name: (the config, the layer's index, the sequence's length, the prompt's)
CASES = {
    "1b_sliding": (gemma3_1b, SLIDING, 540, 520),
    "1b_global": (gemma3_1b, GLOBAL, 540, 520),
    "27b_sliding": (gemma3_27b, SLIDING, 1040, 1030),
    "27b_global": (gemma3_27b, GLOBAL, 80, 60),
}


def hf_pair(name: str) -> tuple[Gemma3Attention, Gemma3RotaryEmbedding, Gemma3TextConfig]:
    """transformers' layer (seeded, every parameter perturbed, norm weights on a grid of 2^-6), its
    model's rotary module and the config."""
    config_fn, index, _, _ = CASES[name]
    config = config_fn()
    torch.manual_seed(0)
    module = Gemma3Attention(config, index).eval()
    with torch.no_grad():
        for key, parameter in module.named_parameters():
            parameter.copy_(0.3 * torch.randn_like(parameter))
            if "norm" in key:
                parameter.copy_((parameter * 64).round() / 64)
    return module, Gemma3RotaryEmbedding(config), config


def inputs(name: str, config: Gemma3TextConfig) -> torch.Tensor:
    torch.manual_seed(1)
    return torch.randn(1, CASES[name][2], config.hidden_size)


@pytest.mark.parametrize("name", list(CASES))
@torch.no_grad()
def test_the_full_forward_is_transformers(name: str) -> None:
    module, rotary, config = hf_pair(name)
    layer = from_hf_layer(module, config).eval()
    x = inputs(name, config)
    expected = windowed_hf_forward(module, rotary, x, 0, None)
    torch.testing.assert_close(layer(x, AttentionContext(is_causal=True)).output, expected, **TOLERANCE)


@pytest.mark.parametrize("name", list(CASES))
@torch.no_grad()
def test_decoding_token_by_token_is_transformers(name: str) -> None:
    """A prompt, then one token at a time past the window: transformers' DynamicCache and the zoo's
    cache (a WindowCache on a sliding layer) give the same outputs."""
    module, rotary, config = hf_pair(name)
    x, prompt = inputs(name, config), CASES[name][3]
    zoo_cache = assert_windowed_decoding_like_transformers(module, rotary, config, x, prompt)
    if module.is_sliding:  # the zoo's cache stops growing at the window, as transformers' does
        assert zoo_cache.keys.shape[-2] == config.sliding_window - 1


@pytest.mark.parametrize("name", ["1b_sliding", "27b_global"])
def test_the_map_keeps_every_tensor_both_ways(name: str) -> None:
    module, _, config = hf_pair(name)
    assert_round_trip(module, config)


def test_the_layer_takes_the_window_base_and_scale_of_its_type() -> None:
    """Sliding layers rotate at base 10,000 within the window, global ones at 1,000,000 over every
    key; the 27B shape scales the scores by ``21 ** -0.5`` beside heads of 16, the 1B by the default;
    the zoo's norm scale is transformers' ``1 + w``."""
    module, _, config = hf_pair("27b_global")
    layer = from_hf_layer(module, config)
    assert layer.window is None and layer.scale == 21**-0.5 and layer.rotary.base == 1_000_000
    assert layer.rotary.scaling == LinearScaling(8.0)
    sliding = from_hf_layer(Gemma3Attention(config, SLIDING), config)
    assert sliding.window == 1024 and sliding.sink_tokens == 0 and sliding.rotary.base == 10_000
    assert from_hf_layer(Gemma3Attention(gemma3_1b(), SLIDING), gemma3_1b()).scale is None
    assert torch.equal(layer.q_norm.weight, 1 + module.q_norm.weight) and layer.k_norm.eps == config.rms_norm_eps


@pytest.mark.parametrize(
    ("config", "named"),
    [
        (gemma3_1b(attn_logit_softcapping=50.0), "attn_logit_softcapping"),
        (gemma3_1b(use_bidirectional_attention=True), "use_bidirectional_attention"),
    ],
)
def test_a_config_the_zoo_cannot_compute_is_refused_in_one_line(config: Gemma3TextConfig, named: str) -> None:
    with pytest.raises(ConfigurationError, match=named) as caught:
        from_hf_layer(Gemma3Attention(config, GLOBAL), config)
    assert "\n" not in str(caught.value)
