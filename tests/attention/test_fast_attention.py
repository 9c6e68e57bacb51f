"""``local`` and ``linear`` attention against naive quadratic formulations written with loops.

Each reference below decides, pair by pair, which keys a query may see and weighs them straight
from the formula; the variants compute the same thing blockwise (``local``) or through sums over
the keys (``linear``). Outputs, weights and gradients must agree in float64, for random masks,
causal and not, with as many or fewer or more queries than keys.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import Tensor

import zoo
from tests.helpers.layers import run_layer
from zoo.attention.contract.masking import mask_at
from zoo.attention.kernels import rows_from
from zoo.bench.measure import peak_memory

F64 = {"rtol": 1e-10, "atol": 1e-12}


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


# -- naive formulations --------------------------------------------------------------------------


def sees(variant: str, window: int, causal: bool, lq: int, lk: int, i: int, j: int) -> bool:
    """Whether query ``i`` may see key ``j`` by position (masks aside)."""
    position = i + (lk - lq)  # bottom-right alignment (the same as ``i`` when lq == lk)
    if variant == "local" and causal:
        return 0 <= position - j < window
    if variant == "local":
        return abs(position - j) <= window // 2
    return j <= position if causal else True


def padding_allows(masks: dict, b: int, i: int, j: int, lq: int, lk: int) -> bool:
    valid_lens, attn_mask = masks.get("valid_lens"), masks.get("attn_mask")
    if valid_lens is not None:
        limit = valid_lens[b] if valid_lens.dim() == 1 else valid_lens[b, i]
        if j >= int(limit):
            return False
    if attn_mask is not None and not bool(attn_mask.expand(-1, lq, lk)[b, i, j]):
        return False
    return True


def positive_part_plus_one(x: Tensor) -> Tensor:
    """``elu(x) + 1`` written out: ``x + 1`` for ``x > 0``, ``exp(x)`` otherwise."""
    return torch.where(x > 0, x + 1, torch.exp(torch.clamp(x, max=0)))


def naive(
    variant: str,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    masks: dict,
    causal: bool,
    window: int = 0,
    bias: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """Loops over (batch, query): the visible keys, their weights, the weighted sum of values.

    ``bias[b, t]`` (local only) is added to the score of every pair of row ``b`` whose query sits
    ``t - window // 2`` positions after its key. Differentiable, so gradients can be compared too.
    """
    batch, lq, lk, d = q.shape[0], q.shape[1], k.shape[1], q.shape[2]
    rows, weight_rows = [], []
    for b in range(batch):
        for i in range(lq):
            kept = [
                j
                for j in range(lk)
                if sees(variant, window, causal, lq, lk, i, j) and padding_allows(masks, b, i, j, lq, lk)
            ]
            weights = q.new_zeros(lk)
            if kept:
                if variant == "local":
                    position = i + lk - lq
                    scores = torch.stack(
                        [
                            q[b, i] @ k[b, j] / math.sqrt(d)
                            + (0 if bias is None else bias[b, position - j + window // 2])
                            for j in kept
                        ]
                    )
                    raw = torch.exp(scores - scores.max())
                else:
                    raw = torch.stack([positive_part_plus_one(q[b, i]) @ positive_part_plus_one(k[b, j]) for j in kept])
                weights = weights.index_put((torch.tensor(kept),), raw / raw.sum())
            weight_rows.append(weights)
            rows.append(weights @ v[b])
    return torch.stack(rows).reshape(batch, lq, -1), torch.stack(weight_rows).reshape(batch, lq, lk)


MASKS = ["none", "valid_lens", "valid_lens_per_query", "key_padding", "attn_mask"]


def make_masks(case: str, batch: int, lq: int, lk: int) -> dict:
    """Random masks; each masking case leaves some query without a visible key."""
    if case == "valid_lens":
        return {"valid_lens": torch.cat([torch.tensor([0]), torch.randint(1, lk + 1, (batch - 1,))])}
    if case == "valid_lens_per_query":
        lens = torch.randint(0, lk + 1, (batch, lq))
        lens[0, -1] = 0
        return {"valid_lens": lens}
    if case == "key_padding":
        keep = torch.rand(batch, 1, lk) > 0.3
        keep[0] = False
        return {"attn_mask": keep}
    if case == "attn_mask":
        keep = torch.rand(batch, lq, lk) > 0.3
        keep[-1, 0] = False
        return {"attn_mask": keep}
    return {}


def inputs(
    batch: int, lq: int, lk: int, dtype: torch.dtype = torch.float64, grad: bool = False
) -> tuple[Tensor, Tensor, Tensor]:
    shapes = ((batch, lq, 4), (batch, lk, 4), (batch, lk, 3))
    return tuple(torch.randn(*shape, dtype=dtype, requires_grad=grad) for shape in shapes)


# -- configurations ------------------------------------------------------------------------------

# (registered name, constructor arguments, window of the reference); block sizes that do not
# divide the length, windows wider than the sequence and a window of one included
VARIANTS = [
    ("local", {"window": 4}, 4),
    ("local", {"window": 3, "block_size": 2}, 3),
    ("local", {"window": 5, "block_size": 4}, 5),
    ("local", {"window": 1}, 1),
    ("local", {"window": 30}, 30),
    ("sliding_window", {"window": 6, "block_size": 1}, 6),
    ("linear", {}, 0),
    ("linear", {"chunk_size": 3}, 0),
    ("linear_attention", {"chunk_size": 1}, 0),
]
VARIANT_IDS = [f"{name}-{'-'.join(f'{k}{v}' for k, v in kwargs.items()) or 'default'}" for name, kwargs, _ in VARIANTS]
SHAPES = [(9, 9, False), (9, 9, True), (3, 10, True), (1, 9, True), (10, 4, True)]
SHAPE_IDS = ["square", "square_causal", "fewer_queries_causal", "one_query_causal", "more_queries_causal"]


def build(name: str, kwargs: dict) -> zoo.Attention:
    return zoo.create_attention(name, **kwargs).double().eval()


def variant_of(name: str) -> str:
    return "linear" if zoo.get_attention(name) is zoo.LinearAttention else "local"


# -- outputs, weights and gradients against the naive formulation -------------------------------


@pytest.mark.parametrize("need_weights", [False, True], ids=["no_weights", "weights"])
@pytest.mark.parametrize("case", MASKS)
@pytest.mark.parametrize(("lq", "lk", "causal"), SHAPES, ids=SHAPE_IDS)
@pytest.mark.parametrize(("name", "kwargs", "window"), VARIANTS, ids=VARIANT_IDS)
def test_matches_naive_formulation(
    name: str, kwargs: dict, window: int, lq: int, lk: int, causal: bool, case: str, need_weights: bool
) -> None:
    attention = build(name, kwargs)
    q, k, v = inputs(3, lq, lk)
    masks = make_masks(case, 3, lq, lk)
    out, weights = attention(q, k, v, is_causal=causal, need_weights=need_weights, **masks)
    expected, expected_weights = naive(variant_of(name), q, k, v, masks, causal, window)
    torch.testing.assert_close(out, expected, **F64)
    if need_weights:
        torch.testing.assert_close(weights, expected_weights, **F64)
    else:
        assert weights is None


@pytest.mark.parametrize("case", ["none", "valid_lens", "key_padding", "attn_mask"])
@pytest.mark.parametrize(("lq", "lk", "causal"), SHAPES, ids=SHAPE_IDS)
@pytest.mark.parametrize(
    ("name", "kwargs", "window"),
    [VARIANTS[1], VARIANTS[5], VARIANTS[7]],
    ids=[VARIANT_IDS[1], VARIANT_IDS[5], VARIANT_IDS[7]],
)
def test_gradients_match_naive_formulation(
    name: str, kwargs: dict, window: int, lq: int, lk: int, causal: bool, case: str
) -> None:
    attention = build(name, kwargs)
    q, k, v = inputs(2, lq, lk, grad=True)
    masks = make_masks(case, 2, lq, lk)
    upstream = torch.randn(2, lq, 3, dtype=torch.float64)
    ours = torch.autograd.grad((attention(q, k, v, is_causal=causal, **masks).output * upstream).sum(), (q, k, v))
    # where no query sees a key, the reference never touches the inputs: its gradients are zero
    expected = (naive(variant_of(name), q, k, v, masks, causal, window)[0] * upstream).sum()
    reference = torch.autograd.grad(expected, (q, k, v), allow_unused=True, materialize_grads=True)
    for got, expected in zip(ours, reference):
        torch.testing.assert_close(got, expected, **F64)


@pytest.mark.parametrize("causal", [False, True], ids=["global", "causal"])
@pytest.mark.parametrize(
    ("name", "kwargs"),
    [("local", {"window": 3, "block_size": 2}), ("linear", {"chunk_size": 2})],
    ids=["local", "linear"],
)
def test_gradcheck(name: str, kwargs: dict, causal: bool) -> None:
    attention = build(name, kwargs)
    q, k, v = inputs(2, 5, 5, grad=True)
    masks = {"valid_lens": torch.tensor([5, 3])}
    assert torch.autograd.gradcheck(lambda q, k, v: attention(q, k, v, is_causal=causal, **masks).output, (q, k, v))


@pytest.mark.parametrize(("name", "kwargs", "window"), [VARIANTS[0], VARIANTS[6]], ids=["local", "linear"])
def test_head_axis_with_a_layer_style_padding_mask(name: str, kwargs: dict, window: int) -> None:
    """Inside ``multi_head`` the batch is ``(B, H)`` and padding comes as a ``(B, 1, 1, Lk)`` mask."""
    attention = build(name, kwargs)
    q, k, v = (torch.randn(2, 3, 8, n, dtype=torch.float64) for n in (4, 4, 3))
    keep = torch.arange(8) < torch.tensor([8, 5])[:, None]
    out = attention(q, k, v, attn_mask=keep[:, None, None, :]).output
    for h in range(3):
        expected, _ = naive(
            variant_of(name), q[:, h], k[:, h], v[:, h], {"valid_lens": torch.tensor([8, 5])}, False, window
        )
        torch.testing.assert_close(out[:, h], expected, **F64)


@pytest.mark.parametrize(
    ("name", "kwargs"), [("local", {"window": 8}), ("linear", {"chunk_size": 4})], ids=["local", "linear"]
)
def test_float32_agrees_with_float64(name: str, kwargs: dict) -> None:
    attention = zoo.create_attention(name, **kwargs)
    q, k, v = inputs(2, 40, 40, torch.float32)
    for causal in (False, True):
        out32 = attention(q, k, v, torch.tensor([40, 17]), is_causal=causal).output
        out64 = attention.double()(q.double(), k.double(), v.double(), torch.tensor([40, 17]), is_causal=causal).output
        attention.float()
        assert out32.dtype == torch.float32
        torch.testing.assert_close(out32, out64.float(), rtol=1e-4, atol=1e-5)


# -- causality and cached decoding ----------------------------------------------------------------


@pytest.mark.parametrize("lk", [8, 11], ids=["square", "more_keys"])
@pytest.mark.parametrize(
    ("name", "kwargs"),
    [("local", {"window": 3, "block_size": 2}), ("linear", {"chunk_size": 3})],
    ids=["local", "linear"],
)
def test_causal_outputs_ignore_future_positions(name: str, kwargs: dict, lk: int) -> None:
    attention = build(name, kwargs)
    lq = 8
    shift = lk - lq
    q, k, v = inputs(2, lq, lk)
    baseline = attention(q, k, v, is_causal=True).output
    for i in range(lq):
        q2, k2, v2 = q.clone(), k.clone(), v.clone()
        q2[:, i + 1 :] += 10 * torch.randn_like(q2[:, i + 1 :])
        k2[:, i + shift + 1 :] += 10 * torch.randn_like(k2[:, i + shift + 1 :])
        v2[:, i + shift + 1 :] += 10 * torch.randn_like(v2[:, i + shift + 1 :])
        changed = attention(q2, k2, v2, is_causal=True).output
        torch.testing.assert_close(changed[:, : i + 1], baseline[:, : i + 1], rtol=1e-12, atol=1e-12)
        if i + 1 < lq:
            assert not torch.allclose(changed[:, i + 1 :], baseline[:, i + 1 :])


def test_local_window_ignores_keys_outside_it() -> None:
    attention = build("local", {"window": 3, "block_size": 2})
    q, k, v = inputs(1, 10, 10)
    baseline = attention(q, k, v).output
    k2, v2 = k.clone(), v.clone()
    k2[:, 7:] += 10  # query 5 sees keys 4, 5, 6 only
    v2[:, 7:] += 10
    changed = attention(q, k2, v2).output
    torch.testing.assert_close(changed[:, :6], baseline[:, :6], rtol=0, atol=0)
    assert not torch.allclose(changed[:, 6], baseline[:, 6])


@pytest.mark.parametrize(
    ("name", "kwargs"), [("local", {"window": 3}), ("linear", {"chunk_size": 2})], ids=["local", "linear"]
)
def test_one_query_at_a_time_equals_the_whole_sequence(name: str, kwargs: dict) -> None:
    """Cached decoding: step ``t`` attends from one query over the ``t + 1`` keys so far."""
    attention = build(name, kwargs)
    q, k, v = inputs(2, 7, 7)
    whole = attention(q, k, v, is_causal=True).output
    steps = [attention(q[:, t : t + 1], k[:, : t + 1], v[:, : t + 1], is_causal=True).output for t in range(7)]
    torch.testing.assert_close(torch.cat(steps, dim=1), whole, **F64)


# -- cost ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("causal", [False, True], ids=["global", "causal"])
@pytest.mark.parametrize(
    ("name", "kwargs"), [("local", {"window": 16}), ("linear", {"chunk_size": 16})], ids=["local", "linear"]
)
def test_memory_grows_linearly_with_the_length(name: str, kwargs: dict, causal: bool) -> None:
    """Forward+backward at 4x the length holds about 4x the memory (a score matrix: 16x)."""
    attention = zoo.create_attention(name, **kwargs)

    def peak(length: int) -> int:
        q, k, v = (torch.randn(1, 2, length, 8, requires_grad=True) for _ in range(3))
        mask = (torch.arange(length) < length - 5)[None, None, None, :]
        return peak_memory(
            lambda: attention(q, k, v, attn_mask=mask, is_causal=causal).output.sum().backward(),
            device=torch.device("cpu"),
        )

    short, long = peak(512), peak(2048)
    assert long < 5 * short
    assert long < 2 * 2048 * 2048 * 4 / 4, "a quarter of the two heads' (L, L) float32 score matrices"


# -- masks, precision, errors ---------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("need_weights", [False, True], ids=["no_weights", "weights"])
@pytest.mark.parametrize("name", ["local", "linear"])
def test_half_precision_and_fully_masked_rows(name: str, need_weights: bool, dtype: torch.dtype) -> None:
    attention = zoo.create_attention(name)
    q, k, v = (t.to(dtype).requires_grad_() for t in inputs(2, 5, 5, torch.float32))
    attn_mask = torch.ones(2, 1, 5, dtype=torch.bool)
    attn_mask[1] = False  # the second sequence has no key at all
    out, weights = attention(q, k, v, attn_mask=attn_mask, is_causal=True, need_weights=need_weights)
    assert out.dtype == dtype and torch.isfinite(out).all()
    assert torch.equal(out[1], torch.zeros_like(out[1]))
    if need_weights:
        assert weights.dtype == dtype and torch.equal(weights[1], torch.zeros_like(weights[1]))
    out.float().square().sum().backward()
    for tensor in (q, k, v):
        assert tensor.grad is not None and torch.isfinite(tensor.grad).all()


@pytest.mark.parametrize("name", ["local", "linear"])
def test_empty_sequences_give_empty_or_zero_outputs(name: str) -> None:
    attention = zoo.create_attention(name)
    assert attention(*inputs(2, 0, 0, torch.float32)).output.shape == (2, 0, 3)
    out, weights = attention(*inputs(2, 3, 0, torch.float32), is_causal=True, need_weights=True)
    assert torch.equal(out, torch.zeros(2, 3, 3)) and weights.shape == (2, 3, 0)


def test_non_causal_local_needs_one_sequence() -> None:
    attention = zoo.create_attention("local", window=4)
    with pytest.raises(
        zoo.IncompatibleAttentionError, match="needs queries and keys of one sequence; got 3 queries and 5 keys"
    ):
        attention(*inputs(1, 3, 5, torch.float32))


def test_linear_attends_across_sequences() -> None:
    attention = build("linear", {})
    q, k, v = inputs(2, 3, 6)
    torch.testing.assert_close(attention(q, k, v).output, naive("linear", q, k, v, {}, False)[0], **F64)


def test_bad_constructor_arguments() -> None:
    with pytest.raises(ValueError, match="window must be a positive integer"):
        zoo.create_attention("local", window=0)
    with pytest.raises(ValueError, match="block_size must be a positive integer"):
        zoo.create_attention("local", block_size=2.5)
    with pytest.raises(ValueError, match="chunk_size must be a positive integer"):
        zoo.create_attention("linear", chunk_size=0)


def test_capabilities() -> None:
    for cls in (zoo.LocalAttention, zoo.LinearAttention):
        assert cls.supports_padding_mask and cls.supports_causal and cls.supports_weights
    assert zoo.LocalAttention.has_fused_path and not zoo.LinearAttention.has_fused_path
    assert not zoo.LocalAttention.supports_cross_attention
    assert zoo.LinearAttention.supports_cross_attention
    assert {"local", "linear"} <= set(zoo.list_attention())
    assert zoo.get_attention("sliding_window") is zoo.LocalAttention


def test_cross_attention_layer_refuses_a_window() -> None:
    with pytest.raises(
        zoo.IncompatibleAttentionError, match="cross-attention.*Compatible registered names: .*dot_product"
    ):
        zoo.create_attention("cross", embed_dim=8, num_heads=2, attention="local")
    assert zoo.create_attention("cross", embed_dim=8, num_heads=2, attention="linear") is not None


@pytest.mark.parametrize("score", ["local", "linear"])
def test_self_attention_layer_runs_them_per_head(score: str) -> None:
    layer = zoo.create_attention("self", embed_dim=8, num_heads=2, attention=score).double().eval()
    x = torch.randn(2, 6, 8, dtype=torch.float64)
    out, weights = run_layer(layer, x, valid_lens=torch.tensor([6, 4]), is_causal=True, need_weights=True)
    assert out.shape == (2, 6, 8) and weights.shape == (2, 2, 6, 6)
    torch.testing.assert_close(run_layer(layer, x, valid_lens=torch.tensor([6, 4]), is_causal=True).output, out, **F64)
    assert torch.all(weights[1, :, :, 4:] == 0)


# -- relative position bias (local) ---------------------------------------------------------------


@pytest.mark.parametrize("need_weights", [False, True], ids=["no_weights", "weights"])
@pytest.mark.parametrize("case", ["none", "valid_lens", "attn_mask"])
@pytest.mark.parametrize(("lq", "lk", "causal"), SHAPES, ids=SHAPE_IDS)
@pytest.mark.parametrize(
    ("window", "block_size"), [(3, 2), (4, None), (5, 4), (30, None)], ids=["w3b2", "w4", "w5b4", "w30"]
)
def test_relative_bias_matches_naive_formulation(
    window: int, block_size: int | None, lq: int, lk: int, causal: bool, case: str, need_weights: bool
) -> None:
    """Per head, the learned bias at each distance is added to the scores: outputs, weights and
    the bias's own gradient agree with the loops."""
    heads, batch = 3, 2
    attention = build("local", {"window": window, "block_size": block_size, "relative_bias": True, "num_heads": heads})
    with torch.no_grad():
        attention.relative_bias.normal_()
    q, k, v = (torch.randn(batch, heads, n, size, dtype=torch.float64) for n, size in ((lq, 4), (lk, 4), (lk, 3)))
    masks = make_masks(case, batch, lq, lk)
    layer_masks = {
        key: value.unsqueeze(1).expand(batch, heads, *value.shape[1:]) for key, value in masks.items()
    }  # a head axis
    out, weights = attention(q, k, v, is_causal=causal, need_weights=need_weights, **layer_masks)
    table = attention.relative_bias.detach().clone().requires_grad_()
    rows = [
        naive("local", q[:, h], k[:, h], v[:, h], masks, causal, window, bias=table[h].expand(batch, -1))
        for h in range(heads)
    ]
    expected = torch.stack([row[0] for row in rows], dim=1)
    torch.testing.assert_close(out, expected, **F64)
    if need_weights:
        torch.testing.assert_close(weights, torch.stack([row[1] for row in rows], dim=1), **F64)
    upstream = torch.randn_like(out)
    (ours,) = torch.autograd.grad((out * upstream).sum(), attention.relative_bias)
    # where no query sees a key, the loops never read the bias: its gradient is zero
    reference = (
        torch.autograd.grad((expected * upstream).sum(), table)[0]
        if expected.requires_grad
        else torch.zeros_like(table)
    )
    torch.testing.assert_close(ours, reference, **F64)


