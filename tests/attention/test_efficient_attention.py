"""The efficient-attention families (``performer``, ``linformer``, ``longformer``, ``bigbird``,
``sparse``) against naive float64 formulations of their definitions, the attention contract, and
linear memory growth."""

from __future__ import annotations

import math
import warnings

import pytest
import torch

import zoo
from tests.helpers.layers import run_layer
from zoo.attention import IncompatibleAttentionError, require_attention
from zoo.attention.variants.performer import orthogonal_gaussian
from zoo.errors import ConfigurationError
from zoo.testing import check_attention

# -- naive formulations ------------------------------------------------------------------------


def naive(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, allowed: torch.Tensor, valid_lens: torch.Tensor | None
) -> torch.Tensor:
    """Softmax attention over an explicit ``(Lq, Lk)`` pattern and padding, one query at a time."""
    batch, num_queries, num_keys = q.shape[0], q.shape[1], k.shape[1]
    out = torch.zeros(batch, num_queries, v.shape[-1], dtype=torch.float64)
    for b in range(batch):
        for i in range(num_queries):
            seen = [j for j in range(num_keys) if allowed[i, j] and (valid_lens is None or j < valid_lens[b])]
            if seen:
                scores = torch.stack([q[b, i] @ k[b, j] for j in seen]) / math.sqrt(q.shape[-1])
                out[b, i] = torch.softmax(scores, 0) @ v[b, seen]
    return out


def longformer_pattern(
    num_queries: int, num_keys: int, window: int, global_tokens: list[int], causal: bool
) -> torch.Tensor:
    allowed = torch.zeros(num_queries, num_keys, dtype=torch.bool)
    for i in range(num_queries):
        p = i + num_keys - num_queries
        for j in range(num_keys):
            near = 0 <= p - j < window if causal else abs(p - j) <= window // 2
            allowed[i, j] = (near or j in global_tokens or p in global_tokens) and (not causal or j <= p)
    return allowed


