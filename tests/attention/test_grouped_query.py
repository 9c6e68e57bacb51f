"""Grouped-query and multi-query attention: ``num_kv_heads`` on layers, blocks and models."""

from __future__ import annotations

import pytest
import torch

import zoo
from zoo.attention.modules.headed import HeadedAttention
from zoo.models import SequenceClassifier
from zoo.models.transformer import Transformer


def expanded_copy(grouped: HeadedAttention, **kwargs) -> HeadedAttention:
    """A standard multi-head layer whose key/value heads are the grouped layer's, repeated per group:
    an independent formulation of grouped-query attention."""
    full = zoo.create_attention(
        "multi_head", embed_dim=grouped.embed_dim, num_heads=grouped.num_heads, **kwargs
    ).double()
    groups = grouped.num_heads // grouped.num_kv_heads
    state = grouped.state_dict()
    for name in ("k_proj", "v_proj"):
        for part in ("weight", "bias"):
            tensor = state[f"{name}.{part}"].unflatten(0, (grouped.num_kv_heads, grouped.head_dim))
            state[f"{name}.{part}"] = tensor.repeat_interleave(groups, dim=0).flatten(0, 1)
    full.load_state_dict(state)
    return full.eval()


@pytest.mark.parametrize("num_kv_heads", [1, 2])
@pytest.mark.parametrize("attention", ["dot_product", "gaussian_kernel"])  # grouped as they are / repeated
@pytest.mark.parametrize("need_weights", [False, True])
@pytest.mark.parametrize("causal", [False, True])
def test_grouped_heads_equal_multi_head_with_repeated_key_value_heads(
    num_kv_heads, attention, need_weights, causal
) -> None:
    torch.manual_seed(0)
    layer = (
        zoo.create_attention(
            "multi_head", embed_dim=16, num_heads=4, attention=zoo.AttentionSpec(attention, num_kv_heads=num_kv_heads)
        )
        .double()
        .eval()
    )
    assert layer.k_proj.out_features == num_kv_heads * 4
    reference = expanded_copy(layer, attention=attention)
    x, lens = torch.randn(3, 6, 16, dtype=torch.float64), torch.tensor([6, 4, 1])
    ours = layer(x, x, x, None if causal else lens, is_causal=causal, need_weights=need_weights)
    expected = reference(x, x, x, None if causal else lens, is_causal=causal, need_weights=need_weights)
    torch.testing.assert_close(ours.output, expected.output)
    if need_weights:
        torch.testing.assert_close(ours.weights, expected.weights)


def test_as_many_key_value_heads_as_query_heads_is_standard_multi_head_attention() -> None:
    torch.manual_seed(0)
    standard = zoo.create_attention("self", embed_dim=8, num_heads=2)
    explicit = zoo.create_attention("self", embed_dim=8, num_heads=2, attention=zoo.AttentionSpec(num_kv_heads=2))
    explicit.load_state_dict(standard.state_dict())
    x = torch.randn(2, 5, 8)
    causal = zoo.AttentionContext(is_causal=True)
    torch.testing.assert_close(explicit(x, causal).output, standard(x, causal).output)
    assert "num_kv_heads" not in repr(explicit)


def test_a_key_value_head_count_that_does_not_divide_the_heads_is_refused() -> None:
    with pytest.raises(
        ValueError,
        match=r"num_kv_heads must be a positive divisor of num_heads \(4\); got 3\. Choose one of \[1, 2, 4\]",
    ):
        zoo.create_attention("self", embed_dim=8, num_heads=4, attention=zoo.AttentionSpec(num_kv_heads=3))


@pytest.mark.parametrize("num_kv_heads", [1, 2, 4])
def test_decoder_cache_shrinks_and_cached_decoding_matches_teacher_forcing(num_kv_heads: int) -> None:
    torch.manual_seed(0)
    model = Transformer(
        vocab_size=20,
        d_model=16,
        num_heads=4,
        num_encoder_layers=1,
        num_decoder_layers=2,
        ffn_hidden=32,
        dropout=0.0,
        num_kv_heads=num_kv_heads,
    ).eval()
    src, src_lens, tgt = torch.randint(1, 20, (2, 7)), torch.tensor([7, 4]), torch.randint(1, 20, (2, 5))
    with torch.no_grad():
        logits, _ = model(src, src_lens, tgt)
        state, steps = model.encode(src, src_lens), []
        for t in range(tgt.shape[1]):
            step, state = model.decode_step(tgt[:, t], state)
            steps.append(step)
    torch.testing.assert_close(torch.stack(steps, 1), logits, atol=1e-5, rtol=1e-5)
    keys, values = state.caches[0].keys, state.caches[0].values
    assert keys.shape == values.shape == (2, num_kv_heads, 5, 4)  # (B, kv heads, positions, head_dim)
    assert state.memory_kv[0][0].shape == (2, num_kv_heads, 7, 4)


def test_sentiment_classifier_takes_grouped_heads() -> None:
    model = SequenceClassifier(vocab_size=30, d_model=16, num_heads=4, num_kv_heads=1)
    assert model.blocks[0].attention.k_proj.out_features == 4
    logits, _ = model(torch.randint(1, 30, (2, 5)), torch.tensor([5, 3]))
    assert logits.shape == (2, 2) and torch.isfinite(logits).all()


def test_grouped_kv_reaches_a_variant_that_declares_it_unexpanded(monkeypatch: pytest.MonkeyPatch) -> None:
    layer = zoo.create_attention("self", embed_dim=16, num_heads=4, attention=zoo.AttentionSpec(num_kv_heads=2))
    seen = []
    original = type(layer.score_attention).attend

    def spy(self, queries, keys, values, mask, **kwargs):
        seen.append((queries.shape[1], keys.shape[1]))
        return original(self, queries, keys, values, mask, **kwargs)

    monkeypatch.setattr(type(layer.score_attention), "attend", spy)
    layer(torch.randn(1, 3, 16))
    assert seen == [(4, 2)]


@pytest.mark.parametrize(("layer", "attention"), [("self", "dot_product"), ("cross", "dot_product"), ("self", "local")])
def test_grouped_layers_keep_the_attention_contract(layer: str, attention: str) -> None:
    from zoo.testing import check_attention

    report = check_attention(
        layer, embed_dim=16, num_heads=4, attention=zoo.AttentionSpec(attention, num_kv_heads=2), dtypes=()
    )
    assert {"padding", "weights", "gradients"} <= set(report.passed)
