"""Attentions whose weights are each query's own run a block of queries at a time past a grid size
(:mod:`zoo.attention.modules.row_blocks`): the same output and gradients as the whole grid, in
float64, causal and padded, with one block shorter than the others."""

from __future__ import annotations

import pytest
import torch

import zoo
from zoo.attention.contract.base import Attention
from zoo.attention.modules import row_blocks


@pytest.mark.parametrize(
    ("name", "causal"),
    [
        ("sigmoid", True),
        ("sigmoid", False),
        ("softpick", True),
        ("softpick", False),
        ("stick_breaking", True),
        ("additive", True),
    ],
)
@pytest.mark.parametrize("earlier", [0, 3])
def test_blocks_of_queries_give_the_whole_grids_output_and_gradients(
    name: str, causal: bool, earlier: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``earlier`` keys before the queries (a prompt's, when decoding a chunk after a cache)."""
    generator = torch.Generator().manual_seed(0)
    q = torch.randn(2, 3, 11, 4, dtype=torch.float64, generator=generator, requires_grad=True)
    k, v = (
        torch.randn(2, 3, 11 + earlier, 4, dtype=torch.float64, generator=generator, requires_grad=True)
        for _ in range(2)
    )
    options = {"query_size": 4, "key_size": 4} if name == "additive" else {}
    attention = zoo.create_attention(name, **options).double()
    valid = torch.tensor([[11, 9, 11], [7, 11, 5]])

    def run() -> tuple[torch.Tensor, ...]:
        output = attention(q, k, v, valid_lens=valid, is_causal=causal).output
        return (output, *torch.autograd.grad(output.square().sum(), (q, k, v)))

    whole = run()
    monkeypatch.setattr(row_blocks, "ROW_BLOCK_SCORES", 2 * 3 * 4 * 11)  # past it: blocks of 4 queries
    monkeypatch.setattr(row_blocks, "ROW_BLOCK_QUERIES", 4)
    blocks = []
    attend = Attention.attend

    def spy(self: Attention, q: torch.Tensor, k: torch.Tensor, *args: object) -> object:
        blocks.append((q.shape[-2], k.shape[-2]))
        return attend(self, q, k, *args)

    monkeypatch.setattr(Attention, "attend", spy)
    blocked = run()
    keys = [earlier + n for n in ([4, 8, 11] if causal else [11, 11, 11])]  # causal: up to the block's last query
    expected = list(zip([4, 4, 3], keys, strict=True))
    # the last block first (the kept heap reuses a larger block's memory), then, recomputed in the
    # backward pass, the first block first
    recomputed = expected if attention.checkpoint_row_blocks else []
    assert blocks == expected[::-1] + recomputed, "three blocks of queries"
    for got, expected in zip(blocked, whole, strict=True):
        torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)


def test_a_call_asking_for_the_weights_gets_the_whole_grid(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(row_blocks, "ROW_BLOCK_SCORES", 1)
    q = k = v = torch.randn(1, 9, 4, dtype=torch.float64)
    result = zoo.create_attention("sigmoid").double()(q, k, v, is_causal=True, need_weights=True)
    assert result.weights.shape == (1, 9, 9) and not result.weights.triu(1).any()
