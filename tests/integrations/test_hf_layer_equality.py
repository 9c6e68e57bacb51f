"""``zoo.integrations.hf_layers``: transformers' production recurrent layers and the zoo's, weight for weight.

Each transformers layer is built from its production config class shrunk in width and depth only
(hidden size, head counts and head sizes divided, their ratios, gates, conv size, epsilons and
step-size ranges kept), its weights seeded and every parameter perturbed (so that norms, ``D`` and
the decays are not at their initial values); the zoo's layer takes the same weights through the
map. Tolerances: transformers runs both recurrences in float32 whatever the input's dtype (its
reference kernels cast to float32), over other chunks (Mamba-2's 256, Qwen3-Next's 64) than the
zoo's (16 here), with another L2 normalization epsilon (see the module docstring): the outputs, of
size up to ~5, agree to float32's rounding of such sums, ``1e-5`` absolute and relative, in
float64 as in float32.
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")

from transformers import DynamicCache, Mamba2Config, Qwen3NextConfig  # noqa: E402
from transformers.models.mamba2.modeling_mamba2 import Mamba2Mixer  # noqa: E402
from transformers.models.qwen3_next.modeling_qwen3_next import Qwen3NextGatedDeltaNet  # noqa: E402

import zoo  # noqa: E402
from zoo import AttentionContext  # noqa: E402
from zoo.attention import create_attention  # noqa: E402
from zoo.errors import ConfigurationError  # noqa: E402
from zoo.integrations.hf_layers import FAMILIES, from_hf_layer, into_hf_layer  # noqa: E402

TOLERANCE = {"rtol": 1e-5, "atol": 1e-5}
CAUSAL = AttentionContext(is_causal=True)


def mamba2_config(**changes: object) -> Mamba2Config:
    """Mamba2Config's defaults (hidden 4096, 128 heads of 64, state 128, 8 groups) divided: 64, 8 x 16, 16, 2."""
    sizes = dict(
        hidden_size=64, num_heads=8, head_dim=16, state_size=16, n_groups=2, num_hidden_layers=1, vocab_size=32
    )
    return Mamba2Config(**(sizes | changes))


def qwen3_next_config(**changes: object) -> Qwen3NextConfig:
    """Qwen3NextConfig's defaults (hidden 2048; 16 key heads of 128, 32 value heads of 128) divided:
    64; 4 key heads of 16, 8 value heads of 16 (keys as wide as the hidden size, values twice)."""
    sizes = dict(
        hidden_size=64, linear_num_key_heads=4, linear_key_head_dim=16, linear_num_value_heads=8,
        linear_value_head_dim=16, num_attention_heads=4, num_key_value_heads=1, head_dim=16, intermediate_size=128,
        num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, shared_expert_intermediate_size=32,
        num_hidden_layers=1, layer_types=["linear_attention"], vocab_size=32,
    )  # fmt: skip
    return Qwen3NextConfig(**(sizes | changes))


PAIRS = {"mamba2": (Mamba2Mixer, mamba2_config), "qwen3_next": (Qwen3NextGatedDeltaNet, qwen3_next_config)}


def hf_layer(name: str, dtype: torch.dtype = torch.float32) -> tuple[torch.nn.Module, object]:
    """transformers' layer and its config, seeded, every parameter perturbed."""
    module_class, config_fn = PAIRS[name]
    config = config_fn()
    torch.manual_seed(0)
    module = module_class(config, 0).eval()
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.add_(0.1 * torch.randn_like(parameter))
    return module.to(dtype), config


def hf_decode(module: torch.nn.Module, config: object, x: torch.Tensor, prompt: int) -> tuple[torch.Tensor, object]:
    """transformers' outputs for a prompt of ``prompt`` steps then one step at a time, with its cache."""
    cache = DynamicCache(config=config)
    outputs = [module(x[:, :prompt], cache=cache)]
    outputs += [module(x[:, t : t + 1], cache=cache) for t in range(prompt, x.shape[1])]
    return torch.cat(outputs, 1), cache


def zoo_decode(layer: torch.nn.Module, x: torch.Tensor, prompt: int) -> tuple[torch.Tensor, object]:
    """The zoo's, with its StateCache."""
    output, cache = layer.attend_cached(x[:, :prompt], None)
    outputs = [output]
    for t in range(prompt, x.shape[1]):
        output, cache = layer.attend_cached(x[:, t : t + 1], cache)
        outputs.append(output)
    return torch.cat(outputs, 1), cache


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("mode", ["chunkwise", "parallel"])
@pytest.mark.parametrize("name", list(PAIRS))
@torch.no_grad()
def test_the_full_forward_is_transformers(name: str, mode: str, dtype: torch.dtype) -> None:
    module, config = hf_layer(name, dtype)
    layer = from_hf_layer(module, config, mode=mode, chunk_size=16).eval()
    x = torch.randn(2, 40, config.hidden_size, dtype=dtype)
    expected = module(x)
    actual = layer(x, CAUSAL).output
    assert actual.dtype == dtype and expected.abs().max() > 1  # outputs of a size the tolerance is read against
    torch.testing.assert_close(actual, expected, **TOLERANCE)


