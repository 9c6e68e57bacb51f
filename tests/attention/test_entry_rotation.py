"""An attention entry's ``position: {base, fraction, partial}``: its layers rotate with the stack's
rotary scheme under those options (Gemma 4's global layers beside its sliding ones), the others
with the stack's."""

from __future__ import annotations

import pytest
import torch

from zoo import AttentionContext
from zoo.attention.build.spec import layer_specs
from zoo.attention.modules.multi_head import self_attention_layer
from zoo.attention.variants.softmax_recipes import QKNormAttention
from zoo.positions import RotaryEmbedding

GLOBAL = {"fraction": 0.25, "partial": "proportional", "base": 1000000}


@torch.no_grad()
def test_an_entry_rotated_otherwise_computes_what_a_layer_built_with_that_rotation_computes() -> None:
    specs = layer_specs([{"name": "qk_norm", "position": GLOBAL}, "qk_norm"], None, 2, position=RotaryEmbedding(8))
    torch.manual_seed(0)
    layer = self_attention_layer(specs[0], 32, 4)
    direct = QKNormAttention(32, 4, position=RotaryEmbedding(8, 1000000, fraction=0.25, partial="proportional"))
    direct.load_state_dict(layer.state_dict())
    x, context = torch.randn(2, 10, 32), AttentionContext(is_causal=True)
    torch.testing.assert_close(layer(x, context).output, direct(x, context).output)
    plain = self_attention_layer(specs[1], 32, 4)
    plain.load_state_dict(layer.state_dict())
    assert not torch.allclose(plain(x, context).output, layer(x, context).output, atol=1e-4)
    assert specs[1].position.base == 10000.0 and specs[1].position.fraction == 1.0
    assert specs[0].describe() == f"qk_norm(position={GLOBAL})" and specs[1].describe() == "qk_norm"


@pytest.mark.parametrize(
    ("position", "entry"),
    [(RotaryEmbedding(8), {"window": 4}), (None, {"base": 500000})],
    ids=["an option rope does not take", "a stack without rotary positions"],
)
def test_rotation_options_the_stack_cannot_take_are_refused_in_one_line(position, entry) -> None:
    with pytest.raises(ValueError, match="an entry's position can only be none or, with a rotary stack") as caught:
        layer_specs([{"name": "qk_norm", "position": entry}], None, 1, position=position)
    assert "\n" not in str(caught.value)
