"""The Transformer's decoding: cached steps equal teacher forcing, for every causal attention;
the cross-attention falls back to ``dot_product`` for a variant that works within one sequence."""

from __future__ import annotations

import pytest
import torch

import zoo
from tests.helpers.models import SMALL_VOCAB, small_transformer
from zoo.models.decoding import DecodeLimits, beam_search, greedy_decode
from zoo.models.transformer import Transformer

PAD, BOS, EOS = 0, 2, 3
ATTENTIONS = [("dot_product", None), ("local", {"window": 2}), ("linear", {"chunk_size": 2}), ("additive", None)]
IDS = ["dot_product", "local", "linear", "additive"]


def _model(attention: str, attention_kwargs: dict | None, norm_first: bool = False, **kwargs) -> Transformer:
    return small_transformer(
        attention=attention, attention_kwargs=attention_kwargs, norm_first=norm_first, padding_idx=PAD, **kwargs
    )


def _source() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    src_lens = torch.tensor([7, 4, 1])
    src = torch.randint(4, SMALL_VOCAB, (3, 7), generator=g).masked_fill(torch.arange(7) >= src_lens[:, None], PAD)
    return src, src_lens


@pytest.mark.parametrize("norm_first", [False, True], ids=["post_ln", "pre_ln"])
@pytest.mark.parametrize(("attention", "kwargs"), ATTENTIONS, ids=IDS)
def test_decode_steps_with_and_without_cache_equal_teacher_forcing(
    attention: str, kwargs: dict | None, norm_first: bool
) -> None:
    model = _model(attention, kwargs, norm_first)
    src, src_lens = _source()
    tgt_in = torch.cat([torch.full((3, 1), BOS), torch.randint(4, SMALL_VOCAB, (3, 5))], dim=1)
    teacher_forced, _ = model(src, src_lens, tgt_in)
    for use_cache in (True, False):
        model.use_cache = use_cache
        state, steps = model.encode(src, src_lens), []
        for t in range(tgt_in.shape[1]):
            logits, state = model.decode_step(tgt_in[:, t], state)
            steps.append(logits)
        assert (state.caches is not None) == use_cache
        torch.testing.assert_close(torch.stack(steps, dim=1), teacher_forced, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize(("attention", "kwargs"), ATTENTIONS[:3], ids=IDS[:3])
def test_greedy_and_beam_search_are_the_same_with_the_cache(attention: str, kwargs: dict | None) -> None:
    model = _model(attention, kwargs)
    src, src_lens = _source()
    outputs = {}
    for use_cache in (True, False):
        model.use_cache = use_cache
        limits = DecodeLimits(BOS, EOS, max_len=8, forbid=(PAD, BOS))
        outputs[use_cache] = (
            greedy_decode(model, src, src_lens, limits),
            beam_search(model, src, src_lens, limits, beam_size=3),
        )
    assert outputs[True] == outputs[False]
    assert any(outputs[True][0])


def test_local_self_attention_uses_dot_product_across_sequences() -> None:
    model = _model("local", {"window": 2})
    block = model.decoder_blocks[0]
    assert isinstance(block.self_attention.score_attention, zoo.LocalAttention)
    assert block.self_attention.score_attention.window == 2
    assert type(block.cross_attention.score_attention) is zoo.DotProductAttention
    assert isinstance(model.encoder_blocks[0].attention.score_attention, zoo.LocalAttention)


def test_cross_attention_can_be_chosen() -> None:
    model = _model("linear", None)
    assert isinstance(model.decoder_blocks[0].cross_attention.score_attention, zoo.LinearAttention)
    model = _model("local", {"window": 4}, cross_attention="additive", cross_attention_kwargs={"num_hiddens": 3})
    assert model.decoder_blocks[0].cross_attention.score_attention.query_proj.out_features == 3
    with pytest.raises(zoo.IncompatibleAttentionError, match="the Transformer's cross-attention.*another sequence"):
        _model("dot_product", None, cross_attention="local")
