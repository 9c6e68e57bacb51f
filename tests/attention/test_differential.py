"""Differential attention (``differential``) against the DIFF Transformer's equations written out
here with loops in float64, its lambda schedule by depth as a stack hands it, its decoding, and a
tiny GPT and a Shakespeare fit that learn with it."""

from __future__ import annotations

import math

import pytest
import torch
from torch import Tensor

import zoo
from tests.helpers.cli import flags, hparams, tiny_fit, trainer_budget
from tests.helpers.gpt import learn_repeating_sequence
from tests.helpers.short_conv import convolved
from zoo.attention import AttentionContext
from zoo.attention.contract.cache import ConvolvedCache, KeyValueCache
from zoo.attention.variants.differential import DifferentialAttention
from zoo.models.gpt import GPT

B, L, E, H = 3, 6, 16, 4


@torch.no_grad()
def reference(layer: DifferentialAttention, x: Tensor, keep: Tensor, causal: bool) -> tuple[Tensor, Tensor]:
    """Output and difference maps, one head and query at a time (no positions). ``keep`` ``(B, L, L)``."""
    batch, length, _ = x.shape
    d, heads = layer.head_dim, layer.num_heads // 2
    real = keep.any(1)  # (B, L): the positions some query sees (key padding), which a convolution reads

    def project(linear: torch.nn.Linear, conv: torch.nn.Conv1d | None) -> Tensor:
        return convolved(x @ linear.weight.T + linear.bias, conv, real)

    q, k = (
        project(layer.q_proj, layer.q_conv).view(batch, length, 2 * heads, d),
        project(layer.k_proj, layer.k_conv).view(batch, length, 2 * heads, d),
    )
    v = project(layer.v_proj, layer.v_conv).view(batch, length, heads, 2 * d)
    depth = layer.layer_index + 1  # the paper's l
    init = 0.8 - 0.6 * math.exp(-0.3 * (depth - 1))
    lam = math.exp(float(layer.lambda_q1 @ layer.lambda_k1)) - math.exp(float(layer.lambda_q2 @ layer.lambda_k2)) + init
    out = torch.zeros(batch, length, heads, 2 * d, dtype=x.dtype)
    maps = torch.zeros(batch, heads, length, length, dtype=x.dtype)
    for b in range(batch):
        for h in range(heads):
            for i in range(length):
                seen = [j for j in range(length) if keep[b, i, j] and (j <= i or not causal)]
                if not seen:
                    continue
                first = torch.softmax(torch.stack([q[b, i, 2 * h] @ k[b, j, 2 * h] for j in seen]) / math.sqrt(d), 0)
                second = torch.softmax(
                    torch.stack([q[b, i, 2 * h + 1] @ k[b, j, 2 * h + 1] for j in seen]) / math.sqrt(d), 0
                )
                for n, j in enumerate(seen):
                    maps[b, h, i, j] = first[n] - lam * second[n]
                    out[b, i, h] += maps[b, h, i, j] * v[b, j, h]
    normed = out / torch.sqrt(out.pow(2).mean(-1, keepdim=True) + 1e-5) * layer.norm.weight * (1 - init)
    return normed.reshape(batch, length, -1) @ layer.out_proj.weight.T + layer.out_proj.bias, maps


def built(layer_index: int = 2, **options) -> DifferentialAttention:
    torch.manual_seed(0)
    layer = DifferentialAttention(E, H, layer_index=layer_index, **options).double()
    with torch.no_grad():
        layer.norm.weight.uniform_(0.5, 1.5)
        for conv in filter(None, (layer.q_conv, layer.k_conv, layer.v_conv)):  # filters of a trained size
            conv.weight.normal_()
    return layer


