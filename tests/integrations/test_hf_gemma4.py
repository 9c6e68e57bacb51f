"""transformers' ``Gemma4TextAttention`` and the zoo's ``qk_norm`` (``scale=1.0``, ``v_norm``, and on
the global layers their own heads, the proportional rotation and ``values="keys"``), weight for
weight, on sliding and global layers.

Two production text configs shrunk in width and depth only (head counts divided by 4 and head sizes
by 16, both layer types alike; the windows, the rotary parameters, ``attention_k_eq_v`` and the pattern of
five sliding layers to one global kept): Gemma 4 31B (hidden 5376; sliding layers 32 heads of 256
over 16 key/value heads, global layers heads of 512 over 4 key/value heads whose keys are the
values; window 1024; 60 layers) as hidden 168, 8 heads of 16 over 4 key/value heads, global heads of
32 over 1, window 1024, 6 layers; and Gemma 4 E2B (hidden 1536, 8 heads of 256 over 1 key/value
head, global heads of 512, separate values, window 512, its last 20 of 35 layers reading earlier
layers' keys and values) as hidden 48, 2 heads of 16 over 1, global heads of 32, window 512, its
last 6 of 12 layers sharing. The global layers rotate a quarter of their frequencies
(``"proportional"``) at base 1,000,000. Sequences run past the window, in the prompt and while
decoding. transformers runs its eager kernel and gets ``cos`` and ``sin`` for the layer's type from
its model's rotary module; the zoo's layer computes its own. Outputs agree to float32 rounding (``1e-5``).

KV sharing: E2B's twelve shrunk layers as a stack (each layer's output added to its input), its
window cut to 16 so that 40 positions run past it; transformers passes ``shared_kv_states`` from its
"store" layers (4, sliding; 5, global) to the last six, the zoo's layers a ``KeyValueStore``; the full
forward and token-by-token decoding agree to ``1e-4``: the sums reach 10, and each layer adds its
rounding (transformers' rotary tables are float32 in float64 too; the gap grows by 1e-6 to 3e-6 a
layer, with no step where the reusing layers begin).
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")

from transformers import Gemma4TextConfig  # noqa: E402
from transformers.models.gemma4.modeling_gemma4 import (  # noqa: E402
    Gemma4TextAttention,
    Gemma4TextRotaryEmbedding,
)

from tests.helpers.hf_layers import (  # noqa: E402
    assert_round_trip,
    assert_windowed_decoding_like_transformers,
    windowed_hf_forward,
)
from zoo import AttentionContext  # noqa: E402
from zoo.attention.contract.kv_sharing import KeyValueStore, SharedCache, read_sources  # noqa: E402
from zoo.attention.variants.softmax_recipes import QKNormAttention  # noqa: E402
from zoo.errors import ConfigurationError  # noqa: E402
from zoo.integrations.hf_layers import from_hf_layer  # noqa: E402

TOLERANCE = {"rtol": 1e-5, "atol": 1e-5}
STACK_TOLERANCE = {"rtol": 1e-4, "atol": 1e-4}  # twelve layers' rounding, summed
SLIDING, GLOBAL = 0, 5  # layer_types: five sliding layers, then a global one
SMALL = dict(intermediate_size=64, vocab_size=32, vocab_size_per_layer_input=32, hidden_size_per_layer_input=8)


def gemma4_31b(**changes: object) -> Gemma4TextConfig:
    sizes = dict(
        hidden_size=168, num_attention_heads=8, num_key_value_heads=4, head_dim=16, global_head_dim=32,
        num_global_key_value_heads=1, attention_k_eq_v=True, sliding_window=1024, num_hidden_layers=6,
        attn_implementation="eager", **SMALL,
    )  # fmt: skip
    return Gemma4TextConfig(**(sizes | changes))


def gemma4_e2b(**changes: object) -> Gemma4TextConfig:
    sizes = dict(
        hidden_size=48, num_attention_heads=2, num_key_value_heads=1, head_dim=16, global_head_dim=32,
        sliding_window=512, num_hidden_layers=12, num_kv_shared_layers=6, attn_implementation="eager", **SMALL,
    )  # fmt: skip
    return Gemma4TextConfig(**(sizes | changes))


#: name: (the config, the layer's index, the sequence's length, the prompt's)
CASES = {
    "31b_sliding": (gemma4_31b, SLIDING, 1040, 1030),
    "31b_global": (gemma4_31b, GLOBAL, 80, 60),
    "e2b_sliding": (gemma4_e2b, SLIDING, 530, 515),
    "e2b_global": (gemma4_e2b, GLOBAL, 80, 60),  # the global layer that stores its keys for the sharing ones
}


def hf_pair(name: str) -> tuple[Gemma4TextAttention, Gemma4TextRotaryEmbedding, Gemma4TextConfig]:
    """transformers' layer (seeded, every parameter perturbed: projections of standard deviation
    ``fan_in ** -0.5``, so outputs are of order one; norm weights ``1 + 0.3 z``), its model's rotary
    module and the config."""
    config_fn, index, _, _ = CASES[name]
    config = config_fn()
    torch.manual_seed(0)
    module = Gemma4TextAttention(config, index).eval()
    with torch.no_grad():
        for parameter in module.parameters():
            noise = torch.randn_like(parameter)
            parameter.copy_(noise * parameter.shape[1] ** -0.5 if parameter.ndim == 2 else 1 + 0.3 * noise)
    return module, Gemma4TextRotaryEmbedding(config), config


def inputs(name: str, config: Gemma4TextConfig) -> torch.Tensor:
    torch.manual_seed(1)
    return torch.randn(1, CASES[name][2], config.hidden_size)


@pytest.mark.parametrize("name", list(CASES))
@torch.no_grad()
def test_the_full_forward_is_transformers(name: str) -> None:
    module, rotary, config = hf_pair(name)
    layer = from_hf_layer(module, config).eval()
    x = inputs(name, config)
    expected = windowed_hf_forward(module, rotary, x, 0, None, {})
    torch.testing.assert_close(layer(x, AttentionContext(is_causal=True)).output, expected, **TOLERANCE)


@pytest.mark.parametrize("name", ["31b_sliding", "31b_global", "e2b_global"])
@torch.no_grad()
def test_decoding_token_by_token_is_transformers(name: str) -> None:
    """A prompt, then one token at a time past the window: transformers' DynamicCache and the zoo's
    cache (a WindowCache on a sliding layer) give the same outputs."""
    module, rotary, config = hf_pair(name)
    x, prompt = inputs(name, config), CASES[name][3]
    zoo_cache = assert_windowed_decoding_like_transformers(module, rotary, config, x, prompt, {})
    if module.is_sliding:  # the zoo's cache stops growing at the window, as transformers' does
        assert zoo_cache.keys.shape[-2] == config.sliding_window - 1


@pytest.mark.parametrize("name", ["31b_sliding", "31b_global", "e2b_global"])
def test_the_map_keeps_every_tensor_both_ways(name: str) -> None:
    module, _, config = hf_pair(name)
    assert_round_trip(module, config)


def test_each_layer_takes_the_shape_rotation_and_values_of_its_type() -> None:
    """31B's global layer: heads of 32 over one key/value head, no value projection, a quarter of
    the frequencies rotated at 1,000,000; its sliding layers: heads of 16 over 4, their own values,
    every frequency at 10,000 within the window. Every layer: unscaled scores, a scale-free value norm."""
    module, _, config = hf_pair("31b_global")
    layer = from_hf_layer(module, config)
    assert (layer.head_dim, layer.num_kv_heads, layer.window, layer.values) == (32, 1, None, "keys")
    assert layer.v_proj is None and "v_proj.weight" not in layer.state_dict()
    assert layer.rotary.partial == "proportional" and layer.rotary.fraction == 0.25 and layer.rotary.base == 1e6
    assert layer.scale == 1.0 and layer.v_norm.weight is None and layer.v_norm.eps == config.rms_norm_eps
    sliding = from_hf_layer(Gemma4TextAttention(config, SLIDING), config)
    assert (sliding.head_dim, sliding.num_kv_heads, sliding.window, sliding.values) == (16, 4, 1024, "projected")
    assert sliding.rotary.fraction == 1.0 and sliding.rotary.base == 10_000 and sliding.sink_tokens == 0


@torch.no_grad()
def test_keys_as_values_is_a_value_projection_equal_to_the_key_projection() -> None:
    """``values="keys"`` against an independent formulation: the default layer whose ``v_proj`` holds
    the key projection's weights (the values then ``W_k x``, before the keys' norm and rotation)."""
    torch.manual_seed(2)
    options = dict(num_kv_heads=2, head_dim=8, v_norm=True, position=None, bias=True)
    shared = QKNormAttention(32, 4, values="keys", **options).eval()
    plain = QKNormAttention(32, 4, **options).eval()
    state = shared.state_dict()
    plain.load_state_dict(state | {"v_proj.weight": state["k_proj.weight"], "v_proj.bias": state["k_proj.bias"]})
    x = torch.randn(2, 9, 32)
    context = AttentionContext(is_causal=True)
    torch.testing.assert_close(shared(x, context).output, plain(x, context).output)


@torch.no_grad()
def test_the_value_norm_divides_each_value_head_by_its_root_mean_square() -> None:
    """``v_norm`` against the equation: with a value norm, the layer's output equals the plain
    layer's run on the values ``v / sqrt(mean(v^2) + eps)`` per head, written out here."""
    torch.manual_seed(3)
    normed = QKNormAttention(32, 4, num_kv_heads=2, head_dim=8, v_norm=True).eval()
    plain = QKNormAttention(32, 4, num_kv_heads=2, head_dim=8).eval()
    plain.load_state_dict(normed.state_dict())
    x = torch.randn(2, 9, 32)
    k, v = plain.project_kv(x, x)
    v = v / (v.pow(2).mean(-1, keepdim=True) + normed.v_norm.eps).sqrt()
    context = AttentionContext(is_causal=True)
    expected = plain.attend_projected(x, k, v, context).output
    torch.testing.assert_close(normed(x, context).output, expected)
    assert not torch.allclose(plain(x, context).output, expected)