def sparse_pattern(num_queries: int, num_keys: int, stride: int, summary: int, causal: bool) -> torch.Tensor:
    allowed = torch.zeros(num_queries, num_keys, dtype=torch.bool)
    for i in range(num_queries):
        p = i + num_keys - num_queries
        for j in range(num_keys):
            allowed[i, j] = (p // stride == j // stride or j % stride >= stride - summary) and (not causal or j <= p)
    return allowed


def bigbird_pattern(num_queries: int, num_keys: int, block: int, random: torch.Tensor) -> torch.Tensor:
    last = (num_keys - 1) // block
    allowed = torch.zeros(num_queries, num_keys, dtype=torch.bool)
    for i in range(num_queries):
        p = i + num_keys - num_queries
        for j in range(num_keys):
            qb, kb = p // block, j // block
            allowed[i, j] = abs(qb - kb) <= 1 or kb in (0, last) or qb in (0, last) or kb in random[qb].tolist()
    return allowed


def _inputs(num_queries: int, num_keys: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(2, num_queries, 8, generator=g, dtype=torch.float64)
    return (
        q,
        torch.randn(2, num_keys, 8, generator=g, dtype=torch.float64),
        torch.randn(2, num_keys, 5, generator=g, dtype=torch.float64),
    )


# (Lq, Lk, causal, padded): square, cached decoding (fewer queries, causal), padding
SHAPES = [
    (23, 23, False, False),
    (23, 23, False, True),
    (23, 23, True, True),
    (9, 23, True, False),
    (1, 23, True, True),
]


def _compare(attention: zoo.Attention, allowed_for, lq: int, lk: int, causal: bool, padded: bool) -> None:
    q, k, v = _inputs(lq, lk)
    valid_lens = torch.tensor([lk, lk - 6]) if padded else None
    expected = naive(q, k, v, allowed_for(lq, lk, causal), valid_lens)
    fast = attention(q, k, v, valid_lens, is_causal=causal).output
    explicit, weights = attention(q, k, v, valid_lens, is_causal=causal, need_weights=True)
    torch.testing.assert_close(fast, expected)
    torch.testing.assert_close(explicit, expected)
    torch.testing.assert_close(weights @ v, expected)


@pytest.mark.parametrize(("lq", "lk", "causal", "padded"), SHAPES)
def test_longformer_equals_its_naive_pattern(lq: int, lk: int, causal: bool, padded: bool) -> None:
    attention = zoo.create_attention("longformer", window=4, global_tokens=[0, 11], block_size=3).double()
    _compare(attention, lambda a, b, c: longformer_pattern(a, b, 4, [0, 11], c), lq, lk, causal, padded)


@pytest.mark.parametrize(("lq", "lk", "causal", "padded"), SHAPES)
def test_sparse_equals_its_naive_pattern(lq: int, lk: int, causal: bool, padded: bool) -> None:
    attention = zoo.create_attention("sparse", block_size=4, summary=2).double()
    _compare(attention, lambda a, b, c: sparse_pattern(a, b, 4, 2, c), lq, lk, causal, padded)


@pytest.mark.parametrize(("lq", "lk", "causal", "padded"), [shape for shape in SHAPES if not shape[2]])
def test_bigbird_equals_its_naive_pattern(lq: int, lk: int, causal: bool, padded: bool) -> None:
    attention = zoo.create_attention("bigbird", block_size=2, num_random_blocks=2, seed=3).double()
    random = attention.random_blocks(math.ceil(lk / 2), torch.device("cpu"))
    _compare(attention, lambda a, b, c: bigbird_pattern(a, b, 2, random), lq, lk, causal, padded)


def test_bigbird_random_blocks_are_seeded_and_outside_window_and_global() -> None:
    attention = zoo.create_attention("bigbird", block_size=2, num_random_blocks=3, seed=5)
    random = attention.random_blocks(12, torch.device("cpu"))
    assert torch.equal(
        random,
        zoo.create_attention("bigbird", block_size=2, num_random_blocks=3, seed=5).random_blocks(
            12, torch.device("cpu")
        ),
    )
    assert not torch.equal(
        random,
        zoo.create_attention("bigbird", block_size=2, num_random_blocks=3, seed=6).random_blocks(
            12, torch.device("cpu")
        ),
    )
    for b in range(12):
        chosen = random[b].tolist()
        assert len(set(chosen)) == 3 and not {0, 11, b - 1, b, b + 1} & set(chosen)


def test_bigbird_too_short_for_its_pattern_is_exact_and_says_so_once() -> None:
    attention = zoo.create_attention("bigbird", block_size=4, num_random_blocks=1).double()
    q, k, v = _inputs(10, 10)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = attention(q, k, v).output
        attention(q, k, v)
    assert [str(w.message) for w in caught if "computed exactly" in str(w.message)].__len__() == 1
    torch.testing.assert_close(out, naive(q, k, v, torch.ones(10, 10, dtype=torch.bool), None))


# -- performer ---------------------------------------------------------------------------------


def favor_features(x: torch.Tensor, projection: torch.Tensor) -> torch.Tensor:
    """``exp(W x' - |x'|^2 / 2) / sqrt(m)`` with ``x' = x d^(-1/4)``, written out."""
    x = x * x.shape[-1] ** -0.25
    return torch.exp(x @ projection.T - (x * x).sum(-1, keepdim=True) / 2) / math.sqrt(projection.shape[0])


def test_performer_features_estimate_the_softmax_kernel_without_bias() -> None:
    g = torch.Generator().manual_seed(0)
    q, k = (
        torch.randn(4, 6, generator=g, dtype=torch.float64) * 0.7,
        torch.randn(5, 6, generator=g, dtype=torch.float64) * 0.7,
    )
    estimates = [
        favor_features(q, w) @ favor_features(k, w).T for w in (orthogonal_gaussian(64, 6, g) for _ in range(400))
    ]
    estimates = torch.stack(estimates)
    mean, standard_error = estimates.mean(0), estimates.std(0) / math.sqrt(len(estimates))
    exact = torch.exp(q @ k.T / math.sqrt(6))
    assert ((mean - exact).abs() < 4 * standard_error).all()  # unbiased: within Monte Carlo error of the kernel
    assert (standard_error < 0.05 * exact).all()  # precise enough to see a bias of a fifth of the kernel


def _performer_error(num_features: int, seeds: range) -> float:
    """Mean absolute error against exact softmax attention, averaged over draws of the features."""
    q, k, v = _inputs(16, 16)
    q, k = q * 0.5, k * 0.5
    exact = naive(q, k, v, torch.ones(16, 16, dtype=torch.bool), None)
    errors = [
        (
            zoo.create_attention("performer", query_size=8, num_features=num_features, seed=s).double()(q, k, v).output
            - exact
        )
        .abs()
        .mean()
        for s in seeds
    ]
    return float(torch.stack(errors).mean())


def test_performer_error_against_softmax_falls_as_features_grow() -> None:
    few, many = _performer_error(8, range(6)), _performer_error(512, range(6))
    assert many < 0.35 * few


@pytest.mark.parametrize(("lq", "lk", "causal", "padded"), SHAPES)
def test_performer_linear_time_path_equals_quadratic_form_of_its_features(
    lq: int, lk: int, causal: bool, padded: bool
) -> None:
    attention = zoo.create_attention("performer", query_size=8, num_features=32, chunk_size=4).double()
    q, k, v = _inputs(lq, lk)
    valid_lens = torch.tensor([lk, lk - 6]) if padded else None
    kernel = favor_features(q, attention.projection) @ favor_features(k, attention.projection).transpose(
        -2, -1
    )  # (B, Lq, Lk)
    keep = torch.ones(2, lq, lk, dtype=torch.bool)
    if causal:
        keep &= zoo.causal_mask(lq, lk)
    if padded:
        keep &= torch.arange(lk) < valid_lens[:, None, None]
    weights = kernel * keep
    expected = weights / weights.sum(-1, keepdim=True) @ v
    torch.testing.assert_close(attention(q, k, v, valid_lens, is_causal=causal).output, expected)
    torch.testing.assert_close(
        attention(q, k, v, valid_lens, is_causal=causal, need_weights=True).weights,
        weights / weights.sum(-1, keepdim=True),
    )


def test_performer_redraws_only_when_asked_and_never_in_evaluation() -> None:
    attention = zoo.create_attention("performer", query_size=8, redraw_interval=2, seed=1)
    twin = zoo.create_attention("performer", query_size=8, redraw_interval=2, seed=1)
    assert torch.equal(attention.projection, twin.projection)  # every process draws the same features
    first, x = attention.projection.clone(), torch.randn(1, 5, 8)
    attention.eval()
    for _ in range(3):
        attention(x, x, x)
    assert torch.equal(attention.projection, first)
    attention.train()
    attention(x, x, x)
    assert torch.equal(attention.projection, first)
    attention(x, x, x)
    assert not torch.equal(attention.projection, first)
    assert "projection" in attention.state_dict() and int(attention.state_dict()["draws"]) == 1


def test_performer_normalizer_does_not_overflow_in_float16() -> None:
    g = torch.Generator().manual_seed(0)
    attention = zoo.create_attention("performer", query_size=16, seed=0)
    q, k, v = (torch.randn(1, 4096, 16, generator=g) * 2 for _ in range(3))
    half = attention.half()(q.half(), k.half(), v.half()).output
    assert torch.isfinite(half).all()
    torch.testing.assert_close(
        half.float(),
        attention.float()(q.half().float(), k.half().float(), v.half().float()).output,
        atol=2e-2,
        rtol=2e-2,
    )


# -- linformer ---------------------------------------------------------------------------------


def naive_linformer(attention, q, k, v, valid_lens):
    """softmax(q (E K)^T / sqrt(d)) (softmax_visible(F) V), one sequence at a time."""
    e = attention.key_projection.detach().double()
    f = attention.value_logits.detach().double()
    out = torch.zeros(q.shape[0], q.shape[1], v.shape[-1], dtype=torch.float64)
    for b in range(q.shape[0]):
        n = k.shape[1] if valid_lens is None else int(valid_lens[b])
        keys, values = e[:, :n] @ k[b, :n], torch.softmax(f[:, :n], -1) @ v[b, :n]
        out[b] = torch.softmax(q[b] @ keys.T / math.sqrt(q.shape[-1]), -1) @ values
    return out


@pytest.mark.parametrize("padded", [False, True])
def test_linformer_equals_its_naive_formulation_on_shorter_inputs(padded: bool) -> None:
    attention = zoo.create_attention("linformer", max_len=40, k=6).double()
    q, k, v = _inputs(23, 23)
    valid_lens = torch.tensor([23, 17]) if padded else None
    expected = naive_linformer(attention, q, k, v, valid_lens)
    out, weights = attention(q, k, v, valid_lens, need_weights=True)
    torch.testing.assert_close(attention(q, k, v, valid_lens).output, expected)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(weights @ v, expected)


def test_bigbird_is_refused_by_decoders() -> None:
    x = torch.randn(1, 8, 4)
    with pytest.raises(IncompatibleAttentionError, match="causal"):
        zoo.create_attention("bigbird", block_size=1, num_random_blocks=0)(x, x, x, is_causal=True)
    with pytest.raises(IncompatibleAttentionError, match="bigbird"):
        require_attention("bigbird", causal=True, role="a decoder")


def test_linformer_refuses_longer_inputs_and_decoders() -> None:
    attention = zoo.create_attention("linformer", max_len=16, k=4)
    x = torch.randn(1, 17, 8)
    with pytest.raises(ConfigurationError, match="17 keys exceed max_len=16"):  # a setting: one line, exit 2
        attention(x, x, x)
    with pytest.raises(IncompatibleAttentionError, match="causal"):
        attention(x[:, :8], x[:, :8], x[:, :8], is_causal=True)
    with pytest.raises(IncompatibleAttentionError, match="linformer"):
        require_attention("linformer", causal=True, role="a decoder")


# -- the contract, and memory that grows linearly ------------------------------------------------

# check_attention's weights check expects every key that no mask hides to be scored, so the
# pattern variants run it on patterns that cover its 7 positions; the tests above hold the
# sparse patterns themselves.
CONTRACT = [
    ("performer", {}),
    ("linformer", {"max_len": 16, "k": 4}),
    ("longformer", {"window": 2, "global_tokens": [0, 3], "block_size": 2}),
    ("bigbird", {"block_size": 1, "num_random_blocks": 0}),
    ("sparse", {"block_size": 8}),
]


@pytest.mark.parametrize(("name", "kwargs"), CONTRACT, ids=[name for name, _ in CONTRACT])
def test_variant_keeps_the_attention_contract(name: str, kwargs: dict) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # bigbird computes the contract's 4-key inputs exactly, and says so
        report = check_attention(name, **kwargs)
    assert "padding" in report.passed and "gradients" in report.passed


@pytest.mark.parametrize("name", ["performer", "linformer", "longformer", "bigbird", "sparse"])
def test_variant_is_usable_per_head_and_declares_no_position_bias(name: str) -> None:
    assert zoo.get_attention(name).supports_position_bias is False
    layer = zoo.create_attention(
        "self", embed_dim=16, num_heads=2, attention=zoo.AttentionSpec(name, num_kv_heads=1)
    )  # grouped: keys repeated
    x = torch.randn(2, 10, 16)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # bigbird: 10 tokens are too few for its pattern, computed exactly
        out, weights = run_layer(layer, x, valid_lens=torch.tensor([10, 6]), need_weights=True)
    assert out.shape == (2, 10, 16) and weights.shape == (2, 2, 10, 10)
    torch.testing.assert_close(weights[1, :, :, 6:], torch.zeros(2, 10, 4))


# (name, kwargs, causal, growth): saved elements may grow by `growth` when the length doubles.
# `sparse` scores l + c L / l keys per query (l = 32, c = 1: 64 keys at 1024 tokens, 96 at 2048), so
# its memory grows as L (l + c L / l), faster than linearly; the others are linear (2x, with slack).
MEMORY = [
    ("performer", {"query_size": 16, "num_features": 32}, True, 2.3),
    ("linformer", {"max_len": 4096, "k": 32}, False, 2.3),
    ("longformer", {"window": 32}, True, 2.3),
    ("bigbird", {"block_size": 32, "num_random_blocks": 2}, False, 2.3),
    ("sparse", {"block_size": 32}, True, 2 * 96 / 64 * 1.1),
]


def _saved_elements(attention: torch.nn.Module, length: int, causal: bool) -> tuple[int, int]:
    """Elements autograd saves for backward (the training memory), and the largest saved tensor."""
    sizes: list[int] = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        sizes.append(t.numel())
        return t

    x = torch.randn(1, length, 16, requires_grad=True)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        attention(x, x, x, torch.tensor([length - 3]), is_causal=causal).output.sum()
    return sum(sizes), max(sizes)


@pytest.mark.parametrize(("name", "kwargs", "causal", "growth"), MEMORY, ids=[entry[0] for entry in MEMORY])
def test_training_memory_grows_as_the_pattern_scores(name: str, kwargs: dict, causal: bool, growth: float) -> None:
    attention = zoo.create_attention(name, **kwargs)
    for is_causal in {False, causal}:
        small, _ = _saved_elements(attention, 1024, is_causal)
        large, largest = _saved_elements(attention, 2048, is_causal)
        assert large < growth * small, (
            f"{name} (causal={is_causal}) saves {large / small:.2f}x the elements for twice the length"
        )
        assert largest < 2048 * 2048 // 4, f"{name} saves a tensor of {largest} elements, near the (L, L) scores"


CAUSAL_VARIANTS = [
    ("performer", {"query_size": 8, "num_features": 16, "chunk_size": 4}),
    ("longformer", {"window": 4, "global_tokens": [0, 5], "block_size": 3}),
    ("sparse", {"block_size": 4, "summary": 1}),
]


@pytest.mark.parametrize(("name", "kwargs"), CAUSAL_VARIANTS, ids=[name for name, _ in CAUSAL_VARIANTS])
def test_step_by_step_decoding_equals_the_whole_causal_sequence(name: str, kwargs: dict) -> None:
    """A decoder's cached step (one query over the keys so far) meets the pattern it met in training."""
    attention = zoo.create_attention(name, **kwargs).double()
    q, k, v = _inputs(19, 19)
    whole = attention(q, k, v, is_causal=True).output
    steps = torch.cat(
        [attention(q[:, t : t + 1], k[:, : t + 1], v[:, : t + 1], is_causal=True).output for t in range(19)], 1
    )
    torch.testing.assert_close(steps, whole)


@pytest.mark.parametrize(("name", "kwargs"), [("linformer", {"max_len": 16}), ("bigbird", {"block_size": 2})])
def test_a_layer_declares_what_its_per_head_attention_lacks(name: str, kwargs: dict) -> None:
    """A self-attention layer over a non-causal variant says so, and the kit checks its refusal."""
    layer = zoo.create_attention("self", embed_dim=16, num_heads=2, attention=zoo.AttentionSpec(name, kwargs))
    assert zoo.attention.capabilities(layer).supports_causal is False
    assert type(layer).supports_causal is True and "supports_causal" not in vars(layer)  # read, not set on the instance
    report = zoo.check_attention(layer)
    assert "causal" in report.skipped and "padding" in report.passed
