"""benchmarks/bfloat16_write_strength.py: the experiment's DeltaNet rounds its write strength as
bfloat16 autocast does (exactly 2 past a logit of about 6.2, where float32 stays below), leaves
everything else as the zoo's ``deltanet`` computes it, and trains (gradients reach ``beta``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

import zoo
from tests.helpers import PROJECT_ROOT
from zoo.attention.modules.gating import WriteStrength
from zoo.plugins import import_plugin

PLUGIN = PROJECT_ROOT / "benchmarks" / "bfloat16_write_strength.py"


@pytest.fixture(scope="module")
def plugin() -> Iterator[object]:
    module = import_plugin(str(PLUGIN))
    yield module
    zoo.ATTENTION_REGISTRY.unregister("deltanet_bf16_beta")


def test_large_logits_write_exactly_two_where_float32_does_not(plugin: object) -> None:
    torch.manual_seed(0)
    rounded = plugin.BFloat16WriteStrength(4, 1, negative_eigenvalues=True)
    exact = WriteStrength(4, 1, negative_eigenvalues=True)
    exact.load_state_dict(rounded.state_dict())
    direction = rounded.weight[0] / rounded.weight[0].norm() ** 2
    logits = torch.tensor([0.5, 3.0, 7.0, 9.0])
    inputs = logits[:, None] * direction  # each row's logit is the one asked for
    beta_rounded = rounded.strengths(inputs[None], torch.float32)[0, :, 0]
    beta_exact = exact.strengths(inputs[None], torch.float32)[0, :, 0]
    assert torch.equal(beta_rounded[2:], torch.full((2,), 2.0))  # sigmoid rounds to 1 in bfloat16
    assert (beta_exact[2:] < 2).all()  # in float32 it stays short of 2
    expected = 2 * torch.sigmoid(logits[:2].to(torch.bfloat16)).float()
    torch.testing.assert_close(beta_rounded[:2], expected)


def test_the_layer_is_deltanet_but_for_beta_and_trains(plugin: object) -> None:
    from zoo.attention.variants.deltanet import DeltaNetAttention

    torch.manual_seed(0)
    layer = zoo.create_attention("deltanet_bf16_beta", embed_dim=16, num_heads=2, negative_eigenvalues=True)
    reference = DeltaNetAttention(16, 2, negative_eigenvalues=True)
    reference.load_state_dict(layer.state_dict())
    x, causal = torch.randn(2, 12, 16), zoo.AttentionContext(is_causal=True)
    with torch.no_grad():  # logits near 0 round little: the outputs agree to bfloat16's precision
        torch.testing.assert_close(layer(x, causal).output, reference(x, causal).output, atol=2e-2, rtol=2e-2)
    layer(x, causal).output.square().sum().backward()
    assert layer.beta.weight.grad is not None and layer.beta.weight.grad.abs().sum() > 0
