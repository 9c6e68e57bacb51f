"""The softmax paths that decoding and the production layers' shapes take: the explicit form over
grouped key/value heads for a few queries (no cached key or value copied), values of another
width than the keys in the flash kernel, and a causal layer with its own scale keeping causality
in the kernel. Each against the attention written out here."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from zoo import AttentionContext
from zoo.attention.kernels.explicit_softmax import grouped_softmax
from zoo.attention.kernels.sdpa import masked_sdpa
from zoo.attention.variants.softmax import SoftmaxAttention

torch.manual_seed(0)


def _written_out(q, k, v, mask, scale, logits=None, sinks=None):
    """Softmax attention with each query head reading key/value head ``h // groups``, a sink logit
    per head in the denominator, float64."""
    groups = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1)
    scores = (q @ k.transpose(-2, -1)) * scale
    if logits is not None:
        scores = scores + logits
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    top = scores.amax(-1, keepdim=True).clamp_min(-1e30)
    if sinks is not None:
        top = torch.maximum(top, sinks[:, None, None])
    exp = (scores - top).exp()
    denominator = exp.sum(-1, keepdim=True)
    if sinks is not None:
        denominator = denominator + (sinks[:, None, None] - top).exp()
    return (exp / denominator.clamp_min(1e-300)) @ v


@pytest.mark.parametrize("num_queries", [1, 3])
@pytest.mark.parametrize("with_sinks", [False, True], ids=["no sinks", "sinks"])
def test_grouped_softmax_equals_attention_over_repeated_heads(num_queries: int, with_sinks: bool) -> None:
    batch, heads, kv_heads, keys, width, value_width = 2, 6, 2, 11, 8, 5
    q = torch.randn(batch, heads, num_queries, width, dtype=torch.float64)
    k = torch.randn(batch, kv_heads, keys, width, dtype=torch.float64)
    v = torch.randn(batch, kv_heads, keys, value_width, dtype=torch.float64)
    mask = torch.rand(batch, 1, num_queries, keys) > 0.3
    mask[0, 0, 0] = False  # a query that sees no key: zero output (or the sink's share: still zero)
    logits = torch.randn(heads, num_queries, keys, dtype=torch.float64)
    sinks = torch.randn(heads, dtype=torch.float64) if with_sinks else None
    got = grouped_softmax(q, k, v, mask, scale=0.3, logits=logits, sinks=sinks)
    torch.testing.assert_close(got, _written_out(q, k, v, mask, 0.3, logits, sinks))
    assert got[0, :, 0].abs().max() == 0


@pytest.mark.parametrize("value_width", [5, 12])
def test_values_of_another_width_run_in_the_flash_kernel(value_width: int) -> None:
    """Padded to one width, with the unpadded width's scale: under the flash kernel alone an
    unpadded call has no kernel to run in."""
    q, k = torch.randn(2, 3, 9, 8), torch.randn(2, 3, 9, 8)
    v = torch.randn(2, 3, 9, value_width)
    causal = torch.ones(9, 9, dtype=torch.bool).tril()
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        got = masked_sdpa(q, k, v, None, is_causal=True)
        with pytest.raises(RuntimeError), pytest.warns(UserWarning, match="same last dimension"):
            F.scaled_dot_product_attention(q, k, v, is_causal=True)
    want = _written_out(q.double(), k.double(), v.double(), causal, 1 / math.sqrt(8)).float()
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_a_scaled_causal_softmax_layer_keeps_causality_in_the_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    """Gemma 3's layers have their own scale; their causal forward reaches the kernel with
    ``is_causal`` and no ``(L, L)`` mask (a mask costs twice the work: the kernel cannot skip)."""
    kernel, calls = F.scaled_dot_product_attention, []

    def recording(*args, attn_mask=None, **options):
        calls.append((attn_mask, options.get("is_causal")))
        return kernel(*args, attn_mask=attn_mask, **options)

    layer = SoftmaxAttention(32, 4, num_kv_heads=2, qk_norm=True, scale=0.2)
    monkeypatch.setattr(F, "scaled_dot_product_attention", recording)
    layer(torch.randn(2, 16, 32), AttentionContext(is_causal=True))
    assert calls == [(None, True)]


def test_a_decoded_token_of_a_grouped_layer_with_sinks_equals_its_forwards_last_row() -> None:
    layer = SoftmaxAttention(32, 4, num_kv_heads=1, sinks=True, scale=0.3).eval()
    x = torch.randn(1, 20, 32)
    with torch.no_grad():
        whole = layer(x, AttentionContext(is_causal=True)).output
        _, cache = layer.attend_cached(x[:, :19], None)
        token, _ = layer.attend_cached(x[:, 19:], cache)
    torch.testing.assert_close(token, whole[:, 19:], rtol=1e-5, atol=1e-5)


def test_decoding_a_grouped_layer_with_sinks_copies_no_cached_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """One token reads the cache as it is: no grouped head repeated, no sink key appended."""
    import zoo.attention.kernels.window as window

    layer = SoftmaxAttention(32, 4, num_kv_heads=1, sinks=True).eval()
    with torch.no_grad():
        _, cache = layer.attend_cached(torch.randn(1, 12, 32), None)

        def refused(*args, **kwargs):
            raise AssertionError("the cache was copied")

        monkeypatch.setattr(window, "repeat_kv_heads", refused)
        monkeypatch.setattr(window, "with_sink_key", refused)
        layer.attend_cached(torch.randn(1, 1, 32), cache)


@pytest.mark.parametrize("new_tokens", [1, 3], ids=["a token", "three drafted"])
def test_a_grouped_qk_norm_layer_decodes_without_the_fused_kernel(
    monkeypatch: pytest.MonkeyPatch, new_tokens: int
) -> None:
    """Qwen3's layer (QK-norm, grouped heads, the default scale: dot_product's fused path) reads a
    grouped cache once for a few new tokens: the fused kernel is never called (it reads each
    key/value head once per query head), and the tokens equal the forward's last rows, causal
    among themselves."""
    layer = SoftmaxAttention(32, 4, num_kv_heads=1, qk_norm=True).eval()
    x = torch.randn(2, 20, 32)
    with torch.no_grad():
        whole = layer(x, AttentionContext(is_causal=True)).output
        _, cache = layer.attend_cached(x[:, : 20 - new_tokens], None)

        def refused(*args, **kwargs):
            raise AssertionError("the fused kernel read the grouped cache")

        monkeypatch.setattr(F, "scaled_dot_product_attention", refused)
        tokens, _ = layer.attend_cached(x[:, 20 - new_tokens :], cache)
    torch.testing.assert_close(tokens, whole[:, 20 - new_tokens :], rtol=1e-5, atol=1e-5)


def test_a_short_causal_grouped_forward_runs_written_out_and_causal(monkeypatch: pytest.MonkeyPatch) -> None:
    """A forward of at most DECODING_QUERIES tokens over grouped heads takes the written-out form
    too, with the causal mask the fused kernel would have formed."""
    from zoo.attention.kernels.explicit_softmax import DECODING_QUERIES
    from zoo.attention.kernels.sdpa import fused_attention

    q = torch.randn(2, 8, DECODING_QUERIES, 8, dtype=torch.float64)
    k, v = (
        torch.randn(2, 2, DECODING_QUERIES, 8, dtype=torch.float64),
        torch.randn(2, 2, DECODING_QUERIES, 8, dtype=torch.float64),
    )
    monkeypatch.setattr(F, "scaled_dot_product_attention", lambda *args, **kwargs: pytest.fail("the fused kernel ran"))
    got = fused_attention(q, k, v, None, is_causal=True, bias=None, dropout_p=0.0, scale=0.4, enable_gqa=True)
    causal = torch.ones(DECODING_QUERIES, DECODING_QUERIES, dtype=torch.bool).tril()
    torch.testing.assert_close(got, _written_out(q, k, v, causal, 0.4))


def test_a_window_cache_without_first_positions_keeps_a_view() -> None:
    """Trimming a sliding window's cache with no first positions after a decoded token copies
    nothing (transformers' sliding cache likewise keeps a slice): each token copies the window
    once, in extend. After a long prompt the window is copied out, so the prompt's keys are freed."""
    from zoo.attention.contract.cache import WindowCache

    keys, values = torch.randn(1, 2, 10, 4), torch.randn(1, 2, 10, 4)
    prompt = WindowCache(keys[..., :0, :], values[..., :0, :], 0, 0, 4).extend(keys, values).trimmed()
    assert prompt.keys.untyped_storage().nbytes() == prompt.keys.nbytes
    token = torch.randn(1, 2, 1, 4)
    extended = prompt.extend(token, token)
    trimmed = extended.trimmed()
    assert trimmed.keys.untyped_storage().data_ptr() == extended.keys.untyped_storage().data_ptr()
    torch.testing.assert_close(trimmed.keys, torch.cat([keys[..., -2:, :], token], -2))
    torch.testing.assert_close(trimmed.positions, torch.arange(8, 11))


def test_a_scaled_causal_forward_builds_no_query_key_offsets(monkeypatch: pytest.MonkeyPatch) -> None:
    """Gemma 3's full layer (its own scale, plain causality) builds no ``(L, L)`` table of offsets
    (at 4k tokens their subtraction alone cost 8% of the layer's step): causality is the kernel's
    flag, and the written-out form with weights (which forms it itself) agrees and is causal."""
    layer = SoftmaxAttention(32, 4, num_kv_heads=2, qk_norm=True, scale=0.2).eval()
    x = torch.randn(2, 16, 32)
    with torch.no_grad():
        monkeypatch.setattr(SoftmaxAttention, "_visible", lambda *args: pytest.fail("offsets were built"))
        fused = layer(x, AttentionContext(is_causal=True)).output
        explicit = layer(x, AttentionContext(is_causal=True, need_weights=True))
    torch.testing.assert_close(fused, explicit.output, rtol=1e-5, atol=1e-5)
    assert explicit.weights.triu(1).abs().max() == 0
    torch.testing.assert_close(explicit.weights.sum(-1), torch.ones(2, 4, 16))


def test_two_query_heads_a_group_decode_in_the_fused_kernel_without_repeating(monkeypatch: pytest.MonkeyPatch) -> None:
    """Gemma 3's layers (two query heads a key/value head, their own scale): below
    GROUPED_QUERY_HEADS the fused kernel is the faster, and reads the grouped cache as it is
    (``enable_gqa``), never a copy with the heads repeated."""
    import zoo.attention.kernels.window as window

    layer = SoftmaxAttention(32, 4, num_kv_heads=2, qk_norm=True, scale=0.2).eval()
    x = torch.randn(2, 20, 32)
    kernel, grouped = F.scaled_dot_product_attention, []

    def recording(*args, **options):
        grouped.append(options.get("enable_gqa"))
        return kernel(*args, **options)

    with torch.no_grad():
        whole = layer(x, AttentionContext(is_causal=True)).output
        _, cache = layer.attend_cached(x[:, :19], None)
        monkeypatch.setattr(window, "repeat_kv_heads", lambda *args: pytest.fail("the cache was copied"))
        monkeypatch.setattr(F, "scaled_dot_product_attention", recording)
        token, _ = layer.attend_cached(x[:, 19:], cache)
    assert grouped == [True]
    torch.testing.assert_close(token, whole[:, 19:], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "options",
    [{"window": 5, "sinks": True}, {"window": 5, "sink_tokens": 2, "scale": 0.3}, {"scale": 0.3}],
    ids=["window with sinks (gpt-oss)", "window with first positions", "scaled, no window"],
)
def test_a_decoded_token_forms_no_mask_and_equals_the_forwards_rows(
    monkeypatch: pytest.MonkeyPatch, options: dict
) -> None:
    """One new token sees every key its own cache holds (a window cache keeps only what the next
    token reaches), so decoding forms no mask and reads no key positions (a third of gpt-oss's
    sliding layer's step went to them); each token still equals the forward's row. A padded
    prompt's mask (the context's) is still applied, through the positions."""
    layer = SoftmaxAttention(32, 4, num_kv_heads=1, **options).eval()
    x = torch.randn(2, 14, 32)
    with torch.no_grad():
        whole = layer(x, AttentionContext(is_causal=True)).output
        _, cache = layer.attend_cached(x[:, :8], None)
        with monkeypatch.context() as patched:
            patched.setattr(SoftmaxAttention, "_visible", lambda *args: pytest.fail("a mask was formed"))
            tokens = []
            for position in range(8, 14):
                token, cache = layer.attend_cached(x[:, position : position + 1], cache)
                tokens.append(token)
        torch.testing.assert_close(torch.cat(tokens, 1), whole[:, 8:], rtol=1e-5, atol=1e-5)
        padded = torch.ones(2, 15, dtype=torch.bool)
        padded[1, 0] = False  # row 1's first position is padding: hidden from its later tokens
        _, cache = layer.attend_cached(x[:, :8], None, AttentionContext(is_causal=True, mask=padded[:, None, None, :8]))
        step = AttentionContext(is_causal=True, mask=padded[:, None, None, :9])
        token, _ = layer.attend_cached(x[:, 8:9], cache, step)
        masked = layer(x[:, :9], AttentionContext(is_causal=True, mask=padded[:, None, None, :9])).output
    torch.testing.assert_close(token, masked[:, 8:], rtol=1e-5, atol=1e-5)
