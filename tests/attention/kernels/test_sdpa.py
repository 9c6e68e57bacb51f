"""The fused call's guard for a query with no visible key: whatever a kernel leaves in such a row
(cuDNN's leaves a non-zero one on an H200), the zoo's answer is a zero output, as in the explicit
path. A stand-in kernel that averages the values there checks the guard on the CPU."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import zoo

_sdpa = F.scaled_dot_product_attention


def _averages_hidden_rows(queries, keys, values, attn_mask=None, **kwargs):
    output = _sdpa(queries, keys, values, attn_mask=attn_mask, **kwargs)
    visible = attn_mask.any(-1, keepdim=True) if attn_mask.dtype == torch.bool else attn_mask.isfinite().any(-1, True)
    return torch.where(visible, output, values.mean(-2, keepdim=True))


def test_a_row_with_nothing_visible_is_zero_whatever_the_kernel_leaves(monkeypatch) -> None:
    torch.manual_seed(0)
    layer = zoo.create_attention("multi_head", embed_dim=32, num_heads=2).eval()
    x = torch.randn(3, 8, 32)
    valid_lens = torch.tensor([8, 3, 0])
    with torch.no_grad():
        expected, _ = layer(x, x, x, valid_lens, need_weights=True)  # the explicit path: zero weights
        monkeypatch.setattr(F, "scaled_dot_product_attention", _averages_hidden_rows)
        output, _ = layer(x, x, x, valid_lens)
    torch.testing.assert_close(output, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(output[2], expected[2], atol=0, rtol=0)


def test_a_bias_mask_hiding_every_key_gives_zero_too(monkeypatch) -> None:
    torch.manual_seed(0)
    alibi = zoo.create_position("alibi", d_model=32, num_heads=2)
    layer = zoo.create_attention("multi_head", embed_dim=32, num_heads=2, attention=zoo.AttentionSpec(position=alibi))
    layer.eval()
    x = torch.randn(2, 6, 32)
    valid_lens = torch.tensor([6, 0])
    with torch.no_grad():
        expected, _ = layer(x, x, x, valid_lens, need_weights=True)
        monkeypatch.setattr(F, "scaled_dot_product_attention", _averages_hidden_rows)
        output, _ = layer(x, x, x, valid_lens)
    torch.testing.assert_close(output, expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("is_causal", [False, True])
def test_a_block_kernel_row_with_nothing_visible_is_zero_too(monkeypatch, is_causal: bool) -> None:
    torch.manual_seed(0)
    layer = zoo.create_attention(
        "multi_head", embed_dim=32, num_heads=2, attention=zoo.AttentionSpec("local", {"window": 2})
    ).eval()
    x = torch.randn(3, 12, 32)
    valid_lens = torch.tensor([12, 3, 0])
    with torch.no_grad():
        expected, _ = layer(x, x, x, valid_lens, is_causal=is_causal, need_weights=True)
        monkeypatch.setattr(F, "scaled_dot_product_attention", _averages_hidden_rows)
        output, _ = layer(x, x, x, valid_lens, is_causal=is_causal)
    torch.testing.assert_close(output, expected, atol=1e-5, rtol=1e-5)