@pytest.mark.parametrize("name", list(PAIRS))
@torch.no_grad()
def test_a_left_padded_prompt_is_transformers_on_its_real_tokens(name: str) -> None:
    """transformers zeroes padded tokens (its mask ``(B, T)``); the zoo's padded steps write, decay and
    read nothing: on a left-padded row the two agree, and equal the row without its padding."""
    module, config = hf_layer(name)
    layer = from_hf_layer(module, config).eval()
    x = torch.randn(2, 20, config.hidden_size)
    real = torch.ones(2, 20, dtype=torch.bool)
    real[0, :5] = False
    expected = module(x, attention_mask=real.long())
    actual = layer(x, AttentionContext.build(2, 20, attn_mask=real[:, None, :], is_causal=True)).output
    torch.testing.assert_close(actual[real], expected[real], **TOLERANCE)
    torch.testing.assert_close(actual[0, 5:], module(x[:1, 5:])[0], **TOLERANCE)


def conv_channels(name: str, config: object) -> list[int]:
    """transformers' convolution channels per zoo convolution (q, k, v), in transformers' order of them."""
    if name == "mamba2":  # x, B, C: the zoo's v, k, q
        inner, bc = config.expand * config.hidden_size, config.n_groups * config.state_size
        return [inner, bc, bc]
    keys = config.linear_num_key_heads * config.linear_key_head_dim
    return [keys, keys, config.linear_num_value_heads * config.linear_value_head_dim]


@pytest.mark.parametrize("name", list(PAIRS))
@torch.no_grad()
def test_decoding_token_by_token_is_transformers(name: str) -> None:
    """Outputs step by step, the recurrent state and the convolution windows after them, each cache's own."""
    module, config = hf_layer(name)
    layer = from_hf_layer(module, config).eval()
    x = torch.randn(2, 18, config.hidden_size)
    full = module(x)
    expected, hf_cache = hf_decode(module, config, x, prompt=12)
    actual, zoo_cache = zoo_decode(layer, x, prompt=12)
    torch.testing.assert_close(expected, full, **TOLERANCE)
    torch.testing.assert_close(actual, expected, **TOLERANCE)

    hf_state = hf_cache.get_recurrent_state(0, state_idx=0)  # Mamba-2: (B, H, head_dim, d_state)
    torch.testing.assert_close(zoo_cache.state, hf_state.transpose(-1, -2) if name == "mamba2" else hf_state)
    hf_windows = hf_cache.get_conv_state(0, state_idx=0)[..., 1:].split(conv_channels(name, config), dim=1)
    zoo_windows = [w.transpose(1, 2) for w in zoo_cache.extra]  # q, k, v: (B, channels, K - 1)
    order = [2, 1, 0] if name == "mamba2" else [0, 1, 2]
    for hf_window, index in zip(hf_windows, order):
        torch.testing.assert_close(zoo_windows[index], hf_window)


@pytest.mark.parametrize("name", list(PAIRS))
def test_the_map_keeps_every_tensor_both_ways(name: str) -> None:
    module, config = hf_layer(name)
    family = FAMILIES[type(module).__name__]
    torch.manual_seed(1)
    zoo_layer = family.build(config)
    with torch.no_grad():
        for parameter in zoo_layer.parameters():
            parameter.add_(torch.randn_like(parameter))
    into_hf_layer(zoo_layer, module, config)  # zoo -> transformers, strictly
    back = family.pair(config).to_zoo(module.state_dict())
    assert back.keys() == zoo_layer.state_dict().keys()
    assert all(torch.equal(back[key], value) for key, value in zoo_layer.state_dict().items())
    hf_state = module.state_dict()
    again = family.pair(config).from_zoo(from_hf_layer(module, config).state_dict())
    assert again.keys() == hf_state.keys()
    assert all(torch.equal(again[key], value) for key, value in hf_state.items())


def test_the_qwen3_next_map_regroups_the_fused_rows_by_head() -> None:
    """Rows of ``in_proj_qkvz`` and ``in_proj_ba`` written out per key head, as transformers lays them."""
    module, config = hf_layer("qwen3_next")
    layer = from_hf_layer(module, config)
    dk, group, dv = 16, 2, 16
    rows = module.in_proj_qkvz.weight.unflatten(0, (4, 2 * dk + 2 * group * dv))  # per key head: q, k, v, z
    ba = module.in_proj_ba.weight.unflatten(0, (4, 2 * group))  # per key head: b then a, per value head
    for head in range(8):
        key_head, member = divmod(head, group)
        values = slice(2 * dk + member * dv, 2 * dk + (member + 1) * dv)
        gates = slice(2 * dk + group * dv + member * dv, 2 * dk + group * dv + (member + 1) * dv)
        assert torch.equal(layer.v_proj.weight[head * dv : (head + 1) * dv], rows[key_head, values])
        assert torch.equal(layer.gate.weight[head * dv : (head + 1) * dv], rows[key_head, gates])
        assert torch.equal(layer.beta.weight[head], ba[key_head, member])
        assert torch.equal(layer.decay.proj.weight[head], ba[key_head, group + member])
    assert torch.equal(layer.k_proj.weight[dk : 2 * dk], rows[1, dk : 2 * dk])
    assert layer.norm.eps == config.rms_norm_eps


