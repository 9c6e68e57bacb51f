"""The ``softmax`` layer's ``scale`` and the delta nets' ``expand_k``, against formulations written
here, without transformers."""

from __future__ import annotations

import math

import pytest
import torch

from zoo import AttentionContext
from zoo.attention.variants.deltanet import GatedDeltaNetAttention
from zoo.attention.variants.softmax import SoftmaxAttention


@pytest.mark.parametrize("window", [None, 8])
@torch.no_grad()
def test_a_scale_equals_the_default_with_the_queries_rescaled(window: int | None) -> None:
    """Scores ``s q.k`` are the default ``q'.k / sqrt(d)`` with ``q' = s sqrt(d) q``: the query
    projection's weights and bias scaled by ``s sqrt(d)``; in full and decoding."""
    torch.manual_seed(0)
    scale, head_dim = 0.7, 8
    scaled = SoftmaxAttention(32, 4, num_kv_heads=2, head_dim=head_dim, window=window, scale=scale).eval()
    plain = SoftmaxAttention(32, 4, num_kv_heads=2, head_dim=head_dim, window=window).eval()
    plain.load_state_dict(scaled.state_dict())
    plain.q_proj.weight.mul_(scale * math.sqrt(head_dim))
    plain.q_proj.bias.mul_(scale * math.sqrt(head_dim))
    x = torch.randn(2, 20, 32)
    expected = plain(x, AttentionContext(is_causal=True)).output
    torch.testing.assert_close(scaled(x, AttentionContext(is_causal=True)).output, expected)
    output, cache = scaled.attend_cached(x[:, :15], None)
    outputs = [output]
    for t in range(15, 20):
        output, cache = scaled.attend_cached(x[:, t : t + 1], cache)
        outputs.append(output)
    torch.testing.assert_close(torch.cat(outputs, 1), expected)
    assert "scale=0.7" in repr(scaled)


def test_a_scale_needs_dot_product_scores() -> None:
    with pytest.raises(ValueError, match="scale"):
        SoftmaxAttention(32, 4, scale=0.5, scores="sigmoid")
    with pytest.raises(ValueError, match="scale"):
        SoftmaxAttention(32, 4, scale=-1.0)


def test_expand_k_sets_the_key_width_and_leaves_the_default_as_it_was() -> None:
    default = GatedDeltaNetAttention(32, 4, num_key_heads=2)
    narrow = GatedDeltaNetAttention(32, 4, num_key_heads=2, expand_k=0.5)
    assert default.q_proj.out_features == default.k_proj.out_features == 32 and default.key_head_dim == 16
    assert narrow.q_proj.out_features == narrow.k_proj.out_features == 16 and narrow.key_head_dim == 8
    assert narrow.state_dict().keys() == default.state_dict().keys()
    x = torch.randn(1, 10, 32)
    output, cache = narrow.attend_cached(x, None)
    assert cache.state.shape == (1, 4, 8, 8)  # a (dk, dv) state per value head
    torch.testing.assert_close(output, narrow(x, AttentionContext(is_causal=True)).output)
