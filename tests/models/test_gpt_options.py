"""The GPT's options for LLaMA- and Qwen-shaped models (``mlp``, ``norm``, ``norm_eps``,
``tie_embeddings``), each against its formula written here, and its defaults: nanoGPT's model,
with the same parameters under the same names."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from zoo.errors import DataError
from zoo.layers import AddNorm, BlockConfig, GatedFFN, ZeroCentredRMSNorm
from zoo.models import GPT

VOCAB = 19


def rms(x: torch.Tensor, eps: float) -> torch.Tensor:
    """``x / sqrt(mean(x^2) + eps)`` over the last axis."""
    return x / (x.pow(2).mean(-1, keepdim=True) + eps).sqrt()


def test_gated_mlp_is_down_of_swish_gate_times_up() -> None:
    torch.manual_seed(0)
    ffn, x = GatedFFN(8, 12, activation="silu"), torch.randn(2, 5, 8)
    gate, up = x @ ffn.gate_proj.weight.T, x @ ffn.up_proj.weight.T
    expected = (gate * torch.sigmoid(gate) * up) @ ffn.down_proj.weight.T
    torch.testing.assert_close(ffn(x), expected)
    assert [ffn.gate_proj.bias, ffn.up_proj.bias, ffn.down_proj.bias] == [None] * 3


def test_zero_centred_rms_norm_scales_by_one_plus_its_weight_in_float32() -> None:
    torch.manual_seed(0)
    norm = ZeroCentredRMSNorm(8, eps=1e-6)
    assert torch.equal(norm.weight, torch.zeros(8))  # the identity scale at initialization
    with torch.no_grad():
        norm.weight.normal_()
    x = 3 * torch.randn(4, 8)
    torch.testing.assert_close(norm(x), rms(x, 1e-6) * (1 + norm.weight))
    half = x.to(torch.bfloat16)
    expected = (rms(half.float(), 1e-6) * (1 + norm.weight)).to(torch.bfloat16)  # rounded once, at the end
    assert norm(half).dtype == torch.bfloat16
    assert torch.equal(norm(half), expected)


@pytest.mark.parametrize("norm", ["rmsnorm", "zero_centred_rmsnorm"])
def test_blocks_and_final_norm_take_the_named_norm_and_epsilon(norm: str) -> None:
    torch.manual_seed(0)
    model = GPT(VOCAB, d_model=8, num_heads=2, num_layers=1, block_size=8, norm=norm, norm_eps=0.5, bias=False)
    x = torch.randn(3, 8)
    for module in (model.final_norm, model.blocks[0].add_norm1.norm, model.blocks[0].add_norm2.norm):
        with torch.no_grad():
            module.weight.normal_()
        scale = module.weight + (1 if norm == "zero_centred_rmsnorm" else 0)
        torch.testing.assert_close(module(x), rms(x, 0.5) * scale)


def test_pre_norm_residual_with_rms_norm() -> None:
    torch.manual_seed(0)
    wrapper, x, out = AddNorm(8, norm_first=True, norm="rmsnorm", norm_eps=1e-6), torch.randn(2, 8), torch.randn(2, 8)
    torch.testing.assert_close(wrapper.pre(x), rms(x, 1e-6) * wrapper.norm.weight)
    torch.testing.assert_close(wrapper(x, out), x + out)


def test_swiglu_gpt_runs_gated_mlps_with_gpt2_initialization() -> None:
    torch.manual_seed(0)
    model = GPT(VOCAB, d_model=32, num_heads=2, num_layers=2, ffn_hidden=48, mlp="swiglu", bias=False)
    ffn = model.blocks[0].ffn
    assert isinstance(ffn, GatedFFN) and isinstance(ffn.activation, nn.SiLU)
    for projection, std in ((ffn.gate_proj, 0.02), (ffn.up_proj, 0.02), (ffn.down_proj, 0.01)):  # 0.02 / sqrt(4)
        assert abs(projection.weight.std().item() - std) < 0.2 * std


def test_untied_head_is_its_own_linear_map() -> None:
    torch.manual_seed(0)
    model = GPT(VOCAB, d_model=8, num_heads=2, num_layers=1, block_size=8, tie_embeddings=False).eval()
    tokens = torch.randint(0, VOCAB, (2, 6))
    logits, _ = model(tokens)
    torch.testing.assert_close(logits, model.forward_features(tokens) @ model.lm_head.weight.T)
    assert model.lm_head.bias is None
    assert not torch.equal(model.lm_head.weight, model.embedding.weight)


def test_defaults_are_nanogpts_model_under_the_same_names() -> None:
    torch.manual_seed(0)
    model = GPT(VOCAB, d_model=8, num_heads=2, num_layers=1, block_size=8)
    assert sorted(model.state_dict()) == sorted(
        ["embedding.weight", "position.embedding.weight", "final_norm.weight", "final_norm.bias"]
        + [f"blocks.0.add_norm{i}.norm.{p}" for i in (1, 2) for p in ("weight", "bias")]
        + [f"blocks.0.attention.{n}_proj.{p}" for n in ("q", "k", "v", "out") for p in ("weight", "bias")]
        + [f"blocks.0.ffn.net.{i}.{p}" for i in (0, 3) for p in ("weight", "bias")]
    )
    assert model.lm_head is None
    assert isinstance(model.blocks[0].ffn.net[1], nn.GELU)
    for norm in (model.final_norm, model.blocks[0].add_norm1.norm, model.blocks[0].add_norm2.norm):
        assert type(norm) is nn.LayerNorm and norm.eps == 1e-5
    tokens = torch.randint(0, VOCAB, (2, 6))
    hidden = model.forward_features(tokens)
    torch.testing.assert_close(model(tokens)[0], F.linear(hidden, model.embedding.weight))


def test_unknown_options_and_canon_d_in_a_gated_mlp_are_refused() -> None:
    with pytest.raises(DataError, match="unknown mlp 'geglu'; choose one of gelu, swiglu"):
        GPT(VOCAB, d_model=8, num_heads=2, num_layers=1, mlp="geglu")
    with pytest.raises(DataError, match="unknown norm 'batchnorm'"):
        GPT(VOCAB, d_model=8, num_heads=2, num_layers=1, norm="batchnorm")
    with pytest.raises(DataError, match="drop D from canon"):
        BlockConfig(8, 2, 16, glu=True, canon="D")
