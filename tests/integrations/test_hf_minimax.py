"""transformers' ``MiniMaxLightningAttention`` and the zoo's ``lightning_attention``, weight for weight
(:mod:`zoo.integrations.hf_layers.minimax`).

transformers' layer is built from ``MiniMaxConfig`` shrunk in width and depth (hidden 4096, 32 heads
of 128, 32 layers, blocks of 256 divided: 64, 4 heads of 16, 4 layers, blocks of 16, so that 40
tokens cross its blocks), its weights seeded and every parameter perturbed. Both sides run float32
sums over other chunks (transformers' blocks of 16, the zoo's chunks of 16 or the parallel form),
and transformers' slopes are float32 buffers whatever the module's dtype: outputs of size ~2 agree
to ``1e-5``, absolute and relative.
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")

from transformers import MiniMaxConfig  # noqa: E402
from transformers.models.minimax.modeling_minimax import MiniMaxCache, MiniMaxLightningAttention  # noqa: E402

from zoo import AttentionContext  # noqa: E402
from zoo.errors import ConfigurationError  # noqa: E402
from zoo.integrations.hf_layers import FAMILIES, from_hf_layer, into_hf_layer  # noqa: E402
from zoo.integrations.hf_layers.minimax import minimax_layer, minimax_pair  # noqa: E402

TOLERANCE = {"rtol": 1e-5, "atol": 1e-5}
CAUSAL = AttentionContext(is_causal=True)


def minimax_config(**changes: object) -> MiniMaxConfig:
    sizes = dict(
        hidden_size=64, num_attention_heads=4, num_hidden_layers=4, block_size=16, intermediate_size=64,
        num_local_experts=2, num_key_value_heads=1, layer_types=["linear_attention"] * 4, vocab_size=32,
    )  # fmt: skip
    return MiniMaxConfig(**(sizes | changes))


def hf_layer(layer_index: int, dtype: torch.dtype = torch.float32) -> tuple[MiniMaxLightningAttention, MiniMaxConfig]:
    """transformers' layer at ``layer_index`` and its config, seeded, every parameter perturbed."""
    config = minimax_config()
    torch.manual_seed(layer_index)
    module = MiniMaxLightningAttention(config, layer_index).eval()
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.add_(0.1 * torch.randn_like(parameter))
    return module.to(dtype), config


def zoo_layer(module: MiniMaxLightningAttention, config: MiniMaxConfig, **options: object) -> torch.nn.Module:
    """The zoo's layer with the module's weights, at its layer index."""
    layer = minimax_layer(config, layer_index=module.layer_idx, **options).to(module.out_proj.weight.dtype)
    layer.load_state_dict(minimax_pair(config, module.layer_idx).to_zoo(module.state_dict()))
    return layer.eval()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("mode", ["chunkwise", "parallel"])
@pytest.mark.parametrize("layer_index", [0, 2])
@torch.no_grad()
def test_the_full_forward_is_transformers(layer_index: int, mode: str, dtype: torch.dtype) -> None:
    module, config = hf_layer(layer_index, dtype)
    layer = zoo_layer(module, config, mode=mode, chunk_size=16)
    x = torch.randn(2, 40, config.hidden_size, dtype=dtype)
    expected, _ = module(x, None, None)
    actual = layer(x, CAUSAL).output
    assert actual.dtype == dtype and expected.abs().max() > 1
    torch.testing.assert_close(actual, expected, **TOLERANCE)


@torch.no_grad()
def test_from_hf_layer_reads_the_modules_depth_and_refuses_buffers_of_another_in_one_line() -> None:
    _, config = hf_layer(0)
    x = torch.randn(2, 20, config.hidden_size)
    for index in (0, 2):
        module, _ = hf_layer(index)
        layer = from_hf_layer(module, config)
        assert layer.layer_index == index
        torch.testing.assert_close(layer(x, CAUSAL).output, module(x, None, None)[0], **TOLERANCE)
        into_hf_layer(layer, module, config)  # its own depth's buffers, strictly
    mislabelled, _ = hf_layer(2)
    mislabelled.layer_idx = 0
    with pytest.raises(ConfigurationError, match="slope_rate .*layer_index") as caught:
        from_hf_layer(mislabelled, config)
    assert "\n" not in str(caught.value)


