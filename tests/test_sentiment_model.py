"""The sentiment architecture on its own: padding never changes a prediction; word order reaches
it only through positions or the attention's window."""

from __future__ import annotations

import pytest
import torch

from zoo.models import SentimentClassifier


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


def _order_model(attention: str, positional_encoding: bool) -> SentimentClassifier:
    torch.manual_seed(0)
    kwargs = {"window": 3} if attention == "local" else None
    return SentimentClassifier(
        50, d_model=32, num_heads=4, num_layers=2, ffn_hidden=64, attention=attention,
        attention_kwargs=kwargs, positional_encoding=positional_encoding,
    ).eval()


def test_without_positions_dense_attention_reads_a_bag_of_words() -> None:
    tokens, lens = torch.randint(2, 50, (4, 9)), torch.full((4,), 9)
    shuffled = tokens[:, torch.randperm(9, generator=torch.Generator().manual_seed(1))]
    bag = _order_model("dot_product", positional_encoding=False)
    torch.testing.assert_close(bag(shuffled, lens)[0], bag(tokens, lens)[0])
    ordered = _order_model("dot_product", positional_encoding=True)
    assert not torch.allclose(ordered(shuffled, lens)[0], ordered(tokens, lens)[0], atol=1e-4)


def test_without_positions_local_attention_reads_neighbourhoods_not_directions() -> None:
    """A symmetric window sees the same neighbours in a reversed sentence, so reversing changes
    nothing; shuffling changes who is whose neighbour, so it does."""
    tokens, lens = torch.randint(2, 50, (4, 9)), torch.full((4,), 9)
    model = _order_model("local", positional_encoding=False)
    logits = model(tokens, lens)[0]
    torch.testing.assert_close(model(tokens.flip(1), lens)[0], logits)
    shuffled = tokens[:, torch.tensor([4, 0, 7, 2, 8, 1, 6, 3, 5])]
    assert not torch.allclose(model(shuffled, lens)[0], logits, atol=1e-4)
