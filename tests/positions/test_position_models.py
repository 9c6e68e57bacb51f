"""Positional schemes inside layers and architectures: the fused path with a bias equals the
explicit one, ``local`` evaluates a bias exactly where it scores, cached decoding equals teacher
forcing for every scheme, positions make the encoder read order, and refusals name what works."""

from __future__ import annotations

import pytest
import torch

import zoo
from tests.helpers.models import small_transformer
from zoo.attention import IncompatibleAttentionError
from zoo.models import SentimentClassifier
from zoo.models.transformer import Transformer
from zoo.positions import ALiBi, T5RelativeBias

SCHEMES = ["sinusoidal", "learned", "none", "rope", "alibi", "t5"]
BIAS_SCHEMES = [ALiBi, T5RelativeBias]


def _bias(cls: type, heads: int, causal: bool) -> zoo.PositionScheme:
    torch.manual_seed(0)
    scheme = cls(heads, causal=causal)
    if isinstance(scheme, T5RelativeBias):
        torch.nn.init.normal_(scheme.bias)  # large enough to matter
    return scheme


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("cls", BIAS_SCHEMES, ids=["alibi", "t5"])
def test_fused_path_with_a_bias_equals_the_explicit_path(cls: type, causal: bool) -> None:
    attention, scheme = zoo.create_attention("dot_product").eval(), _bias(cls, 4, causal)
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 4, lq, 8, generator=g) for lq in (5, 7, 7))  # Lq < Lk: bottom-right
    valid = torch.tensor([7, 4])
    fused = attention(
        q, k, v, attn_mask=(torch.arange(7) < valid[:, None])[:, None, None], is_causal=causal, position_bias=scheme
    )
    explicit = attention(
        q,
        k,
        v,
        attn_mask=(torch.arange(7) < valid[:, None])[:, None, None],
        is_causal=causal,
        position_bias=scheme,
        need_weights=True,
    )
    torch.testing.assert_close(fused.output, explicit.output)
    # the explicit path is softmax(q k^T / sqrt(d) + bias) written out here
    i, j = torch.arange(2, 7)[:, None], torch.arange(7)
    scores = q @ k.transpose(-2, -1) / 8**0.5 + scheme(i, j)
    keep = (j < valid[:, None, None, None]) & ((j <= i) if causal else True)
    expected = torch.softmax(scores.masked_fill(~keep, float("-inf")), dim=-1) @ v
    torch.testing.assert_close(fused.output, expected)
    plain = attention(q, k, v, is_causal=causal).output
    assert not torch.allclose(plain, fused.output, atol=1e-3)  # the bias did something


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("cls", BIAS_SCHEMES, ids=["alibi", "t5"])
def test_local_adds_the_bias_at_its_block_positions(cls: type, causal: bool) -> None:
    scheme, length, window = _bias(cls, 4, causal), 11, 5
    local, dense = (
        zoo.create_attention("local", window=window, block_size=2).eval(),
        zoo.create_attention("dot_product").eval(),
    )
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 4, length, 8, generator=g) for _ in range(3))
    i, j = torch.arange(length)[:, None], torch.arange(length)
    in_window = ((i - j >= 0) & (i - j < window)) if causal else (i - j).abs() <= window // 2
    expected = dense(q, k, v, attn_mask=in_window, position_bias=scheme).output
    for need_weights in (False, True):
        torch.testing.assert_close(
            local(q, k, v, is_causal=causal, position_bias=scheme, need_weights=need_weights).output, expected
        )


def _transformer(
    position: str, attention: str = "dot_product", attention_kwargs: dict | None = None, **kwargs
) -> Transformer:
    model = small_transformer(
        attention=attention, attention_kwargs=attention_kwargs, position=position, max_len=32, **kwargs
    )
    for scheme in (model.encoder_position, model.decoder_position):
        if isinstance(scheme, T5RelativeBias):
            torch.nn.init.normal_(scheme.bias)
    return model


@pytest.mark.parametrize(
    ("attention", "num_kv_heads"),
    [("dot_product", None), ("local", None), ("dot_product", 1)],
    ids=["dense", "local", "multi_query"],
)
@pytest.mark.parametrize("position", SCHEMES)
def test_cached_decoding_equals_teacher_forcing_for_every_scheme(
    position: str, attention: str, num_kv_heads: int | None
) -> None:
    model = _transformer(
        position, attention, {"window": 3} if attention == "local" else None, num_kv_heads=num_kv_heads
    )
    g = torch.Generator().manual_seed(1)
    src_lens = torch.tensor([7, 4, 1])
    src = torch.randint(4, 17, (3, 7), generator=g).masked_fill(torch.arange(7) >= src_lens[:, None], 0)
    tgt_in = torch.cat([torch.full((3, 1), 2), torch.randint(4, 17, (3, 6), generator=g)], dim=1)
    teacher_forced, _ = model(src, src_lens, tgt_in)
    state, steps = model.encode(src, src_lens), []
    for t in range(tgt_in.shape[1]):
        logits, state = model.decode_step(tgt_in[:, t], state)
        steps.append(logits)
    torch.testing.assert_close(torch.stack(steps, dim=1), teacher_forced, rtol=1e-10, atol=1e-10)


def test_the_decoder_builds_its_own_causal_scheme_shared_by_its_layers() -> None:
    model = _transformer("t5")
    encoder, decoder = model.encoder_position, model.decoder_position
    assert not encoder.causal and decoder.causal
    assert all(block.attention.position is encoder for block in model.encoder_blocks)
    assert all(block.self_attention.position is decoder for block in model.decoder_blocks)
    assert all(block.cross_attention.position is None for block in model.decoder_blocks)
    assert (
        sum(p.numel() for p in model.parameters()) - sum(p.numel() for p in _transformer("none").parameters())
        == 2 * 2 * 32
    )


@pytest.mark.parametrize("position", SCHEMES)
def test_positions_make_the_classifier_read_word_order(position: str) -> None:
    torch.manual_seed(0)
    model = SentimentClassifier(50, d_model=32, num_heads=4, num_layers=2, ffn_hidden=64, position=position).eval()
    tokens, lens = torch.randint(2, 50, (4, 9)), torch.full((4,), 9)
    shuffled = tokens[:, torch.randperm(9, generator=torch.Generator().manual_seed(1))]
    same = torch.allclose(model(shuffled, lens)[0], model(tokens, lens)[0], atol=1e-5)
    assert same == (position == "none")


def test_a_bias_scheme_with_a_variant_that_cannot_take_it_is_refused_with_the_names_that_work() -> None:
    with pytest.raises(
        IncompatibleAttentionError, match=r"encoder layer: attention 'linear' cannot take the bias scheme ALiBi"
    ) as error:
        _transformer("alibi", "linear")
    assert "dot_product" in str(error.value) and "rope" in str(error.value)
    with pytest.raises(IncompatibleAttentionError, match="linear.*Attention variants that do: .*dot_product"):
        zoo.AttentionSpec("linear", position=ALiBi(2))
    with pytest.raises(ValueError, match="absolute scheme"):
        zoo.AttentionSpec(position=zoo.PositionalEncoding(8))
    with pytest.raises(IncompatibleAttentionError, match="position_bias"):
        zoo.create_attention("linear")(*torch.randn(3, 1, 4, 8), position_bias=ALiBi(1))
