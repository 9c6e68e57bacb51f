"""The L2 normalization's hand-written gradient against the division written out (and autograd's)."""

from __future__ import annotations

import pytest
import torch

from zoo.attention.kernels.l2_norm import l2_normalize


def divided(x: torch.Tensor, scale: float, eps: float) -> torch.Tensor:
    """``scale * x / max(|x|, eps)`` with torch's vector norm (whose gradient at zero is zero)."""
    return scale * x / torch.linalg.vector_norm(x, dim=-1, keepdim=True).clamp_min(eps)


@pytest.mark.parametrize("scale", [1.0, 0.125])
def test_values_and_gradients_equal_the_division(scale: float) -> None:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 7, 5, dtype=torch.float64, generator=generator)
    x[0, 1, 2] = 0.0  # a zero vector (padding): the norm is clamped and the projection term dropped
    x[1, 0, 3] = 1e-14
    grad = torch.randn(x.shape, dtype=torch.float64, generator=generator)
    ours, theirs = x.clone().requires_grad_(), x.clone().requires_grad_()
    y = l2_normalize(ours, scale)
    y.backward(grad)
    expected = divided(theirs, scale, 1e-12)
    expected.backward(grad)
    torch.testing.assert_close(y, expected)
    torch.testing.assert_close(ours.grad, theirs.grad)
    assert y[0, 0, 0].norm().item() == pytest.approx(scale)


def test_gradcheck() -> None:
    x = torch.randn(4, 6, dtype=torch.float64).requires_grad_()
    assert torch.autograd.gradcheck(lambda t: l2_normalize(t, 0.5), (x,))
