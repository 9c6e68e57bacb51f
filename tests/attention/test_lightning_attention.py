"""``lightning_attention`` (MiniMax-01) against a per-token float64 loop of the paper's layer, written
here from the layer's parameters (not with its kernels): SiLU on the projections, ALiBi's slopes
scaled by depth, the decaying state, one RMSNorm over all heads and the sigmoid gate; every form,
right and left padding, decoding from the state, the conformance kit, a GPT and the recall model
that learn."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor

import zoo
from tests.helpers.gpt import assert_cached_generation_matches, learn_repeating_sequence
from tests.helpers.layers import assert_chunkwise_gradients_equal, assert_every_form, decode_after_prompt
from zoo.attention.contract.cache import StateCache
from zoo.attention.variants.lightning_attention import LightningAttention, minimax_slopes
from zoo.models import GPT, RecallLM

EMBED, HEADS, LENGTH = 8, 2, 37  # 37: a multiple of no chunk size below but 1
FORMS = [("parallel", 64), ("recurrent", 64), ("auto", 64), ("chunkwise", 7), ("chunkwise", 16)]
#: the depths the tests build: unscaled, MiniMax's first layer of 4, its third
DEPTHS = [pytest.param({}, id="unscaled"), pytest.param({"layer_index": 0, "num_layers": 4}, id="layer0of4")]
DEPTHS += [pytest.param({"layer_index": 2, "num_layers": 4}, id="layer2of4")]


def layer(seed: int = 0, **kwargs) -> LightningAttention:
    """A float64 layer whose parameters are moved off their initial values."""
    torch.manual_seed(seed)
    module = zoo.create_attention("lightning_attention", embed_dim=EMBED, num_heads=HEADS, **kwargs).double().eval()
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.add_(0.3 * torch.randn_like(parameter))
    return module


def slopes(heads: int, layer_index: int, num_layers: int | None) -> list[float]:
    """The paper's slopes, one head at a time: ``2 ** (-8 (h + 1) / H)``, times MiniMax's depth factor."""
    factor = 1.0 if num_layers is None else 1 - layer_index / (num_layers - 1 + 1e-5) + 1e-5
    return [2.0 ** (-8 * (h + 1) / heads) * factor for h in range(heads)]


def reference(m: LightningAttention, x: Tensor, real: Tensor) -> Tensor:
    """The layer step by step: ``S_t = exp(-s_h) S_{t-1} + k_t^T v_t``, ``o_t = q_t S_t``; a padded
    step neither writes nor decays and reads zero."""
    batch, length, _ = x.shape

    def project(linear: torch.nn.Linear) -> Tensor:  # (B, T, H, d)
        return F.silu(x @ linear.weight.T + linear.bias).unflatten(-1, (HEADS, -1))

    q, k, v = project(m.q_proj), project(m.k_proj), project(m.v_proj)
    decays = [torch.exp(torch.tensor(-s, dtype=x.dtype)) for s in slopes(HEADS, m.layer_index, m.num_layers)]
    outputs = torch.zeros(batch, length, HEADS, v.shape[-1], dtype=x.dtype)
    for b in range(batch):
        for h in range(HEADS):
            state = torch.zeros(k.shape[-1], v.shape[-1], dtype=x.dtype)
            for t in range(length):
                if real[b, t]:
                    state = decays[h] * state + torch.outer(k[b, t, h], v[b, t, h])
                    outputs[b, t, h] = q[b, t, h] @ state
    merged = outputs.flatten(-2)
    normed = merged / (merged.square().mean(-1, keepdim=True) + 1e-6).sqrt() * m.norm.weight
    gated = normed * torch.sigmoid(x @ m.gate.weight.T)
    return gated @ m.out_proj.weight.T + m.out_proj.bias


def padded(kind: str | None) -> tuple[dict, Tensor]:
    """The mask arguments and the real tokens ``(B, T)``: right padding as lengths, left padding as
    attn_mask key columns."""
    steps = torch.arange(LENGTH)
    if kind == "right":
        lengths = torch.tensor([LENGTH, LENGTH - 11])
        return {"valid_lens": lengths}, steps < lengths[:, None]
    if kind == "left":
        real = steps >= torch.tensor([0, 9])[:, None]
        return {"attn_mask": real[:, None, :]}, real
    return {}, torch.ones(2, LENGTH, dtype=torch.bool)


def test_the_slopes_are_alibis_scaled_by_depth() -> None:
    for heads, layer_index, num_layers in [(8, 0, None), (8, 0, 80), (8, 79, 80), (6, 3, 5)]:
        actual = minimax_slopes(heads, layer_index, num_layers, torch.float64)
        torch.testing.assert_close(actual, torch.tensor(slopes(heads, layer_index, num_layers), dtype=torch.float64))
    alibi = minimax_slopes(8, 0, None, torch.float64)
    assert alibi.tolist() == [2.0**-i for i in range(1, 9)]
    last = minimax_slopes(8, 79, 80, torch.float64) / alibi  # the last layer hardly decays
    torch.testing.assert_close(last, torch.full((8,), 1e-5 + 1e-5 / 79, dtype=torch.float64), rtol=1e-3, atol=0)


@pytest.mark.parametrize("padding", [None, "right", "left"])
@pytest.mark.parametrize("depth", DEPTHS)
def test_every_form_matches_the_papers_layer(depth: dict, padding: str | None) -> None:
    module = layer(**depth)
    x = torch.randn(2, LENGTH, EMBED, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    mask, real = padded(padding)
    assert_every_form(module, x, reference(module, x, real), FORMS, **mask)


def test_decoding_from_a_chunkwise_prompt_matches_the_papers_layer() -> None:
    """A left-padded prompt of 20 tokens in chunks of 7, then one token at a time from the state."""
    module = layer(chunk_size=7, layer_index=1, num_layers=3)
    x = torch.randn(2, LENGTH, EMBED, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    _, real = padded("left")
    decoded, cache = decode_after_prompt(module, x, real, prompt=20)
    torch.testing.assert_close(decoded, reference(module, x, real), atol=1e-10, rtol=0)
    assert isinstance(cache, StateCache) and cache.length == LENGTH
    assert cache.state.shape == (2, HEADS, EMBED // HEADS, EMBED // HEADS)


def test_chunkwise_gradients_equal_the_parallel_forms() -> None:
    x = torch.randn(2, 20, EMBED, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    weights = torch.randn(2, 20, EMBED, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    assert_chunkwise_gradients_equal(lambda mode: layer(mode=mode, chunk_size=6), x, weights, torch.tensor([20, 13]))


def test_head_dim_sets_the_width_of_queries_keys_and_values() -> None:
    module = layer(head_dim=3)
    assert module.q_proj.out_features == module.v_proj.out_features == module.gate.out_features == 6
    x = torch.randn(2, LENGTH, EMBED, dtype=torch.float64, generator=torch.Generator().manual_seed(6))
    assert_every_form(module, x, reference(module, x, torch.ones(2, LENGTH, dtype=torch.bool)), FORMS[:2])


def test_it_passes_the_conformance_kit() -> None:
    report = zoo.check_attention("lightning_attention", layer_index=1, num_layers=2)
    assert {"causal", "gradients", "state_decoding", "state_size"} <= set(report.passed)


def test_a_gpt_and_the_recall_model_learn_and_each_layer_takes_its_depth() -> None:
    torch.manual_seed(0)
    model = GPT(
        8, block_size=24, d_model=16, num_heads=2, num_layers=2, attention="lightning_attention",
        attention_kwargs={"num_layers": 2},
    )  # fmt: skip
    assert [block.attention.layer_index for block in model.blocks] == [0, 1]
    losses = learn_repeating_sequence(model, steps=25, lr=1e-2)
    assert losses[-1] < 0.25 * losses[0], losses[::5]
    assert_cached_generation_matches(model)
    torch.manual_seed(0)
    recall = RecallLM(8, block_size=24, d_model=16, num_heads=2, attention="lightning_attention")
    losses = learn_repeating_sequence(recall, steps=15, lr=1e-2)
    assert losses[-1] < 0.6 * losses[0], losses[::5]


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"head_dim": 0}, "head_dim"),
        ({"layer_index": -1}, "layer_index"),
        ({"layer_index": 3, "num_layers": 3}, "num_layers"),
    ],
)
def test_bad_options_are_refused_in_one_line(options: dict, named: str) -> None:
    with pytest.raises(ValueError, match=named) as caught:
        LightningAttention(EMBED, HEADS, **options)
    assert "\n" not in str(caught.value)
