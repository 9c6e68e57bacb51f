"""The sentiment architecture on its own: padding never changes a prediction; word order reaches
it only through positions or the attention's window."""

from __future__ import annotations

import pytest
import torch

from zoo.models import SentimentClassifier
from zoo.tasks.optim import adamw_with_warmup


@pytest.mark.parametrize("pooling", ["mean", "max", "mean_max"])
def test_padding_does_not_change_the_prediction(pooling) -> None:
    torch.manual_seed(0)
    model = SentimentClassifier(50, d_model=32, num_heads=4, num_layers=2, ffn_hidden=64, pooling=pooling).eval()
    tokens = torch.randint(2, 50, (3, 6))
    lens = torch.tensor([6, 4, 2])
    tokens[1, 4:], tokens[2, 2:] = 0, 0
    padded = torch.cat([tokens, torch.zeros(3, 5, dtype=torch.long)], dim=1)
    logits, _ = model(tokens, lens)
    logits_padded, _ = model(padded, lens)
    torch.testing.assert_close(logits, logits_padded)
    # each row alone gives the same result as in the batch
    for i in range(3):
        alone, _ = model(tokens[i : i + 1, : lens[i]], lens[i : i + 1])
        torch.testing.assert_close(alone, logits[i : i + 1])


def test_max_pooling_sees_only_valid_tokens() -> None:
    torch.manual_seed(0)
    model = SentimentClassifier(50, d_model=16, num_heads=2, num_layers=1, ffn_hidden=32, pooling="max").eval()
    x = torch.randn(2, 5, 16)
    keep = torch.tensor([[True] * 5, [True, True, False, False, False]])
    x[1, 2:] = 1e6  # padding with huge values must not win the max
    pooled = model._pool(x, keep, keep.sum(1))
    torch.testing.assert_close(pooled[1], x[1, :2].amax(0))


def test_unknown_pooling_is_refused() -> None:
    with pytest.raises(ValueError, match="pooling"):
        SentimentClassifier(50, pooling="median")


def _order_model(attention: str, position: str, relative_bias: bool = False) -> SentimentClassifier:
    torch.manual_seed(0)
    kwargs = {"window": 3, "relative_bias": relative_bias} if attention == "local" else None
    return SentimentClassifier(
        50,
        d_model=32,
        num_heads=4,
        num_layers=2,
        ffn_hidden=64,
        attention=attention,
        attention_kwargs=kwargs,
        position=position,
    ).eval()


def test_without_positions_dense_attention_reads_a_bag_of_words() -> None:
    tokens, lens = torch.randint(2, 50, (4, 9)), torch.full((4,), 9)
    shuffled = tokens[:, torch.randperm(9, generator=torch.Generator().manual_seed(1))]
    bag = _order_model("dot_product", position="none")
    torch.testing.assert_close(bag(shuffled, lens)[0], bag(tokens, lens)[0])
    ordered = _order_model("dot_product", position="sinusoidal")
    assert not torch.allclose(ordered(shuffled, lens)[0], ordered(tokens, lens)[0], atol=1e-4)


def test_without_positions_local_attention_reads_neighbourhoods_not_directions() -> None:
    """A symmetric window sees the same neighbours in a reversed sentence, so reversing changes
    nothing; shuffling changes who is whose neighbour, so it does."""
    tokens, lens = torch.randint(2, 50, (4, 9)), torch.full((4,), 9)
    model = _order_model("local", position="none")
    logits = model(tokens, lens)[0]
    torch.testing.assert_close(model(tokens.flip(1), lens)[0], logits)
    shuffled = tokens[:, torch.tensor([4, 0, 7, 2, 8, 1, 6, 3, 5])]
    assert not torch.allclose(model(shuffled, lens)[0], logits, atol=1e-4)


def test_a_relative_bias_gives_the_local_window_a_direction() -> None:
    """With a (trained, here random) bias per head and distance, the left and the right
    neighbour weigh differently, so reversing the sentence changes the prediction; positions
    are still absent, so the model never sees where in the sentence a word is."""
    tokens, lens = torch.randint(2, 50, (4, 9)), torch.full((4,), 9)
    model = _order_model("local", position="none", relative_bias=True)
    with torch.no_grad():
        for block in model.blocks:
            block.attention.score_attention.relative_bias.normal_()
    logits = model(tokens, lens)[0]
    assert not torch.allclose(model(tokens.flip(1), lens)[0], logits, atol=1e-4)
    padded = torch.cat([tokens, torch.zeros(4, 3, dtype=torch.long)], dim=1)
    torch.testing.assert_close(model(padded, lens)[0], logits, rtol=1e-5, atol=1e-6)


def test_relative_bias_tables_are_not_weight_decayed() -> None:
    """Like biases and norms (and Swin's and T5's bias tables), they are offsets, not weights."""
    model = _order_model("local", position="none", relative_bias=True)
    decayed, exempt = adamw_with_warmup(model, lr=1e-3, weight_decay=0.1, warmup_steps=1, total_steps=2)[
        "optimizer"
    ].param_groups
    assert decayed["weight_decay"] == 0.1 and exempt["weight_decay"] == 0.0
    tables = [p for name, p in model.named_parameters() if name.endswith("relative_bias")]
    assert len(tables) == 2 and all(any(p is t for p in exempt["params"]) for t in tables)
    assert any(p is model.embedding.weight for p in decayed["params"])
