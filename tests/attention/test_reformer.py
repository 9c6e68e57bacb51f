"""``reformer`` (LSH attention) against a naive float64 formulation of its definition, the
attention contract, and what it declares it lacks."""

from __future__ import annotations

import pytest
import torch

import zoo
from zoo.attention import IncompatibleAttentionError, create_scoring_attention
from zoo.attention.variants.reformer import SELF_SCORE, ReformerAttention
from zoo.models import Transformer
from zoo.testing import check_attention

from .test_lra_attention import NOT_CAUSAL, _check_against, _visible


def naive_reformer(attention: ReformerAttention, q: torch.Tensor, v: torch.Tensor, visible: torch.Tensor):
    """One query at a time in float64, from the definition: in each round the query orders the
    positions it may see, with the padding (seen by no query, hashed to an extra last bucket), by
    (bucket, position); it sees the visible keys of its chunk of that order and of the chunk before,
    its own key at ``SELF_SCORE``; the rounds are weighted by the softmax of their log-sum-exps."""
    batch, length, dim = q.shape
    buckets = attention.buckets(q)  # (B, rounds, L): the hashing is shared, the attention is not
    chunk = min(attention.bucket_size, length)
    out = torch.zeros(batch, length, v.shape[-1], dtype=torch.float64)
    for b in range(batch):
        qd = q[b].double()
        kd = qd / qd.norm(dim=-1, keepdim=True)
        padding = [not visible[b, :, j].any() for j in range(length)]
        found: dict[int, list] = {i: [] for i in range(length)}
        for r in range(attention.num_hashes):
            key = [
                (attention.num_buckets_for(length) if padding[j] else int(buckets[b, r, j]), j) for j in range(length)
            ]
            for i in range(length):
                members = sorted((j for j in range(length) if visible[b, i, j] or padding[j]), key=key.__getitem__)
                own_chunk = sum(key[j] < key[i] for j in members) // chunk
                seen = [j for n, j in enumerate(members) if visible[b, i, j] and own_chunk - n // chunk in (0, 1)]
                if seen:
                    scores = torch.tensor(
                        [SELF_SCORE if j == i else float(qd[i] @ kd[j]) / dim**0.5 for j in seen], dtype=torch.float64
                    )
                    found[i].append((torch.logsumexp(scores, 0), torch.softmax(scores, 0) @ v[b, seen].double()))
        for i, rounds in found.items():
            if rounds:
                share = torch.softmax(torch.stack([lse for lse, _ in rounds]), 0)
                out[b, i] = sum(s * o for s, (_, o) in zip(share, rounds))
    return out.float()


@pytest.mark.parametrize("length, bucket_size", [(12, 3), (10, 4), (8, 64)])  # whole chunks, a part chunk, one chunk
@pytest.mark.parametrize("num_hashes", [1, 3])
@pytest.mark.parametrize("masking", ["none", "lengths", "per_query", "mask"])
def test_reformer_equals_a_naive_loop(length: int, bucket_size: int, num_hashes: int, masking: str) -> None:
    g = torch.Generator().manual_seed(length + num_hashes)
    attention = ReformerAttention(bucket_size=bucket_size, num_hashes=num_hashes, seed=3).eval()
    q, k, v = (torch.randn(2, length, 8, generator=g) for _ in range(3))
    kwargs, visible = _visible(2, length, length, False, masking, g)
    expected = naive_reformer(attention, q, v, visible)
    _check_against(attention, q, k, v, kwargs, False, expected, visible)


def test_one_bucket_and_one_chunk_is_shared_qk_attention_over_the_other_positions() -> None:
    """With one chunk holding the sequence, LSH attention is softmax attention with the normalized
    queries as keys and each query's own key left out."""
    torch.manual_seed(0)
    q, v = torch.randn(2, 4, 16, 8), torch.randn(2, 4, 16, 8)
    attention = ReformerAttention(bucket_size=16, num_hashes=1, num_buckets=2)
    keys = q / q.norm(dim=-1, keepdim=True)
    others = ~torch.eye(16, dtype=torch.bool)
    expected = create_scoring_attention("dot_product", head_dim=8)(q, keys, v, attn_mask=others).output
    torch.testing.assert_close(attention(q, torch.randn_like(q), v).output, expected)


def test_similar_queries_share_buckets_more_often_than_random_ones() -> None:
    """Angular LSH: a query and a slightly turned copy of it land in one bucket far more often."""
    torch.manual_seed(0)
    x = torch.randn(1, 2000, 16)
    attention = ReformerAttention(num_buckets=8, num_hashes=1, seed=0)
    for other, low, high in ((x + 0.1 * torch.randn_like(x), 0.8, 1.0), (torch.randn_like(x), 0.0, 0.3)):
        same = (attention.buckets(x) == attention.buckets(other)).float().mean()
        assert low < same <= high


@pytest.mark.parametrize("kwargs", [{"bucket_size": 2}, {"bucket_size": 3, "num_hashes": 1}, {}])
def test_reformer_keeps_the_contract(kwargs: dict) -> None:
    assert check_attention("reformer", **kwargs).passed == NOT_CAUSAL


def test_a_layer_over_reformer_has_no_key_projection_and_keeps_the_contract() -> None:
    """Shared-QK: nothing would read a key projection, so the layer has none; padding and masks
    hold while the content of every position moves the hashing, and every parameter gets a gradient."""
    kwargs = {"bucket_size": 2}
    layer = zoo.create_attention("self", embed_dim=16, num_heads=2, attention=zoo.AttentionSpec("reformer", kwargs))
    assert layer.k_proj is None and layer.q_proj is not None
    assert check_attention("self", attention=zoo.AttentionSpec("reformer", kwargs)).passed == NOT_CAUSAL


def test_reformer_refusals_name_the_fix() -> None:
    with pytest.raises(ValueError, match="num_buckets must be even"):
        ReformerAttention(num_buckets=3)
    with pytest.raises(IncompatibleAttentionError, match="one sequence"):
        ReformerAttention()(torch.randn(1, 3, 4), torch.randn(1, 5, 4), torch.randn(1, 5, 4))
    with pytest.raises(IncompatibleAttentionError):
        Transformer(vocab_size=50, d_model=16, num_heads=2, attention="reformer")
