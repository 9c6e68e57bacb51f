"""The short convolutions every convolving layer shares (:class:`zoo.attention.modules.convolved.ShortConvolved`):
which layers take a mask per query with and without them, what their projections are, and the
parameters a checkpoint holds."""

from __future__ import annotations

import pytest
import torch

import zoo
from tests.helpers.short_conv import convolved
from zoo.attention import AttentionContext
from zoo.attention.modules.convolved import ShortConvolved

B, L, E, H = 2, 6, 16, 4
#: the layers whose convolution is an option (off by default), and what they take besides
OPTIONAL = {"softmax": {}, "forgetting": {}, "differential": {}, "mla": {}, "moba": {"block_size": 2}}


def layer(name: str, **options: object) -> ShortConvolved:
    built = zoo.create_attention(name, embed_dim=E, num_heads=H, **OPTIONAL.get(name, {}), **options).double()
    assert isinstance(built, ShortConvolved)
    return built


@pytest.mark.parametrize("name", ["softmax", "forgetting", "differential", "mla"])
def test_a_mask_per_query_is_taken_without_the_convolution_and_refused_with_it(name: str) -> None:
    """Without a convolution the layer never reads the context's key padding, so a mask that
    differs per query works as before; with one, a position's neighbours are in its projections and
    the mask is refused in one line."""
    x = torch.randn(B, L, E, dtype=torch.float64)
    per_query = torch.rand(B, L, L, generator=torch.Generator().manual_seed(0)) > 0.3
    context = AttentionContext.build(B, L, attn_mask=per_query, is_causal=True)
    plain = layer(name)
    assert torch.isfinite(plain(x, context).output).all()
    with pytest.raises(ValueError, match="differs per query"):
        layer(name, conv_size=3)(x, context)


@pytest.mark.parametrize("name", ["softmax", "differential", "moba", "gla"])
def test_the_projections_pass_each_convolution_with_padded_positions_as_zeros(name: str) -> None:
    """``convolved_projections`` against each ``<x>_proj`` then the convolution written out token
    by token, padded positions entering as zeros; without convolutions, the projections alone."""
    x = torch.randn(B, L, E, dtype=torch.float64)
    real = torch.tensor([[True] * L, [True] * (L - 2) + [False] * 2])
    context = AttentionContext.for_keys(real, is_causal=True)
    options = {} if name == "gla" else {"conv_size": 3}
    convolving, plain = layer(name, **options), layer(name, conv_size=0)
    for module, expect_windows in ((convolving, True), (plain, False)):
        projected, windows = module.convolved_projections(x, None, context)
        for out, conv_name in zip(projected, module.conv_names, strict=True):
            proj = getattr(module, conv_name.removesuffix("_conv") + "_proj")
            torch.testing.assert_close(
                out, convolved(proj(x), getattr(module, conv_name), real), rtol=1e-12, atol=1e-12
            )
        assert (windows is not None) == expect_windows


def test_a_checkpoint_holds_one_filter_per_projection_only_when_the_layer_convolves() -> None:
    assert not any("conv" in key for key in layer("mla").state_dict())
    convolving = layer("mla", conv_size=4)
    filters = {key: tuple(value.shape) for key, value in convolving.state_dict().items() if "conv" in key}
    assert filters == {
        "q_conv.weight": (convolving.q_proj.out_features, 1, 4),
        "kv_conv.weight": (convolving.kv_down.out_features, 1, 4),
    }
    assert repr(convolving).count("conv_size=4") == 1


def test_a_width_per_convolution_is_required() -> None:
    module = layer("softmax")
    with pytest.raises(ValueError, match="one width per convolution"):
        module.add_convolutions(3, [E, E])
