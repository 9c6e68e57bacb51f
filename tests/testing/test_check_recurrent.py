"""``zoo.testing.check_attention`` on recurrent layers: a plugin's recurrence (a layer of its own,
with its gates and convolution) gets the built-ins' checks (causal throughout, key masks, decoding
from the state and the convolution's window, a state that does not grow), and broken ones are
caught by the check they break."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

import zoo
from zoo.attention.contract.cache import StateCache
from zoo.attention.modules.recurrent import Recurrence, RecurrentLayer
from zoo.testing import AttentionContractError, check_attention

ALL_CHECKS = ("shape", "padding", "causal", "fully_masked", "weights", "float16", "bfloat16", "gradients")
STATE_CHECKS = ("state_decoding", "state_size")


class _GatedPlugin(RecurrentLayer):
    """A plugin's recurrence: linear attention with a decay per head and step from the layer's input."""

    def __init__(self, embed_dim: int, num_heads: int, *, conv_size: int = 4, **options) -> None:
        super().__init__(embed_dim, num_heads, key_dim=embed_dim, value_dim=embed_dim, conv_size=conv_size, **options)
        self.decay = nn.Linear(embed_dim, num_heads)

    def prepare(self, queries: Tensor, keys: Tensor, values: Tensor, layer_input: Tensor) -> Recurrence:
        log_decay = F.logsigmoid(self.decay(layer_input)).to(queries.dtype).transpose(-1, -2).unsqueeze(-1)
        return Recurrence(queries, keys, values, log_decay)


class _PeeksAhead(_GatedPlugin):
    """Decays each step by the next token's gate: position t depends on the input at t + 1."""

    def prepare(self, queries, keys, values, layer_input):
        return super().prepare(queries, keys, values, layer_input.roll(-1, dims=1))


class _ForgetsTheState(_GatedPlugin):
    """Decodes every call from a zero state."""

    def attend_cached(self, x, cache, context=None):
        output, fresh = super().attend_cached(x, None, context)
        return output, fresh if cache is None else StateCache(fresh.state, cache.length + x.shape[1], fresh.extra)


class _ForgetsTheWindow(_GatedPlugin):
    """Keeps its state between calls but starts each call's convolution from zeros."""

    def attend_cached(self, x, cache, context=None):
        cleared = (
            None if cache is None else StateCache(cache.state, cache.length, tuple(w.zero_() for w in cache.extra))
        )
        return super().attend_cached(x, cleared, context)


class _KeepsEveryInput(_GatedPlugin):
    """Carries every input seen beside its state: the cache grows with the context."""

    def attend_cached(self, x, cache, context=None):
        output, new = super().attend_cached(x, cache, context)
        kept = x if cache is None else torch.cat([cache.extra[-1], x], dim=1)
        return output, StateCache(new.state, new.length, (*new.extra[:3], kept))


class _RunsBothWays(_GatedPlugin):
    """Declares it is causal only, yet runs a non-causal call as a causal one."""

    def check_request(self, context):
        super().check_request(context.replace(is_causal=True))


def test_a_plugins_recurrent_layer_gets_the_built_ins_checks() -> None:
    report = check_attention(_GatedPlugin)
    assert report.variant == "_GatedPlugin"
    assert report.passed == ALL_CHECKS + STATE_CHECKS
    assert set(report.skipped) == {"bidirectional", "query_masks"}
    chunked = check_attention(_GatedPlugin, mode="chunkwise", chunk_size=2, dtypes=())
    assert chunked.passed[-2:] == STATE_CHECKS


def test_the_built_ins_are_checked_at_their_own_size_mode_and_position() -> None:
    report = check_attention("gated_deltanet", embed_dim=12, num_heads=3, mode="recurrent", dtypes=())
    assert report.passed[-2:] == STATE_CHECKS
    assert check_attention("mamba2", position="rope", d_state=4, ngroups=2, dtypes=()).passed[-2:] == STATE_CHECKS


@pytest.mark.parametrize(
    ("variant", "check", "message"),
    [
        # the padding check runs causally too, and comes first: a later input is hidden from a query
        (_PeeksAhead, "padding", "query 1 of sequence 0 changed when key/value 2, hidden from it, changed"),
        (_ForgetsTheState, "state_decoding", "a prompt of 3 then one position at a time through attend_cached differs"),
        (
            _ForgetsTheWindow,
            "state_decoding",
            "a prompt of 3 then one position at a time through attend_cached differs",
        ),
        (_KeepsEveryInput, "state_size", "a recurrent state must not grow with the length"),
        (_RunsBothWays, "supports_bidirectional", "declares supports_bidirectional=False but accepted is_causal=False"),
    ],
)
def test_broken_recurrences_are_caught_by_the_check_they_break(variant, check, message) -> None:
    with pytest.raises(AttentionContractError) as info:
        check_attention(variant, dtypes=())
    text = str(info.value)
    assert f"fails the attention contract [{check}]: " in text and message in text, text


def test_a_scoring_attention_written_with_reads_layer_input_gets_one_line_naming_the_rename() -> None:
    with pytest.raises(TypeError, match="reads_layer_input is gone.*subclass zoo.AttentionLayer") as info:

        class _OldStyle(zoo.Attention):
            reads_layer_input = True

    assert "\n" not in str(info.value)
