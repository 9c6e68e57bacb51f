"""A hook of the shape the contract had for a few days before the context (the mask and options
one by one, no ``context``) is refused when its class is created, in one line naming the rename:
no adapter sits in any call of a built-in's ``attend``."""

from __future__ import annotations

import pytest
import torch.nn.functional as F
from torch import Tensor

import zoo
from zoo.attention.modules.recurrent import Recurrence, RecurrentLayer


def test_a_scoring_hook_of_the_old_shape_is_refused_naming_the_rename() -> None:
    with pytest.raises(TypeError) as info:

        class OldCosine(zoo.Attention):
            def attend(self, queries, keys, values, mask, *, is_causal=False, need_weights=False):
                raise AssertionError("never called")

    message = str(info.value)
    assert message.startswith("OldCosine.attend takes the mask and options one by one")
    assert "rename it to attend(queries, keys, values, context)" in message and "\n" not in message


@pytest.mark.parametrize(
    ("hook", "rename"),
    [("attend", "attend(x, context)"), ("attend_cached", "attend_cached(x, cache, context)")],
)
def test_a_layer_hook_of_the_old_shape_is_refused_naming_the_rename(hook: str, rename: str) -> None:
    def attend(self, x, mask, *, is_causal, need_weights):
        raise AssertionError("never called")

    def attend_cached(self, x, cache, *, attn_mask=None):
        raise AssertionError("never called")

    def prepare(self, queries: Tensor, keys: Tensor, values: Tensor, layer_input: Tensor) -> Recurrence:
        return Recurrence(F.silu(queries), F.silu(keys), values, None)

    hooks = {"attend": attend, "attend_cached": attend_cached}
    with pytest.raises(TypeError) as info:
        type("OldLayer", (RecurrentLayer,), {"prepare": prepare, hook: hooks[hook]})
    message = str(info.value)
    assert message.startswith(f"OldLayer.{hook} takes the mask and options one by one")
    assert f"rename it to {rename}" in message


def test_the_built_ins_hooks_are_their_own_functions() -> None:
    """No wrapper stands between a call and a built-in's ``attend``: each is the function its class defines."""
    for name in zoo.list_attention():
        cls = zoo.get_attention(name)
        for hook in ("attend", "attend_cached"):
            for klass in cls.__mro__:
                if hook in klass.__dict__:
                    assert not hasattr(klass.__dict__[hook], "__wrapped__"), f"{klass.__name__}.{hook} is wrapped"