@pytest.mark.parametrize(
    ("config", "named"),
    [
        (mamba2_config(time_step_limit=(0.0, 1.0)), "time_step_limit"),
        (mamba2_config(use_bias=True), "use_bias"),
        (mamba2_config(layer_norm_epsilon=1e-6), "layer_norm_epsilon"),
        (qwen3_next_config(hidden_act="gelu"), "hidden_act"),
    ],
)
def test_a_config_the_zoo_cannot_compute_is_refused_in_one_line(config: object, named: str) -> None:
    build = FAMILIES["Mamba2Mixer" if isinstance(config, Mamba2Config) else "Qwen3NextGatedDeltaNet"].build
    with pytest.raises(ConfigurationError, match=named) as caught:
        build(config)
    assert "\n" not in str(caught.value)


def test_a_state_dict_of_another_layer_is_refused() -> None:
    module, config = hf_layer("qwen3_next")
    with pytest.raises(ConfigurationError, match="lacks .*in_proj_qkvz"):
        FAMILIES["Mamba2Mixer"].pair(mamba2_config()).to_zoo(module.state_dict())


# -- the zoo's grouped value heads (gated_deltanet's num_key_heads) ------------------------------------------


def grouped(**options: object) -> torch.nn.Module:
    torch.manual_seed(2)
    return create_attention("gated_deltanet", embed_dim=32, num_heads=4, num_key_heads=2, **options).double().eval()


def test_grouped_value_heads_repeat_each_key_head_over_its_group() -> None:
    """What the delta rule reads: value head ``h`` takes key head ``h // 2``'s query and key, normalized."""
    layer = grouped()
    queries, keys = torch.randn(2, 2, 5, 16, dtype=torch.float64), torch.randn(2, 2, 5, 16, dtype=torch.float64)
    recurrence = layer.prepare(
        queries, keys, torch.randn(2, 4, 5, 8, dtype=torch.float64), torch.randn(2, 5, 32, dtype=torch.float64)
    )
    for head in range(4):
        shared = head // 2
        torch.testing.assert_close(recurrence.k[:, head], keys[:, shared] / keys[:, shared].norm(dim=-1, keepdim=True))
        torch.testing.assert_close(
            recurrence.q[:, head], queries[:, shared] / queries[:, shared].norm(dim=-1, keepdim=True) / 4.0
        )


@torch.no_grad()
def test_grouped_value_heads_agree_in_every_form_and_in_decoding() -> None:
    x = torch.randn(2, 24, 32, dtype=torch.float64)
    forms = {
        mode: grouped(mode=mode, chunk_size=8)(x, CAUSAL).output for mode in ("parallel", "chunkwise", "recurrent")
    }
    torch.testing.assert_close(forms["chunkwise"], forms["parallel"])
    torch.testing.assert_close(forms["recurrent"], forms["parallel"])
    decoded, _ = zoo_decode(grouped(), x, prompt=10)
    torch.testing.assert_close(decoded, forms["parallel"])


def test_without_num_key_heads_the_layer_is_as_before() -> None:
    """None and ``num_key_heads = num_heads`` build the same parameters, which compute the same."""
    torch.manual_seed(3)
    plain = create_attention("gated_deltanet", embed_dim=32, num_heads=4)
    torch.manual_seed(3)
    explicit = create_attention("gated_deltanet", embed_dim=32, num_heads=4, num_key_heads=4)
    assert {k: v.shape for k, v in plain.state_dict().items()} == {k: v.shape for k, v in explicit.state_dict().items()}
    assert plain.q_proj.out_features == 32 and plain.key_head_dim == 8
    x = torch.randn(1, 6, 32)
    with torch.no_grad():
        torch.testing.assert_close(plain(x, CAUSAL).output, explicit(x, CAUSAL).output, rtol=0, atol=0)


def test_num_key_heads_must_divide_the_value_heads() -> None:
    with pytest.raises(ValueError, match=r"num_heads \(4\)"):
        create_attention("gated_deltanet", embed_dim=32, num_heads=4, num_key_heads=3)


def test_grouped_value_heads_pass_the_conformance_kit() -> None:
    report = zoo.check_attention("gated_deltanet", embed_dim=32, num_heads=4, num_key_heads=2)
    assert {"causal", "padding", "weights", "gradients", "state_decoding"} <= set(report.passed)
