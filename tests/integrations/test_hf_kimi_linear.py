"""transformers' ``KimiLinearDeltaAttention`` and the zoo's ``kda``, weight for weight
(:mod:`zoo.integrations.hf_layers.kimi_linear`), and the ``kda`` options the map needs (``head_dim``,
``gate_bias``).

transformers' layer is built from ``KimiLinearConfig`` shrunk in width and depth only (hidden 2304;
32 linear heads of 128, 4096 wide; conv 4; one layer) divided to hidden 72; 4 heads of 32, 128 wide:
the key width stays 16/9 of the hidden size. Its weights are seeded and every parameter perturbed,
``A_log``, ``dt_bias`` and the norm's scale drawn away from their initial values. transformers runs
its recurrence and output norm in float32 whatever the module's dtype, over chunks of 64 (the zoo's:
16 here), with another L2 normalization epsilon: outputs of size ~3 agree to ``1e-5`` absolute and
relative, in float64 as in float32.
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")

from transformers import DynamicCache, KimiLinearConfig  # noqa: E402
from transformers.models.kimi_linear.modeling_kimi_linear import KimiLinearDeltaAttention  # noqa: E402

from zoo import AttentionContext  # noqa: E402
from zoo.attention import create_attention  # noqa: E402
from zoo.errors import ConfigurationError  # noqa: E402
from zoo.integrations.hf_layers import FAMILIES, from_hf_layer, into_hf_layer  # noqa: E402

TOLERANCE = {"rtol": 1e-5, "atol": 1e-5}
CAUSAL = AttentionContext(is_causal=True)


def kimi_config(**changes: object) -> KimiLinearConfig:
    """KimiLinearConfig's linear-attention sizes divided: hidden 72; 4 heads of 32 (128 wide, 16/9 of 72)."""
    sizes = dict(
        hidden_size=72, linear_num_heads=4, linear_head_dim=32, num_hidden_layers=1,
        layer_types=["linear_attention"], vocab_size=32, pad_token_id=None, bos_token_id=None, eos_token_id=None,
        num_attention_heads=4, num_key_value_heads=4, intermediate_size=64, moe_intermediate_size=16, num_experts=4,
        num_experts_per_tok=2, kv_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=16, v_head_dim=16,
    )  # fmt: skip
    return KimiLinearConfig(**(sizes | changes))


def hf_layer(dtype: torch.dtype = torch.float32) -> tuple[KimiLinearDeltaAttention, KimiLinearConfig]:
    """transformers' layer and its config, seeded; every parameter perturbed, the decay's and norm's redrawn."""
    config = kimi_config()
    torch.manual_seed(0)
    module = KimiLinearDeltaAttention(config, 0).eval()
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.add_(0.1 * torch.randn_like(parameter))
        module.forget_gate.A_log.uniform_(-1.0, 1.0)  # A in (0.37, 2.7)
        module.forget_gate.dt_bias.normal_()
        module.o_norm.weight.normal_(1.0, 0.3)
    return module.to(dtype), config


def zoo_decode(layer: torch.nn.Module, x: torch.Tensor, prompt: int) -> tuple[torch.Tensor, object]:
    output, cache = layer.attend_cached(x[:, :prompt], None)
    outputs = [output]
    for t in range(prompt, x.shape[1]):
        output, cache = layer.attend_cached(x[:, t : t + 1], cache)
        outputs.append(output)
    return torch.cat(outputs, 1), cache


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("mode", ["chunkwise", "parallel"])
@torch.no_grad()
def test_the_full_forward_is_transformers(mode: str, dtype: torch.dtype) -> None:
    module, config = hf_layer(dtype)
    layer = from_hf_layer(module, config, mode=mode, chunk_size=16).eval()
    x = torch.randn(2, 40, config.hidden_size, dtype=dtype)
    expected = module(x)
    actual = layer(x, CAUSAL).output
    assert actual.dtype == dtype and expected.abs().max() > 1  # outputs of a size the tolerance is read against
    torch.testing.assert_close(actual, expected, **TOLERANCE)


@torch.no_grad()
def test_decoding_token_by_token_is_transformers() -> None:
    """Outputs step by step from each side's cache, the recurrent states and the convolution windows after them."""
    module, config = hf_layer()
    layer = from_hf_layer(module, config).eval()
    x = torch.randn(2, 30, config.hidden_size)
    hf_cache = DynamicCache(config=config)
    expected = [module(x[:, :20], cache=hf_cache)] + [module(x[:, t : t + 1], cache=hf_cache) for t in range(20, 30)]
    actual, zoo_cache = zoo_decode(layer, x, prompt=20)
    torch.testing.assert_close(torch.cat(expected, 1), module(x), **TOLERANCE)
    torch.testing.assert_close(actual, torch.cat(expected, 1), **TOLERANCE)
    torch.testing.assert_close(zoo_cache.state, hf_cache.get_recurrent_state(0, state_idx=0), **TOLERANCE)
    hf_windows = hf_cache.get_conv_state(0, state_idx=0)[..., 1:].split([128, 128, 128], dim=1)  # q, k, v
    for zoo_window, hf_window in zip(zoo_cache.extra, hf_windows):
        torch.testing.assert_close(zoo_window.transpose(1, 2), hf_window)


@torch.no_grad()
def test_a_left_padded_prompt_is_transformers_on_its_real_tokens() -> None:
    module, config = hf_layer()
    layer = from_hf_layer(module, config).eval()
    x = torch.randn(2, 20, config.hidden_size)
    real = torch.ones(2, 20, dtype=torch.bool)
    real[0, :5] = False
    expected = module(x, attention_mask=real.long())
    actual = layer(x, AttentionContext.build(2, 20, attn_mask=real[:, None, :], is_causal=True)).output
    torch.testing.assert_close(actual[real], expected[real], **TOLERANCE)


