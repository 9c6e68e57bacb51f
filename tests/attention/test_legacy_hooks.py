"""Plugins written against the contract before the context keep working, with one warning naming
the rename: a scoring attention whose ``attend`` takes ``(queries, keys, values, mask, *,
is_causal, need_weights[, position_bias])``, one that calls a built-in's ``super().attend`` that
way, and a layer whose ``attend`` and ``attend_cached`` take the mask and options one by one."""

from __future__ import annotations

import warnings
from collections.abc import Iterator

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor

import zoo
from zoo.attention.masking import masked_softmax, with_causal
from zoo.attention.recurrent import Recurrence, RecurrentLayer
from zoo.models import GPT
from zoo.testing import check_attention


def _define_old_cosine() -> type[zoo.Attention]:
    class OldCosine(zoo.Attention):
        """Cosine attention with a temperature, its hook of the old shape written out."""

        def attend(self, queries, keys, values, mask, *, is_causal=False, need_weights=False):
            scores = 5 * F.normalize(queries, dim=-1) @ F.normalize(keys, dim=-1).transpose(-2, -1)
            if is_causal:
                mask = with_causal(mask, queries.shape[-2], keys.shape[-2], queries.device)
            weights = masked_softmax(scores, mask=mask)
            return zoo.AttentionOutput(weights @ values, weights if need_weights else None)

    return OldCosine


def test_a_scoring_hook_of_the_old_shape_warns_once_naming_the_rename() -> None:
    with pytest.warns(
        FutureWarning,
        match=r"OldCosine\.attend\(queries, keys, values, mask.*rename it to attend\(queries, keys, values, context\)",
    ):
        _define_old_cosine()


def test_a_scoring_hook_of_the_old_shape_gets_the_contexts_fields_and_keeps_the_contract() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        old_cosine = _define_old_cosine()
    q, k, v = torch.randn(2, 5, 4), torch.randn(2, 5, 4), torch.randn(2, 5, 3)
    lens = torch.tensor([5, 2])
    out, weights = old_cosine()(q, k, v, lens, is_causal=True, need_weights=True)
    keep = (torch.arange(5) < lens[:, None, None]) & torch.ones(5, 5, dtype=torch.bool).tril()
    scores = 5 * F.normalize(q, dim=-1) @ F.normalize(k, dim=-1).transpose(-2, -1)
    expected = torch.softmax(scores.masked_fill(~keep, float("-inf")), -1)
    torch.testing.assert_close(weights, expected)
    torch.testing.assert_close(out, expected @ v)
    assert check_attention(old_cosine, dtypes=()).passed


def test_a_plugin_calling_a_built_ins_super_attend_the_old_way_takes_its_bias() -> None:
    """A subclass of ``dot_product`` of the old shape that halves the keys and calls
    ``super().attend(..., mask, is_causal=..., position_bias=...)``: inside a rotary-free ALiBi GPT
    it computes what ``dot_product`` does on halved keys."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)

        class HalvedKeys(zoo.DotProductAttention):
            supports_position_bias = True  # an override takes a bias only where it says so

            def attend(self, queries, keys, values, mask, *, is_causal=False, need_weights=False, position_bias=None):
                return super().attend(
                    queries, keys / 2, values, mask, is_causal=is_causal, need_weights=need_weights,
                    position_bias=position_bias,
                )  # fmt: skip

    alibi = zoo.create_position("alibi", d_model=8, num_heads=2)
    q, k, v = (torch.randn(2, 2, 6, 4) for _ in range(3))
    padding = (torch.arange(6) < torch.tensor([6, 4])[:, None])[:, None, None, :]
    ours = HalvedKeys()(q, k, v, attn_mask=padding, is_causal=True, position_bias=alibi).output
    reference = zoo.DotProductAttention()(q, k / 2, v, attn_mask=padding, is_causal=True, position_bias=alibi)
    torch.testing.assert_close(ours, reference.output)


def _define_old_layer() -> type[RecurrentLayer]:
    class OldGatedLayer(RecurrentLayer):
        """A recurrent layer plugin of the old shape: its hooks take the mask and options one by
        one, and call the built-in's the old way."""

        def __init__(self, embed_dim: int, num_heads: int, **options) -> None:
            super().__init__(embed_dim, num_heads, key_dim=embed_dim, value_dim=embed_dim, **options)
            self.decay = torch.nn.Linear(embed_dim, num_heads)

        def prepare(self, queries: Tensor, keys: Tensor, values: Tensor, layer_input: Tensor) -> Recurrence:
            log_decay = F.logsigmoid(self.decay(layer_input)).to(queries.dtype).transpose(-1, -2).unsqueeze(-1)
            return Recurrence(F.silu(queries), F.silu(keys), values, log_decay)

        def attend(self, x, mask, *, is_causal, need_weights):
            return super().attend(x, mask, is_causal=is_causal, need_weights=need_weights)

        def attend_cached(self, x, cache, *, attn_mask=None):
            return super().attend_cached(x, cache, attn_mask=attn_mask)

    return OldGatedLayer


@pytest.fixture
def old_layer() -> Iterator[type[RecurrentLayer]]:
    """The old-shaped layer, registered as ``test_old_gated_layer`` for the test."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        layer = _define_old_layer()
    zoo.register_attention_layer("test_old_gated_layer")(layer)
    yield layer
    zoo.ATTENTION_REGISTRY.unregister("test_old_gated_layer")


def test_a_layer_of_the_old_shape_warns_naming_both_renames() -> None:
    with pytest.warns(FutureWarning) as caught:
        _define_old_layer()
    messages = [str(w.message) for w in caught]
    assert any("OldGatedLayer.attend(x, mask" in m and "rename it to attend(x, context)" in m for m in messages)
    assert any(
        "attend_cached(x, cache, *, attn_mask=None)" in m and "attend_cached(x, cache, context)" in m for m in messages
    )


def test_a_layer_of_the_old_shape_keeps_the_contract_in_a_stack(old_layer: type[RecurrentLayer]) -> None:
    report = check_attention(old_layer, dtypes=())
    assert report.passed[-2:] == ("state_decoding", "state_size")
    model = GPT(16, block_size=8, d_model=16, num_heads=2, num_layers=2, attention="test_old_gated_layer").eval()
    tokens = torch.randint(16, (2, 8))
    full, _ = model(tokens)
    _, caches = model(tokens[:, :5], use_cache=True)
    stepped, _ = model(tokens[:, 5:6], caches, use_cache=True)
    torch.testing.assert_close(stepped[:, -1], full[:, 5], rtol=1e-4, atol=1e-5)
