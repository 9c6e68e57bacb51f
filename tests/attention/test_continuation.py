"""The opening every recurrent layer's ``attend_cached`` shares (:mod:`zoo.attention.modules.continuation`)."""

from __future__ import annotations

import pytest
import torch

from zoo.attention.contract.base import IncompatibleAttentionError
from zoo.attention.contract.cache import KeyValueCache, StateCache
from zoo.attention.contract.context import AttentionContext
from zoo.attention.modules.continuation import continued_request
from zoo.attention.variants.gla import GatedLinearAttention


@pytest.fixture
def layer() -> GatedLinearAttention:
    return GatedLinearAttention(16, 2)


def test_no_context_is_causal_and_no_cache_stays_none(layer: GatedLinearAttention) -> None:
    cache, context = continued_request(layer, torch.zeros(1, 3, 16), None, StateCache, None)
    assert cache is None
    assert context.is_causal and context.mask is None


def test_the_mask_keeps_the_last_new_columns(layer: GatedLinearAttention) -> None:
    seen = torch.tensor([[[[False, True, True, False, True]]]])  # (B, 1, 1, L) over 5 positions seen
    held = StateCache(torch.zeros(1, 2, 8, 8), 3, ())
    cache, context = continued_request(
        layer, torch.zeros(1, 2, 16), held, StateCache, AttentionContext(is_causal=True, mask=seen)
    )
    assert cache is held
    assert context.mask is not None
    assert context.mask.tolist() == [[[[False, True]]]]


def test_a_cache_of_another_kind_is_refused(layer: GatedLinearAttention) -> None:
    other = KeyValueCache(torch.zeros(1, 2, 3, 8), torch.zeros(1, 2, 3, 8))
    with pytest.raises(TypeError, match="GatedLinearAttention continues a StateCache; got a KeyValueCache"):
        continued_request(layer, torch.zeros(1, 1, 16), other, StateCache, None)


def test_what_the_layer_cannot_serve_is_refused(layer: GatedLinearAttention) -> None:
    with pytest.raises(IncompatibleAttentionError, match="causal"):
        continued_request(layer, torch.zeros(1, 1, 16), None, StateCache, AttentionContext(is_causal=False))
