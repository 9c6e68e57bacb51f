"""transformers' ``OlmoHybridGatedDeltaNet`` and the zoo's ``gated_deltanet`` (``expand_k``,
``expand_v``, ``negative_eigenvalues``), weight for weight.

The transformers layer is built from ``OlmoHybridConfig``'s defaults (hidden 3840, 30 heads; linear
keys of ``0.75 * hidden / heads``, values twice as wide; write strengths in ``(0, 2)``) shrunk in
width and depth: hidden 64, 4 heads, so keys of 12 and values of 24, the config's own defaults
deriving them; one linear layer and one attention layer (the config needs both). Every parameter
is perturbed. transformers runs its chunked rule over chunks of 64 in float32, the zoo over 16:
the outputs agree to float32's rounding of such sums (``1e-5``).
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")

from transformers import OlmoHybridConfig  # noqa: E402
from transformers.models.olmo_hybrid.modeling_olmo_hybrid import OlmoHybridGatedDeltaNet  # noqa: E402

from tests.helpers.hf_layers import TOLERANCE, assert_decoding_like_transformers, assert_round_trip  # noqa: E402
from zoo import AttentionContext  # noqa: E402
from zoo.integrations.hf_layers import from_hf_layer  # noqa: E402


def hf_layer(**changes: object) -> tuple[OlmoHybridGatedDeltaNet, OlmoHybridConfig]:
    """transformers' layer, seeded, every parameter perturbed."""
    sizes = dict(
        hidden_size=64, num_attention_heads=4, num_hidden_layers=2, layer_types=["linear_attention", "full_attention"],
        intermediate_size=64, vocab_size=32, pad_token_id=0, eos_token_id=1,
    )  # fmt: skip
    config = OlmoHybridConfig(**(sizes | changes))
    torch.manual_seed(0)
    module = OlmoHybridGatedDeltaNet(config, 0).eval()
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.add_(0.1 * torch.randn_like(parameter))
    return module, config


@pytest.mark.parametrize("negative", [True, False])
@torch.no_grad()
def test_the_full_forward_is_transformers(negative: bool) -> None:
    module, config = hf_layer(linear_allow_neg_eigval=negative)
    layer = from_hf_layer(module, config, mode="chunkwise", chunk_size=16).eval()
    assert layer.beta.negative_eigenvalues is negative
    x = torch.randn(2, 40, config.hidden_size)
    expected = module(x)
    assert expected.abs().max() > 1  # outputs of a size the tolerance is read against
    torch.testing.assert_close(layer(x, AttentionContext(is_causal=True)).output, expected, **TOLERANCE)


@torch.no_grad()
def test_decoding_token_by_token_is_transformers() -> None:
    """A prompt of 12 then one token at a time: the outputs and the recurrent state equal
    transformers' with its DynamicCache."""
    assert_decoding_like_transformers(*hf_layer())


def test_the_map_keeps_every_tensor_both_ways() -> None:
    module, config = hf_layer()
    assert_round_trip(module, config)


def test_the_layer_has_the_configs_widths_and_olmos_norm_epsilon() -> None:
    module, config = hf_layer(rms_norm_eps=1e-6)
    layer = from_hf_layer(module, config)
    assert (layer.q_proj.out_features, layer.v_proj.out_features) == (48, 96)  # 3/4 and 3/2 of 64
    assert layer.norm.eps == module.o_norm.variance_epsilon == 1e-5
    assert torch.equal(layer.gate.weight, module.g_proj.weight)
