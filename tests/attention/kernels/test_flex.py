"""FlexAttention's masks and biases against the zoo's variants, on the CPU (eager flex).

Each mask builder is held to the variant it mirrors twice: the block mask's dense form (the pairs
its mask function keeps, inside the tiles the block mask visits) equals the pairs the variant
gives a non-zero weight (its explicit path, ``need_weights=True``, in float64), and
:func:`flex_attend`'s output equals the variant's own forward in float32 to 1e-5, over lengths
that flex's 128-position blocks do not divide, with key padding (a sequence with no key
included: a zero output), ALiBi and T5 biases, and grouped key and value heads.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import Tensor

import zoo
from zoo.attention.kernels import flex
from zoo.positions.alibi import ALiBi
from zoo.positions.t5 import T5RelativeBias, t5_bucket

create_mask = pytest.importorskip("torch.nn.attention.flex_attention", reason="PyTorch before 2.5").create_mask

HEADS, DIM = 2, 16
TOLERANCE = 1e-5


def _inputs(batch: int, num_queries: int, num_keys: int, *, kv_heads: int = HEADS, dtype=torch.float32):
    generator = torch.Generator().manual_seed(num_queries * 1000 + num_keys)
    q = torch.randn(batch, HEADS, num_queries, DIM, generator=generator, dtype=dtype)
    k, v = (torch.randn(batch, kv_heads, num_keys, DIM, generator=generator, dtype=dtype) for _ in range(2))
    return q, k, v


def _lengths(batch: int, num_keys: int) -> Tensor:
    """Every key, a third fewer, and none (a row with nothing visible), cycled over the batch."""
    return torch.tensor([num_keys, num_keys - num_keys // 3, 0][:batch])


def _kept_by_block_mask(block_mask, batch: int, num_queries: int, num_keys: int) -> Tensor:
    """``(batch, Lq, Lk)``: the pairs the mask function keeps inside the tiles the block mask visits."""
    pairs = create_mask(block_mask.mask_mod, batch, 1, num_queries, num_keys, "cpu")[:, 0]
    rows, cols = block_mask.BLOCK_SIZE
    tiles = block_mask.to_dense()[:, 0].bool()
    tiles = tiles.repeat_interleave(rows, -2).repeat_interleave(cols, -1)[..., :num_queries, :num_keys]
    return pairs.expand(batch, -1, -1) & tiles


def _variant_weights(variant, q, k, v, lengths: Tensor | None, is_causal: bool, **options) -> Tensor:
    valid_lens = None if lengths is None else lengths[:, None].expand(-1, q.shape[1])
    with torch.no_grad():
        _, weights = variant(q.double(), k.double(), v.double(), valid_lens, is_causal=is_causal, need_weights=True,
                             **options)  # fmt: skip
    return weights


def _variant_output(variant, q, k, v, lengths: Tensor | None, is_causal: bool, **options) -> Tensor:
    valid_lens = None if lengths is None else lengths[:, None].expand(-1, q.shape[1])
    with torch.no_grad():
        output, _ = variant(q, k, v, valid_lens, is_causal=is_causal, **options)
    return output


# -- masks against the variants ---------------------------------------------------------------------

#: (id, variant name, its arguments, is_causal, the mask builder given the variant and Lk)
MASK_CASES = [
    ("local-causal", "local", {"window": 40}, True, lambda a, n: flex.sliding_window(40, is_causal=True)),
    ("local", "local", {"window": 40}, False, lambda a, n: flex.sliding_window(40, is_causal=False)),
    ("local-odd", "local", {"window": 33}, False, lambda a, n: flex.sliding_window(33, is_causal=False)),
    (
        "longformer",
        "longformer",
        {"window": 16, "global_tokens": 2},
        False,
        lambda a, n: flex.longformer(16, a.global_positions, is_causal=False),
    ),
    (
        "longformer-causal",
        "longformer",
        {"window": 16, "global_tokens": [0, 50, 150]},
        True,
        lambda a, n: flex.longformer(16, a.global_positions, is_causal=True),
    ),
    (
        "sparse",
        "sparse",
        {"block_size": 32, "summary": 4},
        False,
        lambda a, n: flex.fixed_sparse(32, 4, is_causal=False),
    ),
    (
        "sparse-causal",
        "sparse",
        {"block_size": 32, "summary": 4},
        True,
        lambda a, n: flex.fixed_sparse(32, 4, is_causal=True),
    ),
    (
        "bigbird",
        "bigbird",
        {"block_size": 16, "num_random_blocks": 2},
        False,
        lambda a, n: flex.bigbird(16, a.random_blocks(math.ceil(n / 16), torch.device("cpu"))),
    ),
    ("causal", "dot_product", {}, True, lambda a, n: flex.causal()),
]


def _case_params(lengths: tuple[int, ...]) -> list:
    return [
        pytest.param(name, options, is_causal, builder, length, id=f"{case}-{length}")
        for case, name, options, is_causal, builder in MASK_CASES
        for length in lengths
    ]


@pytest.mark.parametrize(("name", "options", "is_causal", "builder", "length"), _case_params((100, 300)))
def test_the_block_mask_keeps_the_pairs_the_variant_weighs(name, options, is_causal, builder, length) -> None:
    variant = zoo.create_attention(name, **options).eval()
    q, k, v = _inputs(3, length, length)
    lengths = _lengths(3, length)
    mask = builder(variant, length) & flex.key_padding(lengths)
    kept = _kept_by_block_mask(flex.block_mask_for(mask, 3, length, length, "cpu"), 3, length, length)
    weights = _variant_weights(variant, q, k, v, lengths, is_causal)
    assert torch.equal(kept, (weights != 0).any(1)), "the block mask keeps other pairs than the variant"
    assert torch.equal(kept, (weights != 0).all(1))  # the same for every head


@pytest.mark.parametrize(("name", "options", "is_causal", "builder", "length"), _case_params((100, 200, 300)))
def test_flex_attend_equals_the_variant(name, options, is_causal, builder, length) -> None:
    variant = zoo.create_attention(name, **options).eval()
    q, k, v = _inputs(3, length, length)
    lengths = _lengths(3, length)
    output = flex.flex_attend(q, k, v, mask=builder(variant, length) & flex.key_padding(lengths))
    expected = _variant_output(variant, q, k, v, lengths, is_causal)
    torch.testing.assert_close(output, expected, atol=TOLERANCE, rtol=TOLERANCE)
    assert torch.equal(output[2], torch.zeros_like(output[2]))  # no key: a zero output


@pytest.mark.parametrize(
    ("name", "options", "mask"),
    [
        ("dot_product", {}, flex.causal()),
        ("local", {"window": 40}, flex.sliding_window(40, is_causal=True)),
        ("sparse", {"block_size": 32, "summary": 4}, flex.fixed_sparse(32, 4, is_causal=True)),
    ],
    ids=["causal", "local", "sparse"],
)
def test_fewer_queries_than_keys_sit_at_the_last_positions(name: str, options: dict, mask: flex.FlexMask) -> None:
    """Cached decoding: 37 queries over 300 keys are positions 263 to 299 (bottom-right)."""
    variant = zoo.create_attention(name, **options).eval()
    q, k, v = _inputs(2, 37, 300)
    lengths = torch.tensor([300, 280])
    output = flex.flex_attend(q, k, v, mask=mask & flex.key_padding(lengths))
    torch.testing.assert_close(output, _variant_output(variant, q, k, v, lengths, True), atol=TOLERANCE, rtol=TOLERANCE)


def test_documents_see_only_their_own_document() -> None:
    length = 200
    q, k, v = _inputs(2, length, length)
    ids = torch.stack([torch.arange(length) // 70, (torch.arange(length) >= 13).long()])  # 3 documents; 2
    same = ids[:, :, None] == ids[:, None, :]  # (B, L, L), built here independently of the mask function
    variant = zoo.create_attention("dot_product").eval()
    for is_causal in (False, True):
        mask = flex.documents(ids) & flex.causal() if is_causal else flex.documents(ids)
        with torch.no_grad():
            expected, _ = variant(q, k, v, attn_mask=same[:, None], is_causal=is_causal)
        torch.testing.assert_close(flex.flex_attend(q, k, v, mask=mask), expected, atol=TOLERANCE, rtol=TOLERANCE)


# -- biases and grouped heads ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("causal_scheme", "is_causal"),
    [(False, False), (True, True), (True, False)],
    ids=["bidirectional", "causal", "causal-scheme-unmasked"],  # the last: the scheme's signed distance shows
)
@pytest.mark.parametrize("length", [100, 300])
def test_alibi_bias_equals_the_scheme(causal_scheme: bool, is_causal: bool, length: int) -> None:
    scheme = ALiBi(HEADS, causal=causal_scheme)
    q, k, v = _inputs(3, length, length)
    lengths = _lengths(3, length)
    mask = flex.key_padding(lengths) & flex.causal() if is_causal else flex.key_padding(lengths)
    output = flex.flex_attend(q, k, v, mask=mask, score_mod=flex.alibi_bias(scheme.slopes, is_causal=causal_scheme))
    expected = _variant_output(zoo.create_attention("dot_product"), q, k, v, lengths, is_causal, position_bias=scheme)
    torch.testing.assert_close(output, expected, atol=TOLERANCE, rtol=TOLERANCE)


@pytest.mark.parametrize("is_causal", [False, True], ids=["bidirectional", "causal"])
@pytest.mark.parametrize("length", [100, 300])
def test_t5_bias_equals_the_scheme(is_causal: bool, length: int) -> None:
    torch.manual_seed(length)
    scheme = T5RelativeBias(HEADS, causal=is_causal, init_std=1.0)  # large biases: a wrong bucket shows
    buckets = t5_bucket(flex.relative_distances(length), bidirectional=not is_causal, num_buckets=32, max_distance=128)
    q, k, v = _inputs(3, length, length)
    lengths = _lengths(3, length)
    mask = flex.key_padding(lengths) & flex.causal() if is_causal else flex.key_padding(lengths)
    with torch.no_grad():
        output = flex.flex_attend(q, k, v, mask=mask, score_mod=flex.bucketed_bias(scheme.bias, buckets))
    expected = _variant_output(zoo.create_attention("dot_product"), q, k, v, lengths, is_causal, position_bias=scheme)
    torch.testing.assert_close(output, expected, atol=TOLERANCE, rtol=TOLERANCE)


@pytest.mark.parametrize("scheme_name", ["alibi", "t5"])
def test_a_scheme_of_the_distance_alone_goes_as_its_table_over_distances(scheme_name: str) -> None:
    """A bias scheme called at query 0 over :func:`relative_distances` gives a table whose
    bucket is the distance's index: a variant can pass its scheme without knowing its kind."""
    torch.manual_seed(0)
    scheme = zoo.create_position(scheme_name, d_model=HEADS * DIM, num_heads=HEADS, causal=True)
    length = 300
    distances = flex.relative_distances(length)
    with torch.no_grad():
        table = scheme(torch.zeros(1, dtype=torch.long), distances)  # (H, 2L - 1)
        q, k, v = _inputs(2, 37, length)
        output = flex.flex_attend(
            q, k, v, mask=flex.causal(), score_mod=flex.bucketed_bias(table, torch.arange(len(distances)))
        )
    expected = _variant_output(zoo.create_attention("dot_product"), q, k, v, None, True, position_bias=scheme)
    torch.testing.assert_close(output, expected, atol=TOLERANCE, rtol=TOLERANCE)


