"""Falcon-H1's token mixing in transformers and the zoo's ``parallel_hybrid``, weight for weight.

transformers' ``FalconH1DecoderLayer`` is built from ``FalconH1Config`` shrunk in width and depth
(hidden 32; 4 attention heads of 8 with 2 key/value heads; 8 Mamba-2 heads of 8 over a state of 8
in 2 groups), with multipliers other than 1 on both branches' inputs and outputs, every parameter
perturbed, and its MLP's last projection zeroed, so that the layer returns its input plus the
token mixing. The zoo's layer takes the two branches' weights through the map and runs on the
layer's normed input; the outputs agree to float32's rounding (``1e-5``), as in
``tests/integrations/test_hf_layer_equality.py``.
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")

from transformers import FalconH1Config  # noqa: E402
from transformers.models.falcon_h1.modeling_falcon_h1 import (  # noqa: E402
    FalconH1DecoderLayer,
    FalconH1RotaryEmbedding,
    compute_mup_vector,
)

from zoo import AttentionContext  # noqa: E402
from zoo.attention.variants.parallel_hybrid import ParallelHybridAttention  # noqa: E402
from zoo.errors import ConfigurationError  # noqa: E402
from zoo.integrations.hf_layers import from_hf_layer, into_hf_layer  # noqa: E402
from zoo.integrations.hf_layers.falcon_h1 import FalconH1Mixing, falcon_h1_layer  # noqa: E402

TOLERANCE = {"rtol": 1e-5, "atol": 1e-5}
MULTIPLIERS = dict(
    attention_in_multiplier=0.7, attention_out_multiplier=1.3, ssm_in_multiplier=0.8, ssm_out_multiplier=1.2
)


def falcon_h1_config(**changes: object) -> FalconH1Config:
    """FalconH1Config shrunk (hidden 32, 4 heads, 2 key/value heads, Mamba-2 64 wide in 8 heads, state
    8 in 2 groups), with Mamba-2's gated norm on, gate first (what the zoo's ``mamba2`` computes)."""
    sizes = dict(
        hidden_size=32, num_attention_heads=4, num_key_value_heads=2, mamba_d_ssm=64, mamba_n_heads=8,
        mamba_d_state=8, mamba_n_groups=2, num_hidden_layers=1, vocab_size=32, intermediate_size=64,
        mamba_rms_norm=True, mamba_norm_before_gate=False, **MULTIPLIERS,
    )  # fmt: skip
    return FalconH1Config(**(sizes | changes))


def decoder_layer(config: FalconH1Config) -> FalconH1DecoderLayer:
    """transformers' layer, seeded, every parameter perturbed, its MLP's output zeroed; its mixer
    given the muP vector that ``FalconH1Model`` registers (all ones: the config's multipliers are)."""
    torch.manual_seed(0)
    layer = FalconH1DecoderLayer(config, layer_idx=0).eval()
    layer.mamba.register_buffer("mup_vector", compute_mup_vector(config), persistent=False)
    with torch.no_grad():
        for parameter in layer.parameters():
            parameter.add_(0.2 * torch.randn_like(parameter))
        layer.feed_forward.down_proj.weight.zero_()
    return layer


def test_the_zoo_layer_computes_falcon_h1s_token_mixing() -> None:
    config = falcon_h1_config()
    hf = decoder_layer(config)
    layer = from_hf_layer(FalconH1Mixing(hf), config)
    assert isinstance(layer, ParallelHybridAttention)
    assert layer.input_multipliers == (0.7, 0.8) and layer.output_multipliers == (1.3, 1.2)
    x = torch.randn(2, 21, config.hidden_size, generator=torch.Generator().manual_seed(1))
    positions = torch.arange(x.shape[1]).expand(2, -1)
    causal = torch.full((x.shape[1], x.shape[1]), float("-inf")).triu(1).expand(2, 1, -1, -1)
    with torch.no_grad():
        expected = hf(
            x,
            attention_mask=causal,
            position_ids=positions,
            position_embeddings=FalconH1RotaryEmbedding(config)(x, positions),
        )
        expected = expected[0] if isinstance(expected, tuple) else expected
        mixed = layer(hf.input_layernorm(x), AttentionContext(is_causal=True)).output
    torch.testing.assert_close(x + mixed, expected, **TOLERANCE)


def test_the_weights_go_back_into_transformers_unchanged() -> None:
    config = falcon_h1_config()
    source, target = decoder_layer(config), FalconH1DecoderLayer(config, layer_idx=0)
    layer = from_hf_layer(FalconH1Mixing(source), config)
    into_hf_layer(layer, FalconH1Mixing(target), config)
    for name, tensor in FalconH1Mixing(source).state_dict().items():
        assert torch.equal(FalconH1Mixing(target).state_dict()[name], tensor), name


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"key_multiplier": 2.0}, "key_multiplier 2.0 scales the attention's keys"),
        ({"ssm_multipliers": [1.0, 2.0, 1.0, 1.0, 1.0]}, "ssm_multipliers .* scale in_proj's parts"),
        ({"mamba_rms_norm": False}, "mamba_rms_norm=False leaves Mamba-2's output without its gated norm"),
        ({"mamba_norm_before_gate": True}, "mamba_norm_before_gate=True norms before the gate"),
    ],
)
def test_what_the_zoo_cannot_compute_is_refused_in_one_line(changes: dict, message: str) -> None:
    with pytest.raises(ConfigurationError, match=f"FalconH1Config: {message}") as raised:
        falcon_h1_layer(falcon_h1_config(**changes))
    assert "\n" not in str(raised.value)