@torch.no_grad()
def test_a_left_padded_prompt_is_transformers_on_its_real_tokens() -> None:
    """transformers zeroes a padded token's queries, keys and values; the zoo's padded steps write,
    decay and read nothing: on a left-padded row the two agree, and equal the row without its padding."""
    module, config = hf_layer(1)
    layer = zoo_layer(module, config)
    x = torch.randn(2, 20, config.hidden_size)
    real = torch.ones(2, 20, dtype=torch.bool)
    real[0, :5] = False
    expected, _ = module(x, None, real.long())
    actual = layer(x, AttentionContext.build(2, 20, attn_mask=real[:, None, :], is_causal=True)).output
    torch.testing.assert_close(actual[real], expected[real], **TOLERANCE)
    torch.testing.assert_close(actual[0, 5:], module(x[:1, 5:], None, None)[0][0], **TOLERANCE)


@torch.no_grad()
def test_decoding_token_by_token_is_transformers() -> None:
    """Outputs step by step from each side's cache, and the states after them."""
    module, config = hf_layer(2)
    layer = zoo_layer(module, config)
    x = torch.randn(2, 30, config.hidden_size)
    hf_cache = MiniMaxCache()
    expected = [module(x[:, :20], None, None, cache=hf_cache)[0]]
    expected += [module(x[:, t : t + 1], None, None, cache=hf_cache)[0] for t in range(20, 30)]
    actual, zoo_cache = layer.attend_cached(x[:, :20], None)
    actual = [actual]
    for t in range(20, 30):
        output, zoo_cache = layer.attend_cached(x[:, t : t + 1], zoo_cache)
        actual.append(output)
    torch.testing.assert_close(torch.cat(expected, 1), module(x, None, None)[0], **TOLERANCE)
    torch.testing.assert_close(torch.cat(actual, 1), torch.cat(expected, 1), **TOLERANCE)
    torch.testing.assert_close(zoo_cache.state, hf_cache.get_linear_cache(2), **TOLERANCE)


def test_the_map_keeps_every_tensor_both_ways() -> None:
    """zoo -> transformers -> zoo is bit-equal, and so is transformers -> zoo -> transformers, buffers included."""
    module, config = hf_layer(0)
    torch.manual_seed(1)
    layer = FAMILIES["MiniMaxLightningAttention"].build(config)
    with torch.no_grad():
        for parameter in layer.parameters():
            parameter.add_(torch.randn_like(parameter))
    hf_state = {key: value.clone() for key, value in module.state_dict().items()}
    into_hf_layer(layer, module, config)  # strictly
    back = minimax_pair(config).to_zoo(module.state_dict())
    assert back.keys() == layer.state_dict().keys()
    assert all(torch.equal(back[key], value) for key, value in layer.state_dict().items())
    assert all(torch.equal(module.state_dict()[key], hf_state[key]) for key in ("slope_rate", "diagonal_decay"))
    deeper, _ = hf_layer(3)
    again = minimax_pair(config, 3).from_zoo(zoo_layer(deeper, config).state_dict())
    assert again.keys() == deeper.state_dict().keys()
    assert all(torch.equal(again[key], value) for key, value in deeper.state_dict().items())


def test_the_fused_rows_are_per_head_query_key_value() -> None:
    module, config = hf_layer(0)
    layer = zoo_layer(module, config)
    rows = module.qkv_proj.weight.unflatten(0, (4, 3, 16))  # per head: q, k, v
    for head in range(4):
        for index, projection in enumerate((layer.q_proj, layer.k_proj, layer.v_proj)):
            assert torch.equal(projection.weight[head * 16 : (head + 1) * 16], rows[head, index])


def test_a_config_the_zoo_cannot_compute_is_refused_in_one_line() -> None:
    with pytest.raises(ConfigurationError, match="hidden_act 'gelu'") as caught:
        minimax_layer(minimax_config(hidden_act="gelu"))
    assert "\n" not in str(caught.value)