class _ScaledDistance(torch.nn.Module):
    """A plugin's bias scheme: ``-0.1 (query - key)`` per head, with ``relative`` as it declares it."""

    def __init__(self, relative: bool) -> None:
        super().__init__()
        self.relative = relative

    def forward(self, query_positions: Tensor, key_positions: Tensor) -> Tensor:
        return -0.1 * (query_positions - key_positions).float().expand(HEADS, *torch.broadcast_shapes(
            query_positions.shape, key_positions.shape))  # fmt: skip


def test_flex_takes_any_scheme_that_declares_itself_relative_and_no_other() -> None:
    """Whether a bias goes to FlexAttention as a table over distances is the scheme's own
    ``relative`` (:func:`~zoo.attention.kernels.position_bias.is_relative`), a plugin's too."""
    variant = zoo.create_attention("dot_product")

    def refusal(scheme: torch.nn.Module) -> str | None:
        context = zoo.AttentionContext(is_causal=True).with_position_bias(scheme)
        return variant._refusal(torch.device("cpu"), torch.float32, requires_grad=False, head_dim=DIM, context=context)

    assert refusal(_ScaledDistance(relative=True)) is None
    assert refusal(_ScaledDistance(relative=False)) == "the bias scheme _ScaledDistance is no table over distances"


