"""``zoo.testing.check_attention`` on recurrent variants: a plugin's recurrence gets the built-ins'
checks (causal throughout, key masks, decoding from the state, a state that does not grow), inside
a self-attention layer when it reads the layer's input, and broken ones are caught by the check
they break."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

import zoo
from zoo.attention.cache import StateCache
from zoo.attention.recurrent import Recurrence, RecurrentAttention
from zoo.testing import AttentionContractError, check_attention

ALL_CHECKS = ("shape", "padding", "causal", "fully_masked", "weights", "float16", "bfloat16", "gradients")
STATE_CHECKS = ("state_decoding", "state_size")


class _GatedPlugin(RecurrentAttention):
    """A plugin's recurrence: linear attention with a decay per head and step from the layer's input."""

    def __init__(self, embed_dim: int, num_heads: int, **options) -> None:
        super().__init__(embed_dim, num_heads, **options)
        self.decay = nn.Linear(embed_dim, num_heads)

    def prepare(self, queries: Tensor, keys: Tensor, values: Tensor, layer_input: Tensor | None) -> Recurrence:
        log_decay = F.logsigmoid(self.decay(layer_input)).to(queries.dtype).transpose(-1, -2).unsqueeze(-1)
        return Recurrence(queries, keys, values, log_decay)


class _FixedDecayPlugin(RecurrentAttention):
    """A recurrence that reads no layer input: checked as a scoring attention, on one head."""

    reads_layer_input = False

    def prepare(self, queries: Tensor, keys: Tensor, values: Tensor, layer_input: Tensor | None) -> Recurrence:
        return Recurrence(queries, keys, values, queries.new_tensor(-0.1).reshape(1, 1))


class _PeeksAhead(_GatedPlugin):
    """Decays each step by the next token's gate: position t depends on the input at t + 1."""

    def prepare(self, queries, keys, values, layer_input):
        return super().prepare(queries, keys, values, layer_input.roll(-1, dims=1))


class _ForgetsTheState(_GatedPlugin):
    """Decodes every call from a zero state."""

    def attend_cached(self, queries, keys, values, cache, mask=None, **kwargs):
        output, fresh = super().attend_cached(queries, keys, values, None, mask, **kwargs)
        return output, fresh if cache is None else StateCache(fresh.state, cache.length + queries.shape[-2])


class _KeepsEveryKey(_GatedPlugin):
    """Carries every key seen beside its state: the cache grows with the context."""

    def attend_cached(self, queries, keys, values, cache, mask=None, **kwargs):
        output, new = super().attend_cached(queries, keys, values, cache, mask, **kwargs)
        kept = keys if cache is None else torch.cat([cache.extra[0], keys], dim=-2)
        return output, StateCache(new.state, new.length, (kept,))


class _RunsBothWays(_GatedPlugin):
    """Declares it is causal only, yet runs a non-causal call as a causal one."""

    def check_request(self, mask, *, is_causal, **kwargs):
        super().check_request(mask, is_causal=True, **kwargs)


@pytest.fixture
def registered() -> Iterator[None]:
    """The plugins registered (a layer builds its attention by name), and unregistered after."""
    names = {"kit_gated": _GatedPlugin, "kit_peeks": _PeeksAhead, "kit_forgets": _ForgetsTheState}
    names |= {"kit_keeps": _KeepsEveryKey, "kit_both_ways": _RunsBothWays}
    for name, cls in names.items():
        zoo.register_attention(name)(cls)
    yield
    for name in names:
        zoo.ATTENTION_REGISTRY.unregister(name)


def test_a_plugins_recurrence_gets_the_built_ins_checks_in_a_layer(registered) -> None:
    report = check_attention(_GatedPlugin)
    assert report.variant == "_GatedPlugin (in a self-attention layer)"
    assert report.passed == ALL_CHECKS + STATE_CHECKS
    assert set(report.skipped) == {"bidirectional", "query_masks"}
    layer = check_attention("self", attention=zoo.AttentionSpec("kit_gated", {"mode": "chunkwise", "chunk_size": 2}))
    assert layer.passed == ALL_CHECKS + STATE_CHECKS


def test_a_recurrence_without_layer_input_is_checked_as_a_scoring_attention() -> None:
    report = check_attention(_FixedDecayPlugin, dtypes=())
    assert report.variant == "_FixedDecayPlugin" and report.passed[-2:] == STATE_CHECKS


def test_the_built_ins_are_checked_in_a_layer_of_their_own_size_and_mode() -> None:
    report = check_attention("gated_deltanet", embed_dim=12, num_heads=3, mode="recurrent", dtypes=())
    assert report.passed[-2:] == STATE_CHECKS


@pytest.mark.parametrize(
    ("variant", "check", "message"),
    [
        # the padding check runs causally too, and comes first: a later key is hidden from a query
        (_PeeksAhead, "padding", "query 1 of sequence 0 changed when key/value 2, hidden from it, changed"),
        (_ForgetsTheState, "state_decoding", "a prompt of 3 then one position at a time through attend_cached differs"),
        (_KeepsEveryKey, "state_size", "a recurrent state must not grow with the length"),
        (_RunsBothWays, "supports_bidirectional", "declares supports_bidirectional=False but accepted is_causal=False"),
    ],
)
def test_broken_recurrences_are_caught_by_the_check_they_break(registered, variant, check, message) -> None:
    with pytest.raises(AttentionContractError) as info:
        check_attention(variant, dtypes=())
    text = str(info.value)
    assert f"fails the attention contract [{check}]: " in text and message in text, text


def test_a_recurrence_that_reads_the_layer_input_needs_a_name_and_a_class() -> None:
    with pytest.raises(TypeError, match=r"register it first \(@zoo.register_attention\)"):
        check_attention(_GatedPlugin)
    with pytest.raises(TypeError, match="pass its class or registered name"):
        check_attention(zoo.create_attention("gla", embed_dim=8, num_heads=2))