@pytest.mark.parametrize(
    ("config", "index", "named"),
    [
        (gemma4_e2b(num_kv_shared_layers=12), 11, "every layer reuses"),
        (gemma4_31b(use_bidirectional_attention="all"), GLOBAL, "use_bidirectional_attention"),
    ],
)
def test_a_config_the_zoo_cannot_compute_is_refused_in_one_line(
    config: Gemma4TextConfig, index: int, named: str
) -> None:
    with pytest.raises(ConfigurationError, match=named) as caught:
        from_hf_layer(Gemma4TextAttention(config, index), config)
    assert "\n" not in str(caught.value)


def test_keys_as_values_refuses_what_it_cannot_read() -> None:
    with pytest.raises(ValueError, match="values='keys'") as caught:
        QKNormAttention(32, 4, head_dim=8, v_head_dim=4, values="keys")
    assert "\n" not in str(caught.value)


def e2b_stack() -> tuple[list[Gemma4TextAttention], Gemma4TextRotaryEmbedding, Gemma4TextConfig]:
    """E2B's twelve layers (the last six reuse), window 16, every parameter perturbed as :func:`hf_pair`'s."""
    config = gemma4_e2b(sliding_window=16)
    torch.manual_seed(4)
    modules = [Gemma4TextAttention(config, index).eval() for index in range(config.num_hidden_layers)]
    with torch.no_grad():
        for parameter in (parameter for module in modules for parameter in module.parameters()):
            noise = torch.randn_like(parameter)
            parameter.copy_(noise * parameter.shape[1] ** -0.5 if parameter.ndim == 2 else 1 + 0.3 * noise)
    return modules, Gemma4TextRotaryEmbedding(config), config


