"""The GRU encoder-decoder with Bahdanau attention: shapes, masking, decoding, learning."""

from __future__ import annotations

import math
from collections.abc import Iterator

import pytest
import torch
import torch.nn.functional as F

import zoo
from zoo.models.decoding import DecodeLimits, beam_search, greedy_decode, length_penalty
from zoo.models.seq2seq import Seq2SeqAttention

PAD, BOS, EOS = 0, 1, 2
VOCAB = 13


def _model(seed: int = 0, attention: str = "additive", **kwargs) -> Seq2SeqAttention:
    torch.manual_seed(seed)
    options = {"embed_dim": 8, "hidden_size": 16, "num_layers": 2, "dropout": 0.1, "attention": attention} | kwargs
    return Seq2SeqAttention(VOCAB, **options).eval()


def _source(seed: int, lengths: list[int], extra_padding: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Random sources of ``lengths`` (tokens 3..VOCAB-1), padded to the longest + ``extra_padding``."""
    g = torch.Generator().manual_seed(seed)
    src = torch.full((len(lengths), max(lengths) + extra_padding), PAD, dtype=torch.long)
    for row, n in enumerate(lengths):
        src[row, :n] = torch.randint(3, VOCAB, (n,), generator=g)
    return src, torch.tensor(lengths)


def _compatible_scorings() -> list[str]:
    return [
        e.name
        for e in zoo.ATTENTION_REGISTRY.entries()
        if issubclass(e.obj, zoo.Attention)
        and e.obj.supports_padding_mask
        and e.obj.supports_weights
        and e.obj.supports_cross_attention
        and e.obj.supports_bidirectional  # a decoder attends over the whole source
    ]


@pytest.fixture(autouse=True)
def one_thread() -> Iterator[None]:
    """Tiny recurrent steps run fastest (and most predictably on a busy machine) on one thread."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# ---------------------------------------------------------------------------- shapes and masking


@pytest.mark.parametrize("attention", ["additive", "dot_product"])
@pytest.mark.parametrize("tie_embeddings", [True, False])
def test_forward_shapes_and_attention_weights(attention: str, tie_embeddings: bool) -> None:
    model = _model(attention=attention, tie_embeddings=tie_embeddings)
    src, src_lens = _source(0, [5, 2, 4])
    tgt_in = torch.randint(3, VOCAB, (3, 6))
    logits, weights = model(src, src_lens, tgt_in, need_weights=True)
    assert logits.shape == (3, 6, VOCAB)
    assert weights is not None and weights.shape == (3, 1, 6, 5)
    for row, n in enumerate(src_lens.tolist()):
        assert torch.all(weights[row, :, :, n:] == 0)  # exactly zero on padding
        torch.testing.assert_close(weights[row].sum(-1), torch.ones(1, 6))
    assert model(src, src_lens, tgt_in)[1] is None


def test_encoder_outputs_are_zero_on_padding_and_state_has_the_documented_shapes() -> None:
    model = _model()
    src, src_lens = _source(1, [4, 1, 3])
    state = model.encode(src, src_lens)
    assert state["memory"].shape == (3, 4, 16)
    assert state["hidden"].shape == (2, 3, 16)
    assert torch.equal(state["memory_mask"].squeeze(1).sum(-1), src_lens)  # True exactly on real tokens
    for row, n in enumerate(src_lens.tolist()):
        assert torch.all(state["memory"][row, n:] == 0)


@pytest.mark.parametrize("attention", ["additive", "dot_product"])
def test_source_padding_does_not_change_the_outputs(attention: str) -> None:
    model = _model(seed=3, attention=attention)
    src, src_lens = _source(3, [6, 3, 1])
    padded, _ = _source(3, [6, 3, 1], extra_padding=4)
    tgt_in = torch.randint(3, VOCAB, (3, 5))
    logits, weights = model(src, src_lens, tgt_in, need_weights=True)
    logits_padded, weights_padded = model(padded, src_lens, tgt_in, need_weights=True)
    torch.testing.assert_close(logits_padded, logits)
    torch.testing.assert_close(weights_padded[..., :6], weights)
    assert torch.all(weights_padded[..., 6:] == 0)
    # and each row alone gives what it gives in the batch
    for row, n in enumerate(src_lens.tolist()):
        alone, _ = model(src[row : row + 1, :n], src_lens[row : row + 1], tgt_in[row : row + 1])
        torch.testing.assert_close(alone[0], logits[row], atol=1e-5, rtol=1e-5)


# ---------------------------------------------------------------------------- incremental decoding


@pytest.mark.parametrize("attention", _compatible_scorings())
@pytest.mark.parametrize("tie_embeddings", [True, False])
def test_decode_step_reproduces_teacher_forcing(attention: str, tie_embeddings: bool) -> None:
    """Step-by-step decoding scores every prefix exactly as the parallel forward does."""
    model = _model(seed=4, attention=attention, tie_embeddings=tie_embeddings)
    src, src_lens = _source(4, [5, 2, 7])
    tgt_in = torch.randint(3, VOCAB, (3, 6))
    tgt_in[:, 0] = BOS
    logits, _ = model(src, src_lens, tgt_in)
    state = model.encode(src, src_lens)
    for t in range(tgt_in.shape[1]):
        step_logits, state = model.decode_step(tgt_in[:, t], state)
        torch.testing.assert_close(step_logits, logits[:, t], atol=1e-5, rtol=1e-5)


def test_reorder_state_picks_rows_of_every_tensor() -> None:
    model = _model(seed=5)
    src, src_lens = _source(5, [3, 5, 2])
    state = model.encode(src, src_lens)
    index = torch.tensor([2, 0, 0, 1])
    tokens = torch.tensor([4, 5, 6, 7])
    reordered_logits, reordered = model.decode_step(tokens, model.reorder_state(state, index))
    assert reordered["hidden"].shape == (2, 4, 16)
    # the same as encoding the picked sources directly
    direct_logits, _ = model.decode_step(tokens, model.encode(src[index], src_lens[index]))
    torch.testing.assert_close(reordered_logits, direct_logits)


# ---------------------------------------------------------------------------- greedy and beam search


def _decoding_model(seed: int, attention: str = "additive") -> Seq2SeqAttention:
    """A random model whose outputs depend on the source and the prefix, and that ends some
    sentences: sharper logits and recurrence, a likelier ``<eos>``, and (as in a trained model)
    ``<pad>`` and ``<bos>`` never predicted."""
    model = _model(seed=seed, attention=attention, embed_dim=16, hidden_size=32)
    with torch.no_grad():
        assert model.output_bias is not None
        model.output_proj.weight.mul_(3.0)
        model.decoder.weight_hh_l1.mul_(3.0)
        model.output_bias[EOS] += 1.0
        model.output_bias[PAD] -= 1e4
        model.output_bias[BOS] -= 1e4
    return model


def _sequence_score(
    model: Seq2SeqAttention, src: torch.Tensor, src_lens: torch.Tensor, output: list[int], alpha: float
) -> float:
    """Length-normalized log-probability of ``output + <eos>`` for one source (as beam search ranks it)."""
    target = torch.tensor([output + [EOS]])
    tgt_in = torch.tensor([[BOS, *output]])
    with torch.no_grad():
        logits, _ = model(src, src_lens, tgt_in)
    log_prob = torch.log_softmax(logits.float(), -1).gather(-1, target.unsqueeze(-1)).sum()
    return float(log_prob) / length_penalty(len(output) + 1, alpha)


LENGTHS = [6, 2, 4, 1, 5, 3, 7, 2, 8, 4, 1, 6]


@pytest.mark.parametrize("attention", ["additive", "dot_product"])
def test_greedy_decoding_equals_beam_search_of_width_one(attention: str) -> None:
    ended = 0
    for seed in range(6):
        model = _decoding_model(seed, attention)
        src, src_lens = _source(seed, LENGTHS)
        greedy = greedy_decode(model, src, src_lens, DecodeLimits(BOS, EOS, max_len=20))
        beam = beam_search(model, src, src_lens, DecodeLimits(BOS, EOS, max_len=20), beam_size=1)
        assert greedy == beam
        ended += sum(len(row) < 20 for row in greedy)
    assert 0 < ended < 6 * len(LENGTHS)  # some outputs ended with <eos>, some ran to max_len


@pytest.mark.parametrize("attention", ["additive", "dot_product"])
def test_beam_search_finds_hypotheses_at_least_as_likely_as_greedy(attention: str) -> None:
    """Beam search is not exact (it may prune the greedy path, and it stops at ``beam_size``
    finished hypotheses), so this is a property of these models rather than a theorem."""
    alpha, max_len, compared, different = 0.6, 25, 0, 0
    for seed in range(12):
        model = _decoding_model(seed, attention)
        src, src_lens = _source(seed, LENGTHS)
        limits = DecodeLimits(BOS, EOS, max_len)
        greedy = greedy_decode(model, src, src_lens, limits)
        beam = beam_search(model, src, src_lens, limits, beam_size=4, alpha=alpha)
        assert len(beam) == len(greedy) == len(LENGTHS)
        for row, (g, b) in enumerate(zip(greedy, beam)):
            assert not {BOS, EOS} & set(g) and not {BOS, EOS} & set(b)
            if len(g) == max_len:  # greedy never ended: no finished hypothesis to compare with
                continue
            assert len(b) < max_len  # beam search ended its hypothesis too
            one_src, one_len = src[row : row + 1, : src_lens[row]], src_lens[row : row + 1]
            beam_score = _sequence_score(model, one_src, one_len, b, alpha)
            assert beam_score >= _sequence_score(model, one_src, one_len, g, alpha) - 1e-5
            compared, different = compared + 1, different + (b != g)
    assert compared >= 40 and different >= 5


# ---------------------------------------------------------------------------- attention choice


def test_any_compatible_scoring_attention_is_accepted() -> None:
    assert {"additive", "dot_product", "linear"} <= set(_compatible_scorings())
    assert "local" not in _compatible_scorings(), "a sliding window does not attend over another sequence"


@pytest.mark.parametrize("flag", ["supports_padding_mask", "supports_weights", "supports_cross_attention"])
def test_an_attention_without_masks_or_weights_is_refused(flag: str) -> None:
    name = f"test_seq2seq_without_{flag}"

    class Limited(zoo.Attention):
        def score(self, queries: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
            return queries @ keys.transpose(-2, -1)

    setattr(Limited, flag, False)
    zoo.register_attention(name)(Limited)
    try:
        with pytest.raises(zoo.IncompatibleAttentionError, match="GRU decoder") as error:
            Seq2SeqAttention(VOCAB, attention=name)
        assert "additive" in str(error.value)  # the message lists what would work
    finally:
        zoo.ATTENTION_REGISTRY.unregister(name)


def test_attention_layers_and_unknown_names_are_refused() -> None:
    with pytest.raises(zoo.IncompatibleAttentionError, match="layer"):
        Seq2SeqAttention(VOCAB, attention="multi_head")
    with pytest.raises(zoo.UnknownNameError, match="additive"):
        Seq2SeqAttention(VOCAB, attention="aditive")


def test_attention_kwargs_reach_the_attention() -> None:
    model = Seq2SeqAttention(
        VOCAB, embed_dim=8, hidden_size=16, attention="additive", attention_kwargs={"num_hiddens": 5}
    )
    assert model.attention.score_proj.in_features == 5


# ---------------------------------------------------------------------------- input checks


@pytest.mark.parametrize(
    ("src", "src_lens", "tgt_in", "match"),
    [
        (
            torch.ones(4, dtype=torch.long),
            torch.tensor([4]),
            torch.ones(1, 3, dtype=torch.long),
            r"src must have shape \(batch, source_length\)",
        ),
        (
            torch.ones(2, 4, dtype=torch.long),
            torch.tensor([4, 4]),
            torch.ones(3, dtype=torch.long),
            r"tgt_in must have shape \(batch, target_length\)",
        ),
        (
            torch.ones(2, 4, dtype=torch.long),
            torch.tensor([4, 4]),
            torch.ones(3, 3, dtype=torch.long),
            "same batch size",
        ),
        (
            torch.ones(2, 4, dtype=torch.long),
            torch.tensor([[4], [4]]),
            torch.ones(2, 3, dtype=torch.long),
            r"src_lens must have shape \(batch,\)",
        ),
        (torch.ones(2, 4, dtype=torch.long), torch.tensor([4, 0]), torch.ones(2, 3, dtype=torch.long), r"\[1, 4\]"),
        (torch.ones(2, 4, dtype=torch.long), torch.tensor([5, 2]), torch.ones(2, 3, dtype=torch.long), r"\[1, 4\]"),
        (torch.ones(2, 4), torch.tensor([4, 2]), torch.ones(2, 3, dtype=torch.long), "integer token ids"),
    ],
)
def test_bad_inputs_fail_before_computing(src, src_lens, tgt_in, match) -> None:
    with pytest.raises(ValueError, match=match):
        _model()(src, src_lens, tgt_in)


def test_decode_step_checks_the_token_shape() -> None:
    model = _model()
    state = model.encode(*_source(0, [3, 2]))
    with pytest.raises(ValueError, match=r"tokens must have shape \(N,\) = \(2,\)"):
        model.decode_step(torch.tensor([[BOS], [BOS]]), state)


def test_bad_hyperparameters_are_refused() -> None:
    with pytest.raises(ValueError, match="padding_idx"):
        Seq2SeqAttention(VOCAB, padding_idx=VOCAB)
    with pytest.raises(ValueError, match="hidden_size"):
        Seq2SeqAttention(VOCAB, hidden_size=0)
    with pytest.raises(ValueError, match="dropout"):
        Seq2SeqAttention(VOCAB, dropout=1.0)


# ---------------------------------------------------------------------------- training


def test_gradients_reach_the_attention_and_the_tied_embedding() -> None:
    model = _model(seed=6).train()
    src, src_lens = _source(6, [5, 3])
    tgt_in = torch.randint(3, VOCAB, (2, 4))
    logits, _ = model(src, src_lens, tgt_in)
    F.cross_entropy(logits.reshape(-1, VOCAB), torch.randint(3, VOCAB, (8,))).backward()
    for name in ("query_proj", "key_proj", "score_proj"):
        grad = getattr(model.attention, name).weight.grad
        assert grad is not None and grad.abs().sum() > 0, name
    assert model.embedding.weight.grad is not None and model.embedding.weight.grad.abs().sum() > 0
    assert model.encoder.weight_ih_l0.grad.abs().sum() > 0


def _copy_batch(g: torch.Generator, size: int, vocab: int) -> tuple[torch.Tensor, ...]:
    """Random sequences of tokens 4..vocab-1, length 3-8; the target is the source."""
    lens = torch.randint(3, 9, (size,), generator=g)
    longest = int(lens.max())
    src = torch.full((size, longest), PAD, dtype=torch.long)
    tgt_in, tgt_out = torch.full((size, longest + 1), PAD), torch.full((size, longest + 1), PAD)
    for row, n in enumerate(lens.tolist()):
        tokens = torch.randint(4, vocab, (n,), generator=g)
        src[row, :n], tgt_in[row, 0], tgt_in[row, 1 : n + 1] = tokens, BOS, tokens
        tgt_out[row, :n], tgt_out[row, n] = tokens, EOS
    return src, lens, tgt_in, tgt_out


def test_learns_to_copy() -> None:
    vocab = 21
    torch.manual_seed(0)
    model = Seq2SeqAttention(vocab, embed_dim=32, hidden_size=64, num_layers=1, dropout=0.0)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    g = torch.Generator().manual_seed(0)
    losses = []
    for _ in range(150):
        src, src_lens, tgt_in, tgt_out = _copy_batch(g, 128, vocab)
        logits, _ = model(src, src_lens, tgt_in)
        loss = F.cross_entropy(logits.reshape(-1, vocab), tgt_out.reshape(-1), ignore_index=PAD)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[0] > 0.8 * math.log(vocab)  # it started from (about) chance
    assert sum(losses[-10:]) / 10 < 0.3 * losses[0]

    model.eval()
    src, src_lens, _, _ = _copy_batch(torch.Generator().manual_seed(1234), 32, vocab)
    copies = greedy_decode(model, src, src_lens, DecodeLimits(BOS, EOS, max_len=12))
    exact = sum(copy == src[row, :n].tolist() for row, (copy, n) in enumerate(zip(copies, src_lens.tolist())))
    assert exact >= 0.8 * 32
