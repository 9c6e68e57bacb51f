"""``block_attention``: every block attends over its own keys, in one call of the fused kernel."""

from __future__ import annotations

import pytest
import torch
from torch.profiler import profile

from zoo.attention import create_scoring_attention
from zoo.attention.kernels import block_attention


def naive(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Masked softmax attention in float64, written out (True = attend)."""
    scores = (q.double() @ k.double().transpose(-2, -1)) / q.shape[-1] ** 0.5
    return torch.softmax(scores.masked_fill(~mask, float("-inf")), -1) @ v.double()


@pytest.mark.parametrize(
    "batch, mask_shape",
    [((), (3, 4, 6)), ((2, 2), (3, 4, 6)), ((2, 2), (2, 1, 3, 4, 6)), ((2,), (2, 3, 1, 6)), ((2, 2), (6,))],
)
def test_block_attention_matches_each_block_alone(batch: tuple[int, ...], mask_shape: tuple[int, ...]) -> None:
    torch.manual_seed(0)
    q, k, v = torch.randn(*batch, 3, 4, 5), torch.randn(*batch, 3, 6, 5), torch.randn(*batch, 3, 6, 5)
    mask = torch.rand(mask_shape) > 0.4
    mask[..., 0] = True  # every query sees a key
    torch.testing.assert_close(block_attention(q, k, v, mask).double(), naive(q, k, v, mask), rtol=1e-5, atol=1e-6)


def test_a_mask_shared_by_the_blocks_reaches_the_fused_cpu_kernel() -> None:
    """A 3-D ``(nb, block, S)`` mask given as it is sends SDPA to its math path (which stores
    every block's weights); laid out 4-D, the flash kernel runs."""
    q, k, v = (torch.randn(2, 8, 4, length, 16, requires_grad=True) for length in (32, 64, 64))
    mask = torch.rand(4, 32, 64) > 0.5
    with profile() as trace:
        block_attention(q, k, v, mask).sum().backward()
    assert any("flash_attention" in event.key for event in trace.key_averages())


@pytest.mark.parametrize(
    "name, kwargs",
    [
        ("local", {"window": 16}),
        ("longformer", {"window": 16}),
        ("sparse", {"block_size": 16}),
        ("bigbird", {"block_size": 8, "num_random_blocks": 1}),
    ],
)
def test_blockwise_variants_reach_the_fused_cpu_kernel(name: str, kwargs: dict) -> None:
    """Each blockwise variant, padding mask and all, runs its blocks through the flash kernel."""
    attention = create_scoring_attention(name, head_dim=16, num_heads=2, **kwargs)
    q, k, v = (torch.randn(2, 2, 128, 16, requires_grad=True) for _ in range(3))
    padding = (torch.arange(128) < torch.tensor([128, 90])[:, None])[:, None, None, :]  # as a layer passes it
    with profile() as trace:
        attention(q, k, v, attn_mask=padding).output.sum().backward()
    assert any("flash_attention" in event.key for event in trace.key_averages())
