"""The window and sink kernels against softmax written out over the full score matrix."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor

from zoo.attention.kernels.window import sink_attention, sink_weights, window_blocks


def explicit(q: Tensor, k: Tensor, v: Tensor, visible: Tensor, sinks: Tensor | None, scale: float) -> Tensor:
    """``softmax`` over the visible keys, ``exp(s_h)`` added to each row's denominator; a row with
    nothing visible (and no sink) outputs zeros."""
    scores = (q @ k.mT * scale).masked_fill(~visible, float("-inf"))
    top = scores.amax(-1, keepdim=True).clamp_min(-1e30)
    if sinks is not None:
        top = torch.maximum(top, sinks[:, None, None].expand_as(top))
    numerators = (scores - top).exp()
    denominator = numerators.sum(-1, keepdim=True)
    if sinks is not None:
        denominator = denominator + (sinks[:, None, None] - top).exp()
    return (numerators / denominator.clamp_min(1e-300)) @ v


def rule(queries: int, keys: int, first: int, window: int, sink_tokens: int, causal: bool) -> Tensor:
    offsets = torch.arange(first, first + queries)[:, None] - torch.arange(keys)
    near = (offsets.abs() < window) | (torch.arange(keys) < sink_tokens)
    return near & (offsets >= 0) if causal else near


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidirectional"])
@pytest.mark.parametrize("sink_tokens", [0, 3])
@pytest.mark.parametrize("with_sinks", [False, True], ids=["", "sinks"])
def test_window_blocks_equal_the_masked_full_softmax(causal: bool, sink_tokens: int, with_sinks: bool) -> None:
    generator = torch.Generator().manual_seed(sink_tokens + 2 * causal + 4 * with_sinks)
    q, k, v = (torch.randn(2, 3, 40, 8, dtype=torch.float64, generator=generator) for _ in range(3))
    sinks = torch.randn(3, dtype=torch.float64, generator=generator) if with_sinks else None
    padding = (torch.arange(40) < torch.tensor([[40], [31]]))[:, None, None, :]  # (B, 1, 1, L)
    output = window_blocks(
        q, k, v, window=5, sink_tokens=sink_tokens, is_causal=causal, mask=padding, scale=0.3, sinks=sinks
    )
    assert output is not None  # a window of 5 in 40 positions runs blockwise
    visible = rule(40, 40, 0, 5, sink_tokens, causal) & padding
    torch.testing.assert_close(output, explicit(q, k, v, visible, sinks, 0.3))


def test_a_window_spanning_the_sequence_is_left_to_one_dense_call() -> None:
    q = torch.randn(1, 1, 8, 4)
    assert window_blocks(q, q, q, window=8, sink_tokens=0, is_causal=True, scale=1.0) is None


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "masked"])
def test_sink_attention_and_its_weights_equal_the_sink_in_the_denominator(causal: bool) -> None:
    generator = torch.Generator().manual_seed(int(causal))
    q, k, v = (torch.randn(2, 4, 9, 6, dtype=torch.float64, generator=generator) for _ in range(3))
    sinks = torch.randn(4, dtype=torch.float64, generator=generator)
    visible = torch.ones(9, 9, dtype=torch.bool).tril() if causal else torch.rand(2, 1, 9, 9, generator=generator) < 0.7
    output = sink_attention(q, k, v, None if causal else visible, sinks, scale=0.5, is_causal=causal)
    torch.testing.assert_close(output, explicit(q, k, v, visible, sinks, 0.5))
    weights = sink_weights((q @ k.mT) * 0.5, visible, sinks)
    torch.testing.assert_close(weights @ v, output)
    assert bool((weights.sum(-1) < 1).all())
