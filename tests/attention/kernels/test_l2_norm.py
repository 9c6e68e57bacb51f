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


@pytest.mark.parametrize("scale", [1.0, 0.125])
def test_the_added_epsilon_is_fla_s_and_transformers_form(scale: float) -> None:
    """``added``: ``scale * x * rsqrt(|x|^2 + eps)``, values and gradients, zero vectors and short
    ones included (where the clamped form and this one part)."""
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(2, 3, 7, 5, dtype=torch.float64, generator=generator)
    x[0, 1, 2], x[1, 0, 3] = 0.0, 1e-4
    grad = torch.randn(x.shape, dtype=torch.float64, generator=generator)
    ours, theirs = x.clone().requires_grad_(), x.clone().requires_grad_()
    y = l2_normalize(ours, scale, 1e-6, added=True)
    y.backward(grad)
    expected = scale * theirs * torch.rsqrt(theirs.pow(2).sum(-1, keepdim=True) + 1e-6)
    expected.backward(grad)
    torch.testing.assert_close(y, expected)
    torch.testing.assert_close(ours.grad, theirs.grad)
    assert y[1, 0, 3].norm() < 0.3 * scale  # a short vector stays short, where the clamp would lengthen it
    assert torch.autograd.gradcheck(
        lambda t: l2_normalize(t, 0.5, 1e-6, added=True), (x[0, 0].clone().requires_grad_(),)
    )


def test_deltanet_s_qk_norm_eps_chooses_the_form() -> None:
    import zoo

    layer = zoo.create_attention("gated_deltanet", embed_dim=16, num_heads=2, qk_norm_eps=1e-6)
    x = torch.full((1, 1, 4), 1e-4, dtype=torch.float64)
    torch.testing.assert_close(layer.l2_normalize(x), x * torch.rsqrt(x.pow(2).sum() + 1e-6))
    default = zoo.create_attention("gated_deltanet", embed_dim=16, num_heads=2)
    torch.testing.assert_close(default.l2_normalize(x), x / x.norm())
    with pytest.raises(ValueError, match="qk_norm_eps must be a positive number or None"):
        zoo.create_attention("gated_deltanet", embed_dim=16, num_heads=2, qk_norm_eps=0.0)
