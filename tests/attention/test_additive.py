"""Chunked additive scores against the broadcast-then-tanh formula: values, gradients, memory."""

from __future__ import annotations

import pytest
import torch
from torch.func import functional_call

import zoo
from zoo.attention.variants.additive import AdditiveScores, _chunks


def broadcast_scores(attention: zoo.AdditiveAttention, queries: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    """The straightforward formulation: the whole (*batch, Lq, Lk, h) tensor at once."""
    features = torch.tanh(attention.query_proj(queries).unsqueeze(-2) + attention.key_proj(keys).unsqueeze(-3))
    return attention.score_proj(features).squeeze(-1)


# chunk budgets (bytes, float64) from one element (one query row per chunk) to everything at once
BUDGETS = [8, 8 * 7 * 5, 8 * 7 * 5 * 3, 8 * 7 * 5 * 8, 2**30]


@pytest.mark.parametrize("chunk_bytes", BUDGETS)
def test_scores_and_gradients_equal_the_broadcast_formula(chunk_bytes: int) -> None:
    torch.manual_seed(0)
    attention = zoo.create_attention(
        "additive", query_size=4, key_size=3, num_hiddens=5, chunk_bytes=chunk_bytes
    ).double()
    queries = torch.randn(2, 3, 6, 4, dtype=torch.float64, requires_grad=True)
    keys = torch.randn(2, 3, 7, 3, dtype=torch.float64, requires_grad=True)
    upstream = torch.randn(2, 3, 6, 7, dtype=torch.float64)
    scores = attention.score(queries, keys)
    expected = broadcast_scores(attention, queries, keys)
    torch.testing.assert_close(scores, expected, rtol=1e-12, atol=1e-12)
    params = list(attention.parameters())
    got = torch.autograd.grad((scores * upstream).sum(), (queries, keys, *params))
    want = torch.autograd.grad((expected * upstream).sum(), (queries, keys, *params))
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-10, atol=1e-12)


def test_gradcheck_over_several_chunks() -> None:
    torch.manual_seed(0)
    a, b = (
        torch.randn(2, 5, 3, dtype=torch.float64, requires_grad=True),
        torch.randn(2, 4, 3, dtype=torch.float64, requires_grad=True),
    )
    w = torch.randn(3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, b, w: AdditiveScores.apply(a, b, w, 8 * 4 * 3 * 2), (a, b, w))


def test_the_whole_hidden_tensor_is_never_allocated() -> None:
    """With a 64 KiB budget, no allocation comes near the 8 MiB of (B, Lq, Lk, h) float32."""
    from torch.profiler import ProfilerActivity, profile

    torch.manual_seed(0)
    attention = zoo.create_attention("additive", query_size=16, key_size=16, num_hiddens=32, chunk_bytes=2**16)
    q, k = torch.randn(4, 128, 16, requires_grad=True), torch.randn(4, 128, 16, requires_grad=True)
    full_bytes = 4 * 128 * 128 * 32 * 4
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        attention(q, k, k).output.sum().backward()
    largest = max(e.nbytes() for e in prof.profiler.kineto_results.events() if e.name() == "[memory]")
    assert 0 < largest < full_bytes / 16


def test_chunks_cover_every_row_once() -> None:
    for batch, queries, row, budget in [
        (3, 5, 10, 10),
        (3, 5, 10, 25),
        (3, 5, 10, 50),
        (3, 5, 10, 120),
        (3, 5, 10, 10**6),
        (2, 0, 4, 8),
    ]:
        covered = torch.zeros(batch, queries, dtype=torch.long)
        for n, i in _chunks(batch, queries, row, budget):
            covered[n, i] += 1
            assert covered[n, i].numel() * row <= max(budget, row)
        assert torch.all(covered == 1)


def test_chunk_bytes_must_be_positive() -> None:
    with pytest.raises(ValueError, match="chunk_bytes must be a positive integer"):
        zoo.create_attention("additive", query_size=2, key_size=2, chunk_bytes=0)


def test_gradients_reach_the_parameters_inside_a_layer() -> None:
    layer = zoo.create_attention(
        "self", embed_dim=8, num_heads=2, attention=zoo.AttentionSpec("additive", {"chunk_bytes": 64})
    ).double()
    params = {name: p.detach().clone().requires_grad_() for name, p in layer.named_parameters()}
    x = torch.randn(2, 5, 8, dtype=torch.float64, requires_grad=True)

    def fn(x: torch.Tensor, *weights: torch.Tensor) -> torch.Tensor:
        return functional_call(
            layer, dict(zip(params, weights)), (x, zoo.AttentionContext.build(2, 5, valid_lens=torch.tensor([5, 3])))
        ).output

    assert torch.autograd.gradcheck(fn, (x, *params.values()))