def test_local_relative_bias_and_alibi_together() -> None:
    """``local``'s learned bias per distance (a bucket table whose bucket is the distance's
    column) chained with ALiBi, over fewer queries than keys."""
    torch.manual_seed(0)
    window, length = 40, 300
    variant = zoo.create_attention("local", window=window, relative_bias=True, num_heads=HEADS).eval()
    with torch.no_grad():
        variant.relative_bias.normal_()
    scheme = ALiBi(HEADS, causal=True)
    columns = variant.relative_bias.shape[1]
    buckets = (window // 2 - flex.relative_distances(length)).clamp(0, columns - 1)
    score_mod = flex.chain_scores(
        flex.bucketed_bias(variant.relative_bias, buckets), flex.alibi_bias(scheme.slopes, is_causal=True)
    )
    q, k, v = _inputs(2, 37, length)
    with torch.no_grad():
        output = flex.flex_attend(q, k, v, mask=flex.sliding_window(window, is_causal=True), score_mod=score_mod)
    expected = _variant_output(variant, q, k, v, None, True, position_bias=scheme)
    torch.testing.assert_close(output, expected, atol=TOLERANCE, rtol=TOLERANCE)


@pytest.mark.parametrize("kv_heads", [1, 2])
def test_grouped_key_value_heads(kv_heads: int) -> None:
    q, _, _ = _inputs(3, 200, 200)
    q = torch.cat([q, q.flip(-1)], 1)  # 4 query heads
    _, k, v = _inputs(3, 200, 200, kv_heads=kv_heads)
    lengths = _lengths(3, 200)
    output = flex.flex_attend(q, k, v, mask=flex.causal() & flex.key_padding(lengths), enable_gqa=True)
    valid_lens = lengths[:, None].expand(-1, 4)
    with torch.no_grad():
        expected, _ = zoo.create_attention("dot_product")(q, k, v, valid_lens, is_causal=True)
    torch.testing.assert_close(output, expected, atol=TOLERANCE, rtol=TOLERANCE)


# -- dtypes, devices and the cache ------------------------------------------------------------------


def test_float64_is_exact_and_a_row_with_nothing_visible_is_zero() -> None:
    q, k, v = _inputs(3, 100, 100, dtype=torch.float64)
    lengths = _lengths(3, 100)
    output = flex.flex_attend(q, k, v, mask=flex.causal() & flex.key_padding(lengths))
    keep = torch.ones(100, 100, dtype=torch.bool).tril() & (torch.arange(100) < lengths[:, None, None])
    scores = (q @ k.mT / math.sqrt(DIM)).masked_fill(~keep[:, None], -math.inf)
    expected = torch.softmax(scores, -1).nan_to_num(0.0) @ v
    assert output.dtype == torch.float64
    torch.testing.assert_close(output, expected, atol=1e-12, rtol=1e-12)
    assert not output.isnan().any()


def test_flex_supported_says_what_runs() -> None:
    assert flex.flex_supported("cpu", torch.float32) and flex.flex_supported("cpu", torch.float64)
    assert flex.flex_supported("cuda", torch.bfloat16) and not flex.flex_supported("cuda", torch.float64)
    assert not flex.flex_supported("cpu", torch.float32, requires_grad=True)
    assert not flex.flex_supported("meta", torch.float32)
    q, k, v = _inputs(1, 100, 100)
    with pytest.raises(NotImplementedError):  # what requires_grad=False on the CPU stands for
        flex.flex_attend(q.requires_grad_(), k, v, mask=flex.causal())


def test_a_block_mask_is_built_once_per_description_and_shape() -> None:
    flex.clear_block_masks()
    q, k, v = _inputs(2, 100, 100)
    first = flex.flex_attend(q, k, v, mask=flex.causal() & flex.key_padding(torch.tensor([100, 60])))
    second = flex.flex_attend(q, k, v, mask=flex.causal() & flex.key_padding(torch.tensor([100, 60])))  # new objects
    assert torch.equal(first, second)
    assert (flex.block_mask_cache_info().hits, flex.block_mask_cache_info().misses) == (1, 1)
    flex.flex_attend(q, k, v, mask=flex.causal() & flex.key_padding(torch.tensor([100, 61])))  # other data
    flex.flex_attend(q[:, :, :50], k, v, mask=flex.causal() & flex.key_padding(torch.tensor([100, 60])))  # other shape
    assert (flex.block_mask_cache_info().hits, flex.block_mask_cache_info().misses) == (1, 3)


def test_the_block_mask_cache_is_bounded() -> None:
    flex.clear_block_masks()
    for window in range(1, flex.BLOCK_MASK_CACHE_SIZE + 6):
        flex.block_mask_for(flex.sliding_window(window, is_causal=True), 1, 16, 16, "cpu")
    info = flex.block_mask_cache_info()
    assert info.currsize == info.maxsize == flex.BLOCK_MASK_CACHE_SIZE
    flex.block_mask_for(flex.sliding_window(1, is_causal=True), 1, 16, 16, "cpu")  # the oldest went first
    assert flex.block_mask_cache_info().hits == 0


def test_flex_compiles_with_static_shapes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Automatic dynamic shapes made the integers a mask closes over symbolic, which Inductor's flex
    lowering refused on an H200 (``docs/results/gpu.md``, the third lease): both compiled functions
    take static shapes."""
    compiled = []
    monkeypatch.setattr(torch, "compile", lambda fn, **options: compiled.append(options) or fn)
    flex._compiled.cache_clear()
    try:
        flex._compiled("flex_attention"), flex._compiled("create_block_mask")
    finally:
        flex._compiled.cache_clear()
    assert compiled == [{"dynamic": False}] * 2
