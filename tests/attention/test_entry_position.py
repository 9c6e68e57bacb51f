"""An attention entry's ``position: none``: its layers go without the stack's rotary scheme (a
hybrid's linear layers beside rotated attention), the others keep it."""

from __future__ import annotations

import pytest
import torch

from zoo import AttentionContext
from zoo.attention.build.spec import layer_specs
from zoo.attention.modules.multi_head import self_attention_layer
from zoo.positions import RotaryEmbedding


def _layer(entry: object, position: RotaryEmbedding | None) -> torch.nn.Module:
    torch.manual_seed(0)
    spec = layer_specs([entry], None, 1, position=position, causal=True)[0]
    return self_attention_layer(spec, embed_dim=32, num_heads=2)


def test_an_unpositioned_entry_computes_what_the_layer_without_positions_computes() -> None:
    rope = RotaryEmbedding(16)
    x, context = torch.randn(2, 12, 32), AttentionContext(is_causal=True)
    opted_out = _layer({"name": "gated_deltanet", "position": "none"}, rope)(x, context).output
    plain = _layer("gated_deltanet", None)(x, context).output
    rotated = _layer("gated_deltanet", rope)(x, context).output
    torch.testing.assert_close(opted_out, plain)
    assert not torch.allclose(rotated, plain, atol=1e-4)


def test_the_other_entries_keep_the_stack_scheme_and_summaries_say_which() -> None:
    rope = RotaryEmbedding(16)
    specs = layer_specs([{"name": "gated_deltanet", "position": None}, "softmax"], None, 2, position=rope, causal=True)
    assert specs[0].position is None and specs[1].position is rope
    assert specs[0].describe() == "gated_deltanet(position='none')" and specs[1].describe() == "softmax"


def test_an_entry_naming_another_scheme_is_refused_in_one_line() -> None:
    with pytest.raises(ValueError, match="an entry's position can only be none") as caught:
        layer_specs([{"name": "softmax", "position": "alibi"}], None, 1, position=RotaryEmbedding(16), causal=True)
    assert "\n" not in str(caught.value)
