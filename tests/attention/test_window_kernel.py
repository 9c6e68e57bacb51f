"""``local``'s blockwise kernel: exact gradients, and nothing of size O(L * window) kept for backward."""

from __future__ import annotations

import pytest
import torch

from zoo.attention.factory import create_scoring_attention
from zoo.attention.window_kernel import window_attention


def test_window_kernel_gradients_match_finite_differences_with_a_bias_and_an_empty_row() -> None:
    torch.manual_seed(0)
    block, span, blocks = 3, 5, 2
    q = torch.randn(2, blocks * block, 4, dtype=torch.float64, requires_grad=True)
    k, v = (torch.randn(2, (blocks - 1) * block + span, 4, dtype=torch.float64, requires_grad=True) for _ in range(2))
    keep = torch.rand(blocks, block, span) > 0.3
    keep[1, 2] = False  # a query that sees no key: zero output, zero gradients, no NaN
    bias = torch.randn(blocks, block, span, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(
        lambda *t: window_attention(*t[:3], keep, t[3], block=block, span=span, scale=0.5), (q, k, v, bias)
    )
    out = window_attention(q, k, v, keep, bias, block=block, span=span, scale=0.5)
    assert torch.equal(out[:, 5], torch.zeros_like(out[:, 5]))


def saved_bytes(length: int, causal: bool) -> tuple[int, int]:
    """Float bytes and boolean bytes that local attention keeps for its backward pass."""
    attention = create_scoring_attention("local", head_dim=16, num_heads=4, window=64)
    q, k, v = (torch.randn(1, 4, length, 16, requires_grad=True) for _ in range(3))
    floats, bools = [0], [0]

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        (bools if tensor.dtype == torch.bool else floats)[0] += tensor.numel() * tensor.element_size()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        attention(q, k, v, is_causal=causal).output.sum().backward()
    return floats[0], bools[0]


@pytest.mark.parametrize("causal", [False, True], ids=["global", "causal"])
def test_local_keeps_only_linear_tensors_for_backward(causal: bool) -> None:
    """The inputs, the output and one log-sum-exp per query, a few times O(L * d) floats; no
    O(L * window) float scores or weights (64 keys per query here, four times d)."""
    per_token = {length: saved_bytes(length, causal) for length in (512, 1024)}
    for length, (floats, bools) in per_token.items():
        input_bytes = 4 * length * 16 * 4  # one of q, k, v
        assert floats < 6 * input_bytes, (length, floats / input_bytes)
        assert bools <= length * 64 * 3  # the window mask, shared by every head, one byte a pair
    (f1, b1), (f2, b2) = per_token[512], per_token[1024]
    assert f2 < 2.2 * f1 and b2 <= 2.2 * b1  # linear in the length


def test_local_with_dropout_in_training_still_drops_weights() -> None:
    torch.manual_seed(0)
    attention = create_scoring_attention("local", head_dim=8, window=4, dropout=0.5).train()
    x = torch.randn(1, 16, 8)
    assert not torch.allclose(attention(x, x, x).output, attention.eval()(x, x, x).output)