@pytest.mark.parametrize("conv_size", [0, 3])
@pytest.mark.parametrize("causal", [True, False])
def test_the_layer_computes_the_papers_equations_with_and_without_padding(causal: bool, conv_size: int) -> None:
    layer = built(conv_size=conv_size)
    x = torch.randn(B, L, E, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    lengths = torch.tensor([L, 3, 1])
    for valid_lens in (None, lengths):
        keep = torch.ones(B, L, L, dtype=torch.bool)
        if valid_lens is not None:
            keep = keep & (torch.arange(L) < lengths[:, None, None])
        expected, maps = reference(layer, x, keep, causal)
        context = AttentionContext.build(B, L, valid_lens=valid_lens, is_causal=causal)
        torch.testing.assert_close(layer(x, context).output, expected, rtol=1e-10, atol=1e-10)  # fused kernel
        output, weights = layer(x, context.replace(need_weights=True))
        torch.testing.assert_close(output, expected, rtol=1e-10, atol=1e-10)
        torch.testing.assert_close(weights, maps, rtol=1e-10, atol=1e-10)
    assert (weights < 0).any()  # a difference of two maps: not a distribution


@pytest.mark.parametrize("conv_size", [0, 3])
def test_decoding_token_by_token_equals_the_full_forward_with_rotary_positions(conv_size: int) -> None:
    torch.manual_seed(0)
    rope = zoo.create_position("rope", d_model=E, num_heads=H)
    layer = DifferentialAttention(E, H, position=rope, conv_size=conv_size).double().eval()
    x = torch.randn(B, 9, E, dtype=torch.float64)
    keep = torch.arange(9) >= torch.tensor([0, 2, 5])[:, None]  # left-padded rows
    full = layer(x, AttentionContext.for_keys(keep, is_causal=True)).output
    outputs, cache = [], None
    for first, last in [(0, 3), *((t, t + 1) for t in range(3, 9))]:
        output, cache = layer.attend_cached(
            x[:, first:last], cache, AttentionContext.for_keys(keep[:, :last], is_causal=True)
        )
        outputs.append(output)
    real = keep[:, :, None]
    torch.testing.assert_close(torch.cat(outputs, 1) * real, full * real, rtol=1e-10, atol=1e-10)
    if conv_size:  # the keys and values beside each convolution's last conv_size - 1 inputs
        assert isinstance(cache, ConvolvedCache) and [w.shape for w in cache.windows] == [(B, conv_size - 1, E)] * 3
        with pytest.raises(TypeError, match="continues a KeyValueCache in a ConvolvedCache"):
            layer.attend_cached(x[:, :1], cache.inner)
        cache = cache.inner
    assert (
        isinstance(cache, KeyValueCache)
        and cache.keys.shape == (B, H, 9, E // H)
        and cache.values.shape == (B, H // 2, 9, 2 * E // H)
    )


def test_the_stack_hands_each_layer_its_depth_for_lambda_init() -> None:
    model = GPT(11, d_model=E, num_heads=H, num_layers=4, attention=["differential", "dot_product"])
    depths = [block.attention.layer_index for block in model.blocks[::2]]
    assert depths == [0, 2]
    assert [block.attention.lambda_init for block in model.blocks[::2]] == pytest.approx(
        [0.2, 0.8 - 0.6 * math.exp(-0.6)]
    )
    with pytest.raises(ValueError, match="num_heads must be even"):
        GPT(11, d_model=12, num_heads=3, num_layers=1, attention="differential")
    with pytest.raises(ValueError, match="DifferentialAttention: num_heads must be a positive integer, got 0"):
        zoo.create_attention("differential", embed_dim=E, num_heads=0)
    with pytest.raises(zoo.IncompatibleAttentionError, match="differential"):
        GPT(11, d_model=E, num_heads=H, num_layers=1, attention="differential", position="alibi")


def test_differential_attention_trains_a_tiny_gpt() -> None:
    torch.manual_seed(0)
    model = GPT(8, block_size=24, d_model=16, num_heads=4, num_layers=2, position="rope", attention="differential")
    losses = learn_repeating_sequence(model, steps=60)
    assert losses[-1] < 0.5 * losses[0], losses[::10]
    assert model.blocks[0].attention.lambda_q1.grad is not None


def test_a_differential_gpt_fits_shakespeare_from_the_command_line(shared_data, in_tmp) -> None:
    data = flags("data", path=shared_data / "tinyshakespeare" / "input.txt")
    options = flags("model", attention="differential", position="rope", num_layers=2)
    run = tiny_fit("gpt", *data, *options, *trainer_budget(8, 2))
    assert hparams(run)["attention"] == "differential"
    model = zoo.load_checkpoint(str(run / "checkpoints" / "last.ckpt")).model
    assert [block.attention.layer_index for block in model.blocks] == [0, 1]


def test_with_a_short_convolution_it_passes_the_kit_and_refuses_a_mask_per_query() -> None:
    report = zoo.check_attention("differential", embed_dim=8, num_heads=2, conv_size=4, position="rope")
    assert {"causal", "padding", "gradients"} <= set(report.passed)
    assert "query_masks" in report.skipped
    assert "conv_size=4" in repr(DifferentialAttention(E, H, conv_size=4))