@torch.no_grad()
def test_a_stack_with_kv_sharing_is_transformers_in_the_full_forward_and_token_by_token() -> None:
    """``h <- h + attention_i(h)`` over the twelve layers: transformers' with a DynamicCache and one
    ``shared_kv_states`` a forward, the zoo's with a ``KeyValueStore`` a forward; a prompt of 20, then
    one token at a time to 40, and the whole sequence at once."""
    from transformers import DynamicCache

    modules, rotary, config = e2b_stack()
    layers = [from_hf_layer(module, config).eval() for module in modules]
    assert [layer.kv_source for layer in layers] == [None] * 6 + [4, 4, 4, 4, 4, 5]
    torch.manual_seed(5)
    x = torch.randn(1, 40, config.hidden_size)
    steps = [(0, 20)] + [(t, t + 1) for t in range(20, 40)]
    hf_cache, zoo_caches, expected, actual = DynamicCache(config=config), [None] * len(layers), [], []
    for first, last in [(0, 40)] + steps:
        cache = None if last - first == 40 else hf_cache
        hf, shared = x[:, first:last], {}
        for module in modules:
            hf = hf + windowed_hf_forward(module, rotary, hf, first, cache, shared)
        context = AttentionContext(is_causal=True, offset=first, kv_store=KeyValueStore(read_sources(layers)))
        zoo = x[:, first:last]
        for index, layer in enumerate(layers):
            if cache is None:
                zoo = zoo + layer(zoo, context).output
            else:
                output, zoo_caches[index] = layer.attend_cached(zoo, zoo_caches[index], context)
                zoo = zoo + output
        expected.append(hf)
        actual.append(zoo)
    torch.testing.assert_close(actual[0], expected[0], **STACK_TOLERANCE)
    torch.testing.assert_close(torch.cat(actual[1:], 1), torch.cat(expected[1:], 1), **STACK_TOLERANCE)
    torch.testing.assert_close(torch.cat(actual[1:], 1), actual[0], **STACK_TOLERANCE)
    assert all(isinstance(cache, SharedCache) and cache.nbytes == 0 for cache in zoo_caches[6:])


def test_a_reusing_layer_keeps_its_queries_and_output_only_both_ways() -> None:
    modules, _, config = e2b_stack()
    layer = from_hf_layer(modules[11], config)
    assert set(layer.state_dict()) == {"q_proj.weight", "q_norm.weight", "out_proj.weight"}
    assert layer.kv_source == 5 and layer.k_norm is None and layer.q_norm.eps == config.rms_norm_eps
    assert_round_trip(modules[11], config)
    assert_round_trip(modules[10], config)
