"""Partial rotary positions (``rope`` with ``fraction``) and softmax heads wider or narrower than
``embed_dim / num_heads`` (``head_dim``), held against formulas written here."""

from __future__ import annotations

import math

import pytest
import torch

import zoo
from tests.helpers.gpt import learn_repeating_sequence
from zoo import AttentionContext
from zoo.attention import create_attention
from zoo.models import GPT
from zoo.positions import RotaryEmbedding, create_position


def rotated_by_hand(x: torch.Tensor, rotary_dim: int, base: float) -> torch.Tensor:
    """Feature ``i < r / 2`` of the vector at position ``m`` paired with ``i + r / 2`` and turned by
    ``m * base^(-2i / r)``; features ``r ..`` untouched. ``x``: ``(L, d)``, positions ``0 .. L - 1``."""
    out = x.clone()
    half = rotary_dim // 2
    for m in range(x.shape[0]):
        for i in range(half):
            angle = m * base ** (-2 * i / rotary_dim)
            a, b = x[m, i].item(), x[m, i + half].item()
            out[m, i] = a * math.cos(angle) - b * math.sin(angle)
            out[m, i + half] = a * math.sin(angle) + b * math.cos(angle)
    return out


@pytest.mark.parametrize(("head_dim", "fraction", "rotary_dim"), [(16, 0.25, 4), (12, 0.5, 6), (8, 1.0, 8)])
def test_the_first_features_are_rotated_and_the_rest_pass(head_dim: int, fraction: float, rotary_dim: int) -> None:
    torch.manual_seed(0)
    x = torch.randn(9, head_dim, dtype=torch.float64)
    scheme = RotaryEmbedding(head_dim, base=500.0, fraction=fraction)
    assert scheme.rotary_dim == rotary_dim
    torch.testing.assert_close(scheme(x, torch.arange(9)), rotated_by_hand(x, rotary_dim, 500.0), rtol=1e-6, atol=1e-6)


def test_fraction_one_is_the_full_rotation_bit_for_bit() -> None:
    x = torch.randn(2, 3, 7, 10)
    positions = torch.arange(7)
    torch.testing.assert_close(
        RotaryEmbedding(10, fraction=1.0)(x, positions), RotaryEmbedding(10)(x, positions), rtol=0, atol=0
    )
    assert RotaryEmbedding(10, fraction=0.4).for_head_dim(20).rotary_dim == 8  # the fraction follows the head


@pytest.mark.parametrize(("fraction", "named"), [(0.0, "(0, 1]"), (-0.5, "(0, 1]"), (1.5, "(0, 1]"), (0.25, "even")])
def test_a_bad_fraction_is_refused_in_one_line(fraction: float, named: str) -> None:
    with pytest.raises(ValueError, match=named.replace("(", r"\(").replace("]", r"\]")) as error:
        RotaryEmbedding(12, fraction=fraction)  # 0.25 of 12 is 3 features: odd
    assert "\n" not in str(error.value)


def test_a_softmax_layer_with_its_own_head_width_is_the_formula() -> None:
    """``head_dim`` 8 beside ``embed_dim`` 12 over 3 heads, 1 key/value head, QK-norm, an elementwise
    gate and half of each head rotated, against attention written out here."""
    torch.manual_seed(0)
    heads, width, length = 3, 8, 6
    rope = create_position("rope", d_model=12, num_heads=heads, fraction=0.5)
    layer = create_attention(
        "gated_attention", embed_dim=12, num_heads=heads, head_dim=width, qk_norm=True, num_kv_heads=1, position=rope
    ).double()
    with torch.no_grad():
        for parameter in layer.parameters():
            parameter.add_(0.1 * torch.randn_like(parameter))
    x = torch.randn(1, length, 12, dtype=torch.float64)
    q = layer.q_proj(x)[0].view(length, heads, width)
    k = layer.k_proj(x)[0].view(length, 1, width)
    v = layer.v_proj(x)[0].view(length, 1, width)

    def rms(t: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return t / torch.sqrt(t.pow(2).mean(-1, keepdim=True) + 1e-6) * w

    q, k = rms(q, layer.q_norm.weight), rms(k, layer.k_norm.weight)
    rows = []
    for h in range(heads):
        qh, kh = rotated_by_hand(q[:, h], 4, 10000.0), rotated_by_hand(k[:, 0], 4, 10000.0)
        scores = (qh @ kh.T / math.sqrt(width)).masked_fill(torch.ones(length, length).triu(1).bool(), float("-inf"))
        rows.append(scores.softmax(-1) @ v[:, 0])
    gated = torch.cat(rows, -1) * torch.sigmoid(layer.gate_proj(x)[0])
    expected = layer.out_proj(gated)
    assert layer.q_proj.out_features == heads * width and layer.out_proj.out_features == 12
    torch.testing.assert_close(layer(x, AttentionContext(is_causal=True)).output[0], expected, rtol=1e-6, atol=1e-6)


def test_head_dim_none_keeps_the_layer_and_a_gpt_trains_with_wide_partial_heads() -> None:
    """The default builds the layer it did (same state-dict shapes); a GPT with 4 heads of 16 beside
    a width of 32 and a quarter of each head rotated learns a repeating sequence."""
    plain = create_attention("qk_norm", embed_dim=16, num_heads=4)
    assert {k: tuple(v.shape) for k, v in plain.state_dict().items()} == {
        "q_proj.weight": (16, 16), "q_proj.bias": (16,), "k_proj.weight": (16, 16), "k_proj.bias": (16,),
        "v_proj.weight": (16, 16), "v_proj.bias": (16,), "out_proj.weight": (16, 16), "out_proj.bias": (16,),
        "q_norm.weight": (4,), "k_norm.weight": (4,),
    }  # fmt: skip
    torch.manual_seed(0)
    model = GPT(
        vocab_size=8, d_model=32, num_heads=4, num_layers=1, block_size=24, position="rope",
        position_kwargs={"fraction": 0.25}, attention={"name": "gated_attention", "head_dim": 16, "qk_norm": True},
    )  # fmt: skip
    losses = learn_repeating_sequence(model, steps=30)
    assert losses[-1] < 0.5 * losses[0], losses[::10]


def test_wide_heads_with_sinks_and_a_window_keep_the_attention_contract() -> None:
    """The conformance kit on gpt-oss's shape of layer: heads wider than ``embed_dim / num_heads``,
    sinks, a window, one key/value head, rotated positions."""
    report = zoo.check_attention("sink_attention", head_dim=6, window=3, num_kv_heads=1, position="rope")
    assert {"shape", "padding", "causal", "weights", "gradients"} <= set(report.passed), report
