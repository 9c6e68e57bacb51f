"""transformers' ``Qwen3_5GatedDeltaNet`` and the zoo's ``gated_deltanet`` (``num_key_heads``,
``expand_k``), weight for weight.

The transformers layer is built from ``Qwen3_5TextConfig``'s defaults (Qwen3.5-9B: hidden 4096; 16
key heads of 128, 32 value heads of 128) shrunk in width only: hidden 64; 4 key heads of 8, 8 value
heads of 8. The ratios hold: keys half the hidden size, values as wide, two value heads per key
head. Every parameter is perturbed so that norms and decays are away from their initial values.
transformers runs its chunked rule over chunks of 64 in float32, the zoo over 16: the outputs agree
to float32's rounding of such sums (``1e-5``).
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")

from transformers import Qwen3_5TextConfig  # noqa: E402
from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5GatedDeltaNet  # noqa: E402

from tests.helpers.hf_layers import TOLERANCE, assert_decoding_like_transformers, assert_round_trip  # noqa: E402
from zoo import AttentionContext  # noqa: E402
from zoo.errors import ConfigurationError  # noqa: E402
from zoo.integrations.hf_layers import FAMILIES, from_hf_layer  # noqa: E402

KEY_HEADS, VALUE_HEADS, HEAD = 4, 8, 8


def qwen3_5_config(**changes: object) -> Qwen3_5TextConfig:
    sizes = dict(
        hidden_size=64, linear_num_key_heads=KEY_HEADS, linear_key_head_dim=HEAD, linear_num_value_heads=VALUE_HEADS,
        linear_value_head_dim=HEAD, num_attention_heads=4, num_key_value_heads=1, head_dim=16, intermediate_size=128,
        num_hidden_layers=1, layer_types=["linear_attention"], vocab_size=32,
    )  # fmt: skip
    return Qwen3_5TextConfig(**(sizes | changes))


def hf_layer() -> tuple[Qwen3_5GatedDeltaNet, Qwen3_5TextConfig]:
    """transformers' layer, seeded, every parameter perturbed."""
    config = qwen3_5_config()
    torch.manual_seed(0)
    module = Qwen3_5GatedDeltaNet(config, 0).eval()
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.add_(0.1 * torch.randn_like(parameter))
    return module, config


@pytest.mark.parametrize("mode", ["chunkwise", "parallel"])
@torch.no_grad()
def test_the_full_forward_is_transformers(mode: str) -> None:
    module, config = hf_layer()
    layer = from_hf_layer(module, config, mode=mode, chunk_size=16).eval()
    x = torch.randn(2, 40, config.hidden_size)
    expected = module(x)
    assert expected.abs().max() > 1  # outputs of a size the tolerance is read against
    torch.testing.assert_close(layer(x, AttentionContext(is_causal=True)).output, expected, **TOLERANCE)


@torch.no_grad()
def test_decoding_token_by_token_is_transformers() -> None:
    """A prompt of 12 then one token at a time: the outputs, the recurrent state and the
    convolution's window after them equal transformers' with its DynamicCache."""
    cache, zoo_cache = assert_decoding_like_transformers(*hf_layer())
    keys, values = KEY_HEADS * HEAD, VALUE_HEADS * HEAD
    hf_windows = cache.get_conv_state(0, state_idx=0)[..., 1:].split([keys, keys, values], dim=1)
    for zoo_window, hf_window in zip(zoo_cache.extra, hf_windows):  # q, k, v
        torch.testing.assert_close(zoo_window.transpose(1, 2), hf_window)


def test_the_map_keeps_every_tensor_both_ways() -> None:
    module, config = hf_layer()
    assert_round_trip(module, config)


def test_the_map_reads_the_projections_by_kind() -> None:
    """``in_proj_qkv``'s rows are every query, then every key, then every value; value head ``h``
    reads key head ``h // 2``; the keys are half the hidden size."""
    module, config = hf_layer()
    layer = from_hf_layer(module, config)
    keys = KEY_HEADS * HEAD
    rows = module.in_proj_qkv.weight
    assert torch.equal(layer.q_proj.weight, rows[:keys]) and torch.equal(layer.k_proj.weight, rows[keys : 2 * keys])
    assert torch.equal(layer.v_proj.weight, rows[2 * keys :])
    assert torch.equal(layer.gate.weight, module.in_proj_z.weight)
    assert torch.equal(layer.decay.proj.weight, module.in_proj_a.weight)
    assert layer.q_proj.out_features * 2 == config.hidden_size and layer.qk_heads == KEY_HEADS
    assert layer.norm.eps == config.rms_norm_eps


@pytest.mark.parametrize(
    ("changes", "named"),
    [({"linear_num_value_heads": 6}, "not a multiple"), ({"hidden_act": "gelu"}, "hidden_act")],
)
def test_a_config_the_zoo_cannot_compute_is_refused_in_one_line(changes: dict, named: str) -> None:
    with pytest.raises(ConfigurationError, match=named) as caught:
        FAMILIES["Qwen3_5GatedDeltaNet"].build(qwen3_5_config(**changes))
    assert "\n" not in str(caught.value)
