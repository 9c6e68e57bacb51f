"""The sequence classifier on its own: padding never changes a prediction; word order reaches it
only through positions or the attention's window; ``cls`` pooling reads the classification token's
final state alone, and ``longformer`` attention makes that token global."""

from __future__ import annotations

import pytest
import torch

from zoo.models import SequenceClassifier
from zoo.tasks.optim import adamw_with_warmup


@pytest.mark.parametrize("pooling", ["mean", "max", "mean_max", "cls"])
def test_padding_does_not_change_the_prediction(pooling) -> None:
    torch.manual_seed(0)
    model = SequenceClassifier(50, d_model=32, num_heads=4, num_layers=2, ffn_hidden=64, pooling=pooling).eval()
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
    model = SequenceClassifier(50, d_model=16, num_heads=2, num_layers=1, ffn_hidden=32, pooling="max").eval()
    x = torch.randn(2, 5, 16)
    keep = torch.tensor([[True] * 5, [True, True, False, False, False]])
    x[1, 2:] = 1e6  # padding with huge values must not win the max
    pooled = model._pool(x, keep, keep.sum(1))
    torch.testing.assert_close(pooled[1], x[1, :2].amax(0))


def test_unknown_pooling_is_refused() -> None:
    with pytest.raises(ValueError, match="pooling"):
        SequenceClassifier(50, pooling="median")


def _order_model(attention: str, position: str, relative_bias: bool = False) -> SequenceClassifier:
    torch.manual_seed(0)
    kwargs = {"window": 3, "relative_bias": relative_bias} if attention == "local" else None
    return SequenceClassifier(
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


def _cls_model(**kwargs) -> SequenceClassifier:
    torch.manual_seed(0)
    sizes = {"d_model": 32, "num_heads": 4, "num_layers": 2, "ffn_hidden": 64, "norm_first": True}
    return SequenceClassifier(50, num_classes=3, pooling="cls", **(sizes | kwargs)).eval()


def test_cls_pooling_classifies_the_final_state_of_a_prepended_token() -> None:
    """The classifier's input is the encoder's final state at position 0, of a sequence one longer
    than the input; editing any other final state leaves the logits alone, editing that one does not."""
    model = _cls_model()
    tokens, lens = torch.randint(2, 50, (3, 7)), torch.tensor([7, 5, 2])
    seen: dict[str, torch.Tensor] = {}
    model.final_norm.register_forward_hook(lambda module, args, out: seen.update(states=out))
    model.classifier.register_forward_hook(lambda module, args, out: seen.update(pooled=args[0]))
    logits, _ = model(tokens, lens)
    assert seen["states"].shape == (3, 8, 32)
    torch.testing.assert_close(seen["pooled"], seen["states"][:, 0])

    def edit(positions: slice) -> torch.Tensor:
        def replace(module, args, out):
            out = out.clone()
            out[:, positions] = torch.randn_like(out[:, positions])
            return out

        handle = model.final_norm.register_forward_hook(replace)
        try:
            return model(tokens, lens)[0]
        finally:
            handle.remove()

    torch.testing.assert_close(edit(slice(1, None)), logits)
    assert not torch.allclose(edit(slice(0, 1)), logits, atol=1e-4)


def test_cls_pooling_ignores_padding_but_reads_every_valid_token() -> None:
    model = _cls_model()
    tokens, lens = torch.randint(2, 50, (2, 9)), torch.tensor([9, 4])
    logits, weights = model(tokens, lens, need_weights=True)
    assert weights[-1].shape == (2, 4, 10, 10)  # the classification token is a row and a column
    scrambled = tokens.clone()
    scrambled[1, 4:] = torch.randint(2, 50, (5,))  # padding positions hold anything
    torch.testing.assert_close(model(scrambled, lens)[0], logits)
    edited = tokens.clone()
    edited[1, 3] = (edited[1, 3] + 1) % 48 + 2  # the last valid token of row 1
    assert not torch.allclose(model(edited, lens)[0][1], logits[1], atol=1e-4)


def test_the_classification_token_is_not_weight_decayed() -> None:
    model = _cls_model()
    _, exempt = adamw_with_warmup(model, lr=1e-3, weight_decay=0.1, warmup_steps=1, total_steps=2)[
        "optimizer"
    ].param_groups
    assert any(p is model.cls_token for p in exempt["params"])


def test_longformer_makes_the_classification_token_global() -> None:
    """With a window of 2, an ordinary query sees its neighbours only, but position 0 (the
    classification token, global by default) sees every key: in one block its final state equals
    dense attention's, with the same weights, while a far position's does not."""
    sizes = {"num_layers": 1, "dropout": 0.0, "position": "none"}
    sparse = _cls_model(attention="longformer", attention_kwargs={"window": 2, "block_size": 2}, **sizes)
    dense = _cls_model(attention="dot_product", **sizes)
    dense.load_state_dict(sparse.state_dict())
    tokens, lens = torch.randint(2, 50, (2, 12)), torch.tensor([12, 9])
    with torch.no_grad():
        states, keep, _ = sparse.encode(tokens, lens)
        reference, _, _ = dense.encode(tokens, lens)
        torch.testing.assert_close(states[:, 0], reference[:, 0], rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(sparse(tokens, lens)[0], dense(tokens, lens)[0], rtol=1e-5, atol=1e-5)
    assert keep[1].sum() == 10
    assert not torch.allclose(states[0, 8], reference[0, 8], atol=1e-4)
