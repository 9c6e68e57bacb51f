"""The short convolution's shifted sums and their hand-written gradients against ``F.conv1d``."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor

from zoo.attention.kernels.short_conv import ShortConvolution, causal_conv1d


def conv1d_reference(x: Tensor, weight: Tensor, bias: Tensor | None, window: Tensor) -> Tensor:
    """``nn.Conv1d``'s depthwise convolution over the window then ``x``, channels first."""
    history = torch.cat([window, x], dim=1).transpose(1, 2)
    return F.conv1d(history, weight, bias, groups=x.shape[-1]).transpose(1, 2)


@pytest.mark.parametrize("length", [1, 2, 3, 17], ids=lambda t: f"T={t}")
@pytest.mark.parametrize("kernel", [1, 2, 4])
def test_shifted_sums_equal_conv1d_with_gradients(length: int, kernel: int) -> None:
    generator = torch.Generator().manual_seed(length * 10 + kernel)
    options = {"dtype": torch.float64, "generator": generator}
    x = torch.randn(3, length, 5, **options).requires_grad_()
    weight = torch.randn(5, 1, kernel, **options).requires_grad_()
    bias = torch.randn(5, **options).requires_grad_()
    window = torch.randn(3, kernel - 1, 5, **options).requires_grad_()
    y, after = causal_conv1d(x, weight, bias, window)
    expected = conv1d_reference(x, weight, bias, window)
    torch.testing.assert_close(y, expected)
    torch.testing.assert_close(after, torch.cat([window, x], 1)[:, length:])
    grad = torch.randn(y.shape, **options)
    leaves = (x, weight, bias, window)
    torch.testing.assert_close(torch.autograd.grad(y, leaves, grad), torch.autograd.grad(expected, leaves, grad))


@pytest.mark.parametrize("silu", [False, True], ids=["identity", "silu"])
def test_the_function_passes_gradcheck(silu: bool) -> None:
    generator = torch.Generator().manual_seed(0)
    shapes = ((2, 6, 3), (4, 3), (2, 3, 3), (3,))
    inputs = [torch.randn(shape, dtype=torch.float64, generator=generator).requires_grad_() for shape in shapes]
    assert torch.autograd.gradcheck(lambda *t: ShortConvolution.apply(*t, silu), inputs)


@pytest.mark.parametrize("length", [1, 2, 5], ids=lambda t: f"T={t}")
def test_the_fused_silu_equals_silu_after_conv1d_with_gradients(length: int) -> None:
    generator = torch.Generator().manual_seed(7 + length)
    options = {"dtype": torch.float64, "generator": generator}
    x = torch.randn(2, length, 6, **options).requires_grad_()
    weight = torch.randn(6, 1, 4, **options).requires_grad_()
    bias = torch.randn(6, **options).requires_grad_()
    window = torch.randn(2, 3, 6, **options)
    y, _ = causal_conv1d(x, weight, bias, window, activation="silu")
    expected = F.silu(conv1d_reference(x, weight, bias, window))
    torch.testing.assert_close(y, expected)
    grad = torch.randn(y.shape, **options)
    leaves = (x, weight, bias)
    torch.testing.assert_close(torch.autograd.grad(y, leaves, grad), torch.autograd.grad(expected, leaves, grad))


def test_the_fused_silu_keeps_only_the_input_for_the_backward() -> None:
    """One saved activation-sized tensor (the input), where conv then SiLU keeps two."""
    x = torch.randn(2, 64, 8, requires_grad=True)
    weight = torch.randn(8, 1, 4, requires_grad=True)
    for activation, count in (("silu", 1), (None, 2)):
        sizes: list[int] = []

        def pack(t: Tensor, sizes: list[int] = sizes) -> Tensor:
            sizes.append(t.numel())
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            y, _ = causal_conv1d(x, weight, activation=activation)
            y = y if activation else F.silu(y)
        assert sum(size >= x.numel() for size in sizes) == count, activation


def test_an_unknown_activation_is_refused() -> None:
    with pytest.raises(ValueError, match="'silu' or None"):
        causal_conv1d(torch.randn(1, 3, 2), torch.randn(2, 1, 4), activation="gelu")  # type: ignore[arg-type]


def test_a_sequence_start_reads_zeros_and_decoding_continues_from_the_window() -> None:
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(2, 9, 4, generator=generator, dtype=torch.float64)
    weight = torch.randn(4, 1, 4, generator=generator, dtype=torch.float64)
    whole, _ = causal_conv1d(x, weight)
    torch.testing.assert_close(whole, conv1d_reference(x, weight, None, x.new_zeros(2, 3, 4)))
    window, steps = None, []
    for t in range(x.shape[1]):
        y, window = causal_conv1d(x[:, t : t + 1], weight, window=window)
        steps.append(y)
    torch.testing.assert_close(torch.cat(steps, 1), whole)


def test_bfloat16_inputs_keep_their_dtype() -> None:
    x = torch.randn(1, 8, 4).bfloat16()
    weight = torch.randn(4, 1, 4)
    y, after = causal_conv1d(x, weight)
    assert y.dtype == after.dtype == torch.bfloat16
    torch.testing.assert_close(
        y.float(),
        conv1d_reference(x.float(), weight.bfloat16().float(), None, torch.zeros(1, 3, 4)),
        atol=0.05,
        rtol=0.02,
    )