def test_relative_bias_tells_left_from_right() -> None:
    """With equal scores a symmetric window averages a token with its neighbours; a large bias at
    distance +1 (the key one position before the query) makes each query read its left neighbour."""
    attention = build("local", {"window": 3, "relative_bias": True})
    q = torch.zeros(1, 6, 4, dtype=torch.float64)
    k, v = torch.randn(1, 6, 4, dtype=torch.float64), torch.randn(1, 6, 3, dtype=torch.float64)
    plain = attention(q, k, v).output
    torch.testing.assert_close(plain[:, 1:-1], (v[:, :-2] + v[:, 1:-1] + v[:, 2:]) / 3, **F64)
    with torch.no_grad():
        attention.relative_bias[0, 1 + 3 // 2] = 50.0  # distance +1
    torch.testing.assert_close(attention(q, k, v).output[:, 1:], v[:, :-1], rtol=0, atol=1e-12)


def test_relative_bias_starts_as_plain_local_attention_and_learns() -> None:
    """At zero the bias changes nothing; trained on the outputs of a window with another bias
    per head, it learns to reproduce them."""
    student = build("local", {"window": 3, "relative_bias": True, "num_heads": 2})
    teacher = build("local", {"window": 3, "relative_bias": True, "num_heads": 2})
    with torch.no_grad():
        teacher.relative_bias.normal_(std=2.0)
    q, k, v = (torch.randn(4, 2, 9, n, dtype=torch.float64) for n in (4, 4, 3))
    torch.testing.assert_close(student(q, k, v).output, build("local", {"window": 3})(q, k, v).output, **F64)
    target = teacher(q, k, v).output.detach()
    optimizer = torch.optim.Adam(student.parameters(), lr=0.1)
    losses = []
    for _ in range(100):
        loss = (student(q, k, v).output - target).square().mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.01 * losses[0]  # a bias that did nothing would leave the loss where it was


def test_a_multi_head_layer_gives_the_bias_its_head_count() -> None:
    layer = zoo.create_attention(
        "self", embed_dim=12, num_heads=3, attention=zoo.AttentionSpec("local", {"window": 5, "relative_bias": True})
    )
    assert layer.score_attention.relative_bias.shape == (3, 5 // 2 + 5)
    assert "score_attention.relative_bias" in dict(layer.named_parameters())
    x = torch.randn(2, 6, 12)
    out, weights = run_layer(layer, x, valid_lens=torch.tensor([6, 4]), need_weights=True)
    torch.testing.assert_close(run_layer(layer, x, valid_lens=torch.tensor([6, 4])).output, out, rtol=1e-5, atol=1e-6)
    assert torch.all(weights[1, :, :, 4:] == 0)
    assert (
        zoo.create_attention("self", embed_dim=12, num_heads=3, attention="local").score_attention.relative_bias is None
    )


def test_relative_bias_refuses_queries_without_its_heads() -> None:
    attention = zoo.create_attention("local", window=3, relative_bias=True, num_heads=4)
    with pytest.raises(ValueError, match=r"learned for 4 heads.*dimension -3.*got shape \(2, 3, 5, 4\).*num_heads=1"):
        attention(*(torch.randn(2, 3, 5, 4) for _ in range(3)))
    with pytest.raises(ValueError, match="num_heads must be a positive integer"):
        zoo.create_attention("local", relative_bias=True, num_heads=0)


def test_relative_bias_keeps_the_contract() -> None:
    """Masks, causality, fully masked rows, weights, half precision and gradients, with a bias
    that is not zero, alone and inside a multi-head layer. The window covers the check's
    sequences (7 positions), whose masks assume every key in reach; the bias spans it all."""
    attention = zoo.create_attention("local", window=13, relative_bias=True)
    layer = zoo.create_attention(
        "self", embed_dim=8, num_heads=2, attention=zoo.AttentionSpec("local", {"window": 13, "relative_bias": True})
    )
    for module in (attention, layer):
        with torch.no_grad():
            next(p for name, p in module.named_parameters() if name.endswith("relative_bias")).normal_()
    assert zoo.testing.check_attention(attention).passed == (
        "shape",
        "padding",
        "causal",
        "fully_masked",
        "weights",
        "float16",
        "bfloat16",
        "gradients",
    )
    assert zoo.testing.check_attention(layer, dtypes=()).passed == (
        "shape",
        "padding",
        "causal",
        "fully_masked",
        "weights",
        "gradients",
    )


# -- helpers ----------------------------------------------------------------------------------------


def test_rows_from_pads_with_zeros_on_both_sides() -> None:
    x = torch.arange(1.0, 5.0).reshape(1, 4, 1)
    assert rows_from(x, -2, 7).flatten().tolist() == [0, 0, 1, 2, 3, 4, 0]
    assert rows_from(x, 2, 3).flatten().tolist() == [3, 4, 0]
    with pytest.raises(ValueError, match="do not reach the end"):
        rows_from(x, 0, 3)


def test_mask_at_reads_broadcast_axes_at_zero() -> None:
    full = torch.rand(2, 3, 5) > 0.5
    rows, cols = torch.tensor([[0], [2]]), torch.tensor([[1, 4]])
    assert torch.equal(mask_at(full, rows, cols), full[:, [[0, 0], [2, 2]], [[1, 4], [1, 4]]])
    keys_only = torch.rand(2, 1, 5) > 0.5
    padding = mask_at(keys_only, rows, cols)
    assert padding.shape == (2, 1, 2), "no query axis in the mask: none in the result"
    assert torch.equal(padding.expand(2, 2, 2), keys_only[:, 0, [[1, 4], [1, 4]]])
    assert mask_at(torch.tensor(True), rows, cols).shape == (1, 1)


def test_a_local_layer_decodes_from_its_window_alone_with_rotary_positions() -> None:
    """A multi-head ``local`` layer keeps the last ``window - 1`` keys and values when decoding
    (``causal_reach``), so its cache is the same size after 12 and 20 tokens, and token-by-token
    decoding, its queries rotated at their own positions, equals one causal pass."""
    from zoo.attention.contract.cache import WindowCache
    from zoo.models import GPT

    torch.manual_seed(0)
    model = GPT(23, block_size=32, d_model=16, num_heads=2, num_layers=2, attention={"name": "local", "window": 4},
                position="rope").double().eval()  # fmt: skip
    tokens = torch.randint(23, (2, 20), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected, _ = model(tokens)
        logits, caches = model(tokens[:, :12], use_cache=True)
        sizes, steps = [sum(c.nbytes for c in caches)], [logits]
        for t in range(12, 20):
            logits, caches = model(tokens[:, t : t + 1], caches, use_cache=True)
            steps.append(logits)
    torch.testing.assert_close(torch.cat(steps, dim=1), expected, **F64)
    assert all(isinstance(c, WindowCache) and c.keys.shape[-2] == 3 and c.length == 20 for c in caches)
    assert sum(c.nbytes for c in caches) == sizes[0]


def decode_in_steps(model: torch.nn.Module, tokens: Tensor, prompt: int) -> tuple[Tensor, list]:
    """``model``'s logits over ``tokens`` decoded from a cache: the first ``prompt`` tokens at once,
    then one or three at a time; returns them joined, and the caches after the last."""
    logits, caches = model(tokens[:, :prompt], use_cache=True)
    steps, t = [logits], prompt
    while t < tokens.shape[1]:
        size = 1 if t % 5 else 3
        logits, caches = model(tokens[:, t : t + size], caches, use_cache=True)
        steps.append(logits)
        t += size
    return torch.cat(steps, dim=1), caches


@pytest.mark.parametrize("global_tokens", [2, [0, 5]])
def test_a_longformer_layer_decodes_from_its_global_positions_and_window(global_tokens: int | list[int]) -> None:
    """A multi-head ``longformer`` layer keeps the positions up to its last global one
    (``causal_sinks``) and the last ``window - 1`` (``causal_reach``): its cache stops growing, and
    decoding a token or three at a time after prompts of 1, 3 and 12 equals one causal pass."""
    from zoo.attention.contract.cache import WindowCache
    from zoo.models import GPT

    torch.manual_seed(0)
    attention = {"name": "longformer", "window": 4, "global_tokens": global_tokens}
    model = GPT(23, block_size=32, d_model=16, num_heads=2, num_layers=2, attention=attention, position="rope")
    model = model.double().eval()
    tokens = torch.randint(23, (2, 24), generator=torch.Generator().manual_seed(1))
    held = (2 if global_tokens == 2 else 6) + 3
    with torch.no_grad():
        expected, _ = model(tokens)
        for prompt in (1, 3, 12):
            logits, caches = decode_in_steps(model, tokens, prompt)
            torch.testing.assert_close(logits, expected, **F64)
            assert all(isinstance(c, WindowCache) and c.keys.shape[-2] == held and c.length == 24 for c in caches)


@pytest.mark.parametrize("summary", [1, 2])
def test_a_sparse_layer_decodes_from_its_block_and_summaries(summary: int) -> None:
    """A multi-head ``sparse`` layer keeps only what its later queries read (the current block and
    every block's last ``summary`` positions), so its cache holds ``l + c L / l`` of ``L``
    positions; decoding a token or three at a time after prompts of 1, 3 and 13 equals one
    causal pass."""
    from zoo.attention.contract.cache import PatternCache
    from zoo.models import GPT

    torch.manual_seed(0)
    block = 4
    model = GPT(23, block_size=40, d_model=16, num_heads=2, num_layers=2, position="rope",
                attention={"name": "sparse", "block_size": block, "summary": summary}).double().eval()  # fmt: skip
    tokens = torch.randint(23, (2, 30), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected, _ = model(tokens)
        for prompt in (1, 3, 13):
            logits, caches = decode_in_steps(model, tokens, prompt)
            torch.testing.assert_close(logits, expected, **F64)
            held = 30 % block + summary * (30 // block)  # the block 30 falls in, and 7 blocks' summaries
            for cache in caches:
                assert isinstance(cache, PatternCache) and cache.length == 30
                assert cache.keys.shape[-2] == held == len(cache.positions)
                assert set(cache.positions.tolist()) == {
                    p for p in range(30) if p >= 28 or p % block >= block - summary
                }