def test_the_map_keeps_every_tensor_both_ways() -> None:
    """zoo -> transformers -> zoo and transformers -> zoo -> transformers are bit-equal, ``A_log`` reshaped."""
    module, config = hf_layer()
    family = FAMILIES["KimiLinearDeltaAttention"]
    torch.manual_seed(1)
    zoo_layer = family.build(config)
    with torch.no_grad():
        for parameter in zoo_layer.parameters():
            parameter.add_(torch.randn_like(parameter))
    into_hf_layer(zoo_layer, module, config)  # strictly
    assert torch.equal(module.forget_gate.A_log.flatten(), zoo_layer.decay.A_log)
    back = family.pair(config).to_zoo(module.state_dict())
    assert back.keys() == zoo_layer.state_dict().keys()
    assert all(torch.equal(back[key], value) for key, value in zoo_layer.state_dict().items())
    hf_state = module.state_dict()
    again = family.pair(config).from_zoo(from_hf_layer(module, config).state_dict())
    assert again.keys() == hf_state.keys()
    assert all(torch.equal(again[key], value) for key, value in hf_state.items())


def test_the_builder_takes_the_configs_widths_and_epsilon() -> None:
    layer = FAMILIES["KimiLinearDeltaAttention"].build(kimi_config(rms_norm_eps=1e-6))
    assert (layer.q_proj.out_features, layer.key_head_dim, layer.head_dim, layer.embed_dim) == (128, 32, 32, 72)
    assert layer.gate[1].bias is None and layer.norm.eps == 1e-6


def test_a_config_the_zoo_cannot_compute_is_refused_in_one_line() -> None:
    with pytest.raises(ConfigurationError, match="hidden_act 'gelu'") as caught:
        FAMILIES["KimiLinearDeltaAttention"].build(kimi_config(hidden_act="gelu"))
    assert "\n" not in str(caught.value)


# -- the zoo's kda options: head_dim and gate_bias --------------------------------------------------------------


def kda(seed: int = 2, **options: object) -> torch.nn.Module:
    torch.manual_seed(seed)
    return create_attention("kda", embed_dim=32, num_heads=4, **options).double().eval()


def test_kda_defaults_keep_their_state_dict() -> None:
    """Stored ``kda`` checkpoints load: the default layer's keys and shapes are those it had."""
    shapes = {key: tuple(value.shape) for key, value in kda().state_dict().items()}
    assert shapes == {
        "q_proj.weight": (32, 32), "q_proj.bias": (32,), "k_proj.weight": (32, 32), "k_proj.bias": (32,),
        "v_proj.weight": (32, 32), "v_proj.bias": (32,), "out_proj.weight": (32, 32), "out_proj.bias": (32,),
        "q_conv.weight": (32, 1, 4), "k_conv.weight": (32, 1, 4), "v_conv.weight": (32, 1, 4),
        "beta.weight": (4, 32), "decay.dt_bias": (32,), "decay.A_log": (4,), "decay.proj.0.weight": (8, 32),
        "decay.proj.1.weight": (32, 8), "gate.0.weight": (8, 32), "gate.1.weight": (32, 8), "gate.1.bias": (32,),
        "norm.weight": (8,),
    }  # fmt: skip


@torch.no_grad()
def test_head_dim_of_the_default_width_is_the_default_layer() -> None:
    x = torch.randn(2, 12, 32, dtype=torch.float64)
    plain, explicit = kda(), kda(head_dim=8)
    assert {k: v.shape for k, v in plain.state_dict().items()} == {k: v.shape for k, v in explicit.state_dict().items()}
    torch.testing.assert_close(explicit(x, CAUSAL).output, plain(x, CAUSAL).output, rtol=0, atol=0)


@torch.no_grad()
def test_a_wider_head_dim_agrees_in_every_form_and_in_decoding() -> None:
    """Keys and values 4 x 12 = 48 wide in a block of 32: the three forms and decoding agree, in float64."""
    x = torch.randn(2, 24, 32, dtype=torch.float64)
    forms = {mode: kda(head_dim=12, mode=mode, chunk_size=8)(x, CAUSAL).output for mode in ("parallel", "chunkwise")}
    forms["recurrent"] = kda(head_dim=12, mode="recurrent")(x, CAUSAL).output
    assert kda(head_dim=12).q_proj.out_features == 48 and kda(head_dim=12).v_proj.out_features == 48
    torch.testing.assert_close(forms["chunkwise"], forms["parallel"])
    torch.testing.assert_close(forms["recurrent"], forms["parallel"])
    decoded, _ = zoo_decode(kda(head_dim=12), x, prompt=10)
    torch.testing.assert_close(decoded, forms["parallel"])


@torch.no_grad()
def test_without_a_gate_bias_the_layer_is_the_default_with_a_zero_bias() -> None:
    x = torch.randn(2, 12, 32, dtype=torch.float64)
    plain, unbiased = kda(), kda(gate_bias=False)
    assert set(plain.state_dict()) - set(unbiased.state_dict()) == {"gate.1.bias"}
    plain.gate[1].bias.zero_()
    torch.testing.assert_close(unbiased(x, CAUSAL).output, plain(x, CAUSAL).output, rtol=0, atol=0)


def test_a_bad_head_dim_is_refused_in_one_line() -> None:
    with pytest.raises(ValueError, match="head_dim must be a positive integer or None, got 0"):
        create_attention("kda", embed_dim=32, num_heads=4, head_dim=0)
