"""The caches that grow with the context append a decoded token in place (no copy of the whole
cache every token) and stay values: a state extended twice keeps both continuations, and
gradients flow where the cache is built under autograd."""

from __future__ import annotations

import pytest
import torch

import zoo.attention.contract.cache as cache_module
from zoo import AttentionContext
from zoo.attention.contract.cache import KeyValueCache, LatentCache, append_rows
from zoo.attention.variants.softmax import SoftmaxAttention

torch.manual_seed(0)


def test_decoded_tokens_are_written_into_one_buffer() -> None:
    prompt = KeyValueCache(torch.randn(2, 3, 10, 4), torch.randn(2, 3, 10, 4))
    tokens = [torch.randn(2, 3, 1, 4) for _ in range(5)]
    cache = prompt
    for token in tokens:
        cache = cache.extend(token, -token)
    pointers = {cache.keys.untyped_storage().data_ptr()}
    for token in tokens:  # the next five land in the same buffer: none copied the cache
        cache = cache.extend(token, -token)
        pointers.add(cache.keys.untyped_storage().data_ptr())
    assert len(pointers) == 1
    torch.testing.assert_close(cache.keys, torch.cat([prompt.keys, *tokens, *tokens], -2))
    torch.testing.assert_close(cache.values, torch.cat([prompt.values, *(-t for t in tokens * 2)], -2))


def test_two_continuations_of_one_state_keep_their_own_rows() -> None:
    state = LatentCache(torch.randn(1, 6, 5), torch.randn(1, 6, 2)).extend(torch.randn(1, 1, 5), torch.randn(1, 1, 2))
    first = state.extend(torch.ones(1, 1, 5), torch.ones(1, 1, 2))
    second = state.extend(torch.zeros(1, 1, 5), torch.zeros(1, 1, 2))
    assert first.latent[0, -1].eq(1).all() and second.latent[0, -1].eq(0).all()
    torch.testing.assert_close(first.latent[:, :7], state.latent)
    assert state.length == 7 and first.length == second.length == 8


def test_under_autograd_the_rows_are_concatenated_and_gradients_flow() -> None:
    held, new = torch.randn(1, 4, 3, requires_grad=True), torch.randn(1, 1, 3, requires_grad=True)
    joined, rows = append_rows(held, new, None)
    assert rows is None
    joined.sum().backward()
    assert held.grad is not None and new.grad is not None


def test_a_layer_decoding_token_by_token_equals_its_forward(monkeypatch: pytest.MonkeyPatch) -> None:
    """Forty tokens one at a time, written into buffers with room for two more rows, so that
    they also outgrow them and are copied into larger ones: the outputs equal the forward's."""
    monkeypatch.setattr(cache_module, "LEAST_ROOM", 2)
    layer = SoftmaxAttention(32, 4, num_kv_heads=2).eval()
    x = torch.randn(2, 40, 32)
    with torch.no_grad():
        whole = layer(x, AttentionContext(is_causal=True)).output
        cache, outputs = None, []
        for position in range(40):
            output, cache = layer.attend_cached(x[:, position : position + 1], cache)
            outputs.append(output)
    torch.testing.assert_close(torch.cat(outputs, 1), whole, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("sink_tokens", [0, 2], ids=["window", "window and first positions"])
def test_a_sliding_layer_decoding_token_by_token_equals_its_forward(
    monkeypatch: pytest.MonkeyPatch, sink_tokens: int
) -> None:
    """A window of 5 slides through buffers with room for three more rows (written in place,
    outgrown, copied): forty tokens equal the forward's."""
    monkeypatch.setattr(cache_module, "LEAST_ROOM", 3)
    layer = SoftmaxAttention(32, 4, num_kv_heads=1, window=5, sink_tokens=sink_tokens).eval()
    x = torch.randn(2, 40, 32)
    with torch.no_grad():
        whole = layer(x, AttentionContext(is_causal=True)).output
        _, cache = layer.attend_cached(x[:, :3], None)
        outputs, pointers = [], set()
        for position in range(3, 40):
            output, cache = layer.attend_cached(x[:, position : position + 1], cache)
            outputs.append(output)
            pointers.add(cache.keys.untyped_storage().data_ptr())
    torch.testing.assert_close(torch.cat(outputs, 1), whole[:, 3:], rtol=1e-5, atol=1e-5)
    if not sink_tokens:  # a new buffer every few tokens, not every token
        assert len(pointers) < 37 / 2
