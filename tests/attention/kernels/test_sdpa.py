"""The fused call's guard for a query with no visible key: whatever a kernel leaves in such a row
(cuDNN's leaves a non-zero one on an H200), the zoo's answer is a zero output, as in the explicit
path. A stand-in kernel that averages the values there checks the guard on the CPU, with the CPU
taken off the devices that need none; and the CPU's own kernels are checked to need none."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import zoo
from zoo.attention.kernels import sdpa

_sdpa = F.scaled_dot_product_attention


@pytest.fixture(autouse=True)
def _guard_everywhere(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sdpa, "ZERO_ROW_DEVICES", frozenset())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("backend", [SDPBackend.FLASH_ATTENTION, SDPBackend.MATH])
@pytest.mark.parametrize("boolean", [True, False], ids=["boolean mask", "float mask"])
def test_the_cpu_kernels_give_a_hidden_row_zeros_and_finite_gradients(
    dtype: torch.dtype, backend: SDPBackend, boolean: bool
) -> None:
    """What lets the CPU skip the guard (``sdpa.ZERO_ROW_DEVICES``): each of its kernels answers a
    query that sees no key with zeros, and no gradient becomes NaN."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, 6, 4, dtype=dtype, requires_grad=True) for _ in range(3))
    visible = torch.ones(2, 1, 6, 6, dtype=torch.bool).tril()
    visible[0, :, 2] = False  # query 2 of the first example sees nothing
    visible[1, :, :, :3] = False  # the first three queries of the second see nothing (left padding)
    mask = visible if boolean else torch.zeros(visible.shape, dtype=dtype).masked_fill(~visible, float("-inf"))
    with sdpa_kernel([backend]):
        output = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        output.sum().backward()
    assert not output[0, :, 2].any() and not output[1, :, :3].any()
    assert output.isfinite().all() and all(t.grad.isfinite().all() for t in (q, k, v))


def _averages_hidden_rows(queries, keys, values, attn_mask=None, **kwargs):
    output = _sdpa(queries, keys, values, attn_mask=attn_mask, **kwargs)
    visible = attn_mask.any(-1, keepdim=True) if attn_mask.dtype == torch.bool else attn_mask.isfinite().any(-1, True)
    return torch.where(visible, output, values.mean(-2, keepdim=True))


def test_the_cpu_kernel_picked_under_dropout_gives_a_hidden_row_zeros_too() -> None:
    """Training adds attention dropout, under which torch picks its kernel itself."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, 6, 4, requires_grad=True) for _ in range(3))
    visible = torch.ones(2, 1, 6, 6, dtype=torch.bool).tril()
    visible[0, :, 2] = False
    output = F.scaled_dot_product_attention(q, k, v, attn_mask=visible, dropout_p=0.3)
    output.sum().backward()
    assert not output[0, :, 2].any()
    assert output.isfinite().all() and all(t.grad.isfinite().all() for t in (q, k, v))


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
