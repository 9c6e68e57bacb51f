"""Tests of the attention variants: worked examples, naive references, masks, dtypes, gradients."""

from __future__ import annotations

import math
from collections.abc import Iterator

import pytest
import torch
from torch import Tensor, nn
from torch.func import functional_call
from torch.nn.attention import SDPBackend, sdpa_kernel

import zoo
from tests.helpers.layers import run_layer
from zoo.registry import UnknownNameError

SCORING = ["additive", "dot_product", "gaussian_kernel", "average"]
LAYERS = ["multi_head", "self", "cross"]
FLOAT_TOL = {torch.float32: {"rtol": 1e-5, "atol": 1e-6}, torch.float64: {"rtol": 1e-10, "atol": 1e-12}}
BANDWIDTH = 0.7  # a non-default Gaussian kernel width


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


# -- builders -----------------------------------------------------------------------------


def qk_dims(name: str) -> tuple[int, int]:
    """Query and key sizes for a scoring variant; additive gets different sizes on purpose."""
    return (5, 3) if name == "additive" else (4, 4)


def build_scoring(name: str, dtype: torch.dtype = torch.float32, **kwargs) -> zoo.Attention:
    query_size, key_size = qk_dims(name)
    if name == "additive":
        kwargs = {"query_size": query_size, "key_size": key_size, "num_hiddens": 7, **kwargs}
    elif name == "gaussian_kernel":
        kwargs = {"bandwidth": BANDWIDTH, **kwargs}
    return zoo.create_attention(name, **kwargs).to(dtype).eval()


def build_layer(name: str, dtype: torch.dtype = torch.float32, **kwargs) -> nn.Module:
    if name == "multi_head":
        kwargs = {"kdim": 6, "vdim": 5, **kwargs}
    elif name == "cross":
        kwargs = {"memory_dim": 6, **kwargs}
    return zoo.create_attention(name, embed_dim=8, num_heads=2, **kwargs).to(dtype).eval()


def layer_inputs(name: str, batch: int, lq: int, lk: int, dtype: torch.dtype) -> tuple[Tensor, ...]:
    """The tensors a layer's forward takes before ``valid_lens``."""
    if name == "self":
        return (torch.randn(batch, lq, 8, dtype=dtype),)
    if name == "cross":
        return torch.randn(batch, lq, 8, dtype=dtype), torch.randn(batch, lk, 6, dtype=dtype)
    return (
        torch.randn(batch, lq, 8, dtype=dtype),
        torch.randn(batch, lk, 6, dtype=dtype),
        torch.randn(batch, lk, 5, dtype=dtype),
    )


# -- an independent, naive formulation ------------------------------------------------------


def naive_pair_score(module: zoo.Attention, name: str, q: Tensor, k: Tensor) -> Tensor:
    """The score of one query vector against one key vector, straight from the formula."""
    if name == "additive":
        w_q, w_k = module.query_proj.weight.double(), module.key_proj.weight.double()
        w_v = module.score_proj.weight.double()[0]
        return w_v @ torch.tanh(w_q @ q + w_k @ k)
    if name == "dot_product":
        return (q @ k) / math.sqrt(q.shape[0])
    raise AssertionError(name)


@torch.no_grad()
def naive_attention(
    module: zoo.Attention, name: str, queries: Tensor, keys: Tensor, values: Tensor, keep: Tensor
) -> tuple[Tensor, Tensor]:
    """Loops over (batch, query): weights over the kept keys, then the weighted sum of values."""
    if name == "gaussian_kernel":
        assert float(module.inverse_bandwidth) == pytest.approx(1 / BANDWIDTH, rel=1e-6)
    queries, keys, values = queries.double(), keys.double(), values.double()
    batch, num_queries, num_keys = keep.shape
    weights = torch.zeros(batch, num_queries, num_keys, dtype=torch.float64)
    for b in range(batch):
        for i in range(num_queries):
            kept = [j for j in range(num_keys) if keep[b, i, j]]
            if not kept:
                continue  # no key to attend to: an all-zero row
            if name == "gaussian_kernel":
                w = float(module.inverse_bandwidth)  # 1 / bandwidth, as the module stores it
                raw = [
                    math.exp(-((w * float(torch.linalg.vector_norm(queries[b, i] - keys[b, j]))) ** 2) / 2)
                    for j in kept
                ]
            elif name == "average":
                raw = [1.0 for _ in kept]
            else:
                scores = [float(naive_pair_score(module, name, queries[b, i], keys[b, j])) for j in kept]
                top = max(scores)
                raw = [math.exp(s - top) for s in scores]
            total = sum(raw)
            for j, r in zip(kept, raw):
                weights[b, i, j] = r / total
    output = torch.einsum("bqk,bkd->bqd", weights, values)
    return output, weights


def keep_mask(
    batch: int, lq: int, lk: int, valid_lens: Tensor | None, attn_mask: Tensor | None, is_causal: bool
) -> Tensor:
    """Which (query, key) pairs may attend, built element by element."""
    keep = torch.ones(batch, lq, lk, dtype=torch.bool)
    for b in range(batch):
        for i in range(lq):
            for j in range(lk):
                if valid_lens is not None:
                    limit = valid_lens[b] if valid_lens.dim() == 1 else valid_lens[b, i]
                    keep[b, i, j] &= bool(j < int(limit))
                if attn_mask is not None:
                    keep[b, i, j] &= bool(attn_mask.expand(batch, lq, lk)[b, i, j])
                if is_causal:
                    keep[b, i, j] &= j <= i + (lk - lq)
    return keep


MASK_CASES = ["none", "valid_lens_1d", "valid_lens_2d", "attn_mask", "everything"]


def make_masks(case: str, batch: int, lq: int, lk: int) -> dict:
    """Random masks; every case that masks includes a query with no key to attend to."""
    kwargs: dict = {}
    if case in ("valid_lens_1d",):
        kwargs["valid_lens"] = torch.cat([torch.tensor([0]), torch.randint(1, lk + 1, (batch - 1,))])
    if case in ("valid_lens_2d", "everything"):
        lens = torch.randint(0, lk + 1, (batch, lq))
        lens[0, 0] = 0
        kwargs["valid_lens"] = lens
    if case in ("attn_mask", "everything"):
        mask = torch.rand(batch, lq, lk) > 0.3
        mask[-1, -1] = False  # a fully masked row
        kwargs["attn_mask"] = mask
    if case == "everything":
        kwargs["is_causal"] = True
    return kwargs


# -- worked examples ------------------------------------------------------------------------


def _example_keys_values() -> tuple[Tensor, Tensor, Tensor]:
    keys = torch.ones(2, 10, 2)
    values = torch.arange(40.0).reshape(1, 10, 4).repeat(2, 1, 1)
    return keys, values, torch.tensor([2, 6])


def test_worked_example_additive() -> None:
    keys, values, valid_lens = _example_keys_values()
    queries = torch.normal(0, 1, (2, 1, 20))
    attention = zoo.create_attention("additive", query_size=20, key_size=2, num_hiddens=8, dropout=0.1).eval()
    out, weights = attention(queries, keys, values, valid_lens, need_weights=True)
    torch.testing.assert_close(out, torch.tensor([[[2.0, 3.0, 4.0, 5.0]], [[10.0, 11.0, 12.0, 13.0]]]))
    assert weights.shape == (2, 1, 10)
    torch.testing.assert_close(weights[0, 0, :2], torch.full((2,), 0.5))
    assert torch.all(weights[0, 0, 2:] == 0) and torch.all(weights[1, 0, 6:] == 0)


@pytest.mark.parametrize("need_weights", [False, True], ids=["fused", "explicit"])
def test_worked_example_dot_product(need_weights: bool) -> None:
    keys, values, valid_lens = _example_keys_values()
    queries = torch.normal(0, 1, (2, 1, 2))
    attention = zoo.create_attention("dot_product", dropout=0.5).eval()
    out, weights = attention(queries, keys, values, valid_lens, need_weights=need_weights)
    torch.testing.assert_close(out, torch.tensor([[[2.0, 3.0, 4.0, 5.0]], [[10.0, 11.0, 12.0, 13.0]]]))
    assert (weights is not None) == need_weights


def test_worked_example_multi_head() -> None:
    attention = zoo.create_attention(
        "multi_head", embed_dim=100, num_heads=5, attention=zoo.AttentionSpec(dropout=0.5)
    ).eval()
    queries, keys = torch.ones(2, 4, 100), torch.ones(2, 6, 100)
    out, weights = attention(queries, keys, keys, torch.tensor([3, 2]), need_weights=True)
    assert out.shape == (2, 4, 100)
    assert weights.shape == (2, 5, 4, 6)
    assert torch.all(weights[0, :, :, 3:] == 0) and torch.all(weights[1, :, :, 2:] == 0)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 5, 4))


def test_worked_example_self_attention() -> None:
    attention = zoo.create_attention("self", embed_dim=100, num_heads=5).eval()
    context = zoo.AttentionContext.build(2, 4, valid_lens=torch.tensor([3, 2]))
    assert attention(torch.ones(2, 4, 100), context).output.shape == (2, 4, 100)


# -- naive references -------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("case", MASK_CASES)
@pytest.mark.parametrize("name", SCORING)
@pytest.mark.parametrize("need_weights", [True, False], ids=["weights", "no_weights"])
def test_scoring_matches_naive_formula(name: str, case: str, dtype: torch.dtype, need_weights: bool) -> None:
    batch, lq, lk = 3, 4, 5
    query_size, key_size = qk_dims(name)
    attention = build_scoring(name, dtype)
    queries = torch.randn(batch, lq, query_size, dtype=dtype)
    keys = torch.randn(batch, lk, key_size, dtype=dtype)
    values = torch.randn(batch, lk, 6, dtype=dtype)
    masks = make_masks(case, batch, lq, lk)
    keep = keep_mask(batch, lq, lk, masks.get("valid_lens"), masks.get("attn_mask"), masks.get("is_causal", False))

    out, weights = attention(queries, keys, values, need_weights=need_weights, **masks)
    expected_out, expected_weights = naive_attention(attention, name, queries, keys, values, keep)

    assert out.dtype == dtype
    torch.testing.assert_close(out, expected_out.to(dtype), **FLOAT_TOL[dtype])
    if need_weights:
        torch.testing.assert_close(weights, expected_weights.to(dtype), **FLOAT_TOL[dtype])
    else:
        assert weights is None


def test_gaussian_kernel_bandwidth_changes_weights() -> None:
    q, k, v = torch.randn(1, 2, 3), torch.randn(1, 4, 3), torch.randn(1, 4, 2)
    narrow = zoo.create_attention("gaussian_kernel", bandwidth=0.2)(q, k, v, need_weights=True).weights
    wide = zoo.create_attention("nadaraya_watson", bandwidth=5.0)(q, k, v, need_weights=True).weights
    assert narrow.max() > wide.max(), "a narrower kernel concentrates the weights"
    assert zoo.create_attention("gaussian_kernel", bandwidth=BANDWIDTH).bandwidth == pytest.approx(BANDWIDTH)


def test_gaussian_kernel_is_nadaraya_watson_regression() -> None:
    # 1-D kernel regression as in the reference notes: y_hat(x) = sum_i K(x - x_i) y_i / sum_i K(x - x_i)
    x_train = torch.sort(torch.rand(20) * 5).values
    y_train = 2 * torch.sin(x_train) + x_train**0.8
    x_test = torch.arange(0, 5, 0.5)
    kernel = torch.exp(-((x_test[:, None] - x_train[None, :]) ** 2) / 2)
    expected = (kernel / kernel.sum(-1, keepdim=True)) @ y_train
    out = zoo.create_attention("gaussian_kernel")(
        x_test.reshape(1, -1, 1), x_train.reshape(1, -1, 1), y_train.reshape(1, -1, 1)
    )
    torch.testing.assert_close(out.output.reshape(-1), expected)


@pytest.mark.parametrize("case", [*MASK_CASES, "causal", "causal_fewer_queries", "position_bias"])
def test_gaussian_kernel_runs_in_the_fused_kernel_without_weights(monkeypatch, case: str) -> None:
    """Without weights, the Gaussian kernel never forms its ``(Lq, Lk)`` scores (the augmented
    dot product goes to the fused kernel, not its math fallback, though the value width differs
    from the augmented one), and its output and the gradients of queries, keys, values and a
    learned bandwidth are those of the explicit scores, whatever the mask."""
    batch, lq, lk = 3, 5 if case != "causal_fewer_queries" else 2, 5
    attention = zoo.create_attention("gaussian_kernel", bandwidth=BANDWIDTH, learnable=True).double()
    inputs = [torch.randn(batch, 2, n, 4, dtype=torch.float64, requires_grad=True) for n in (lq, lk)]
    inputs.append(torch.randn(batch, 2, lk, 3, dtype=torch.float64, requires_grad=True))
    if case.startswith("causal"):
        kwargs: dict = {"is_causal": True}
    elif case == "position_bias":
        kwargs = {"position_bias": zoo.create_position("alibi", d_model=8, num_heads=2).double()}
    else:
        kwargs = make_masks(case, batch, lq, lk)
        for key in ("valid_lens", "attn_mask"):  # one mask for both heads
            if key in kwargs:
                kwargs[key] = kwargs[key][:, None].expand(batch, 2, *kwargs[key].shape[1:])
    weighting = torch.linspace(-1, 1, 3, dtype=torch.float64)
    parameters = [*inputs, attention.inverse_bandwidth]

    def output_and_grads(need_weights: bool) -> tuple[Tensor, ...]:
        output = attention(*inputs, **kwargs, need_weights=need_weights).output
        return (output, *torch.autograd.grad((output * weighting).sum(), parameters))

    expected = output_and_grads(need_weights=True)
    monkeypatch.setattr(type(attention), "score", lambda *a: pytest.fail("formed (Lq, Lk) scores"))
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        fused = output_and_grads(need_weights=False)
    for ours, reference in zip(fused, expected, strict=True):
        torch.testing.assert_close(ours, reference, rtol=1e-10, atol=1e-12)


def test_average_ignores_queries_and_keys() -> None:
    values = torch.randn(2, 5, 3)
    out = zoo.create_attention("average")(
        torch.randn(2, 4, 7), torch.randn(2, 5, 2), values, torch.tensor([2, 5])
    ).output
    torch.testing.assert_close(out[0], values[0, :2].mean(0).expand(4, 3))
    torch.testing.assert_close(out[1], values[1].mean(0).expand(4, 3))


@pytest.mark.parametrize(
    ("lq", "kwargs"),
    [
        (6, {}),
        (6, {"valid_lens": torch.tensor([[6, 6], [3, 3], [0, 0]])}),
        (6, {"attn_mask": torch.tensor(True)}),
        (6, {"is_causal": True, "valid_lens": torch.tensor([[6, 6], [4, 4], [0, 0]])}),
        (2, {"is_causal": True}),
    ],
)
def test_average_is_a_running_masked_mean_without_weights(monkeypatch, lq: int, kwargs: dict) -> None:
    """Under a key mask or causality, average pooling never forms ``(Lq, Lk)`` weights, and
    its answer and gradients are those of the softmax over equal scores."""
    import zoo.attention.contract.base as base

    attention = zoo.create_attention("average")
    q, k = torch.randn(3, 2, lq, 4, dtype=torch.float64), torch.randn(3, 2, 6, 4, dtype=torch.float64)
    v = torch.randn(3, 2, 6, 5, dtype=torch.float64, requires_grad=True)
    weighting = torch.linspace(-1, 1, 5, dtype=torch.float64)
    reference, _ = attention(q, k, v, **kwargs, need_weights=True)
    (expected_grad,) = torch.autograd.grad((reference * weighting).sum(), v)
    spy = base.masked_softmax
    monkeypatch.setattr(base, "masked_softmax", lambda *a, **kw: pytest.fail("formed weights") or spy(*a, **kw))
    output = attention(q, k, v, **kwargs).output
    torch.testing.assert_close(output, reference)
    torch.testing.assert_close(torch.autograd.grad((output * weighting).sum(), v)[0], expected_grad)


def test_a_layer_over_average_pooling_builds_only_the_projections_it_reads() -> None:
    """Queries and keys are never read, so a layer over ``average`` has no projection for them:
    each parameter it has gets a gradient (as plain DDP needs), and its output is the projected
    mean of the projected values over each sequence's valid positions."""
    layer = zoo.create_attention("self", embed_dim=8, num_heads=2, attention="average").double()
    assert layer.q_proj is None and layer.k_proj is None
    x, lens = torch.randn(2, 5, 8, dtype=torch.float64), torch.tensor([5, 2])
    output = run_layer(layer, x, valid_lens=lens).output
    output.sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in layer.parameters())
    means = torch.stack([layer.v_proj(x[n, : int(lens[n])]).mean(0) for n in range(2)])
    torch.testing.assert_close(output, layer.out_proj(means)[:, None].expand(2, 5, 8))


def test_batch_of_any_rank_for_scoring() -> None:
    attention = build_scoring("dot_product")
    q, k, v = torch.randn(2, 3, 4, 4), torch.randn(2, 3, 5, 4), torch.randn(2, 3, 5, 2)
    out = attention(q, k, v, torch.tensor([[1, 2, 5], [0, 3, 4]])).output
    assert out.shape == (2, 3, 4, 2)
    assert torch.equal(out[1, 0], torch.zeros(4, 2))


# -- fused vs explicit dot product --------------------------------------------------------------


@pytest.mark.parametrize("case", [*MASK_CASES, "causal_only", "causal_square"])
def test_dot_product_fused_path_equals_explicit_path(case: str) -> None:
    batch, lq, lk = 2, 3, 5
    if case == "causal_square":
        lq = lk
    attention = build_scoring("dot_product", torch.float64)
    q, k, v = (torch.randn(batch, length, 4, dtype=torch.float64) for length in (lq, lk, lk))
    masks = {"is_causal": True} if case.startswith("causal") else make_masks(case, batch, lq, lk)
    fused = attention(q, k, v, need_weights=False, **masks)
    explicit = attention(q, k, v, need_weights=True, **masks)
    assert fused.weights is None and explicit.weights is not None
    torch.testing.assert_close(fused.output, explicit.output, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("case", ["none", "valid_lens", "causal"])
def test_dot_product_with_a_position_bias_runs_in_the_fused_kernel(case: str) -> None:
    """A fixed ``(heads, Lq, Lk)`` bias (ALiBi's) reaches the fused kernel (not its math fallback,
    which forms the scores) as a mask of the inputs' rank, and gives the explicit formulation's
    output. (A learned bias, T5's, needs its gradient, which only the math form gives on CPU.)"""
    batch, heads, length = 2, 2, 5
    attention = build_scoring("dot_product", torch.float64)
    q, k, v = (torch.randn(batch, heads, length, 4, dtype=torch.float64) for _ in range(3))
    kwargs: dict = {"position_bias": zoo.create_position("alibi", d_model=8, num_heads=heads).double()}
    if case == "causal":
        kwargs["is_causal"] = True
    elif case == "valid_lens":
        kwargs["valid_lens"] = torch.tensor([5, 2])[:, None].expand(batch, heads)
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        fused = attention(q, k, v, need_weights=False, **kwargs)
    explicit = attention(q, k, v, need_weights=True, **kwargs)
    torch.testing.assert_close(fused.output, explicit.output, rtol=1e-12, atol=1e-12)


def test_dot_product_custom_scale() -> None:
    q, k, v = torch.randn(1, 2, 4), torch.randn(1, 3, 4), torch.randn(1, 3, 2)
    attention = zoo.create_attention("dot_product", scale=0.25)
    expected = torch.softmax(q @ k.transpose(-1, -2) * 0.25, -1) @ v
    torch.testing.assert_close(attention(q, k, v).output, expected)
    torch.testing.assert_close(attention(q, k, v, need_weights=True).output, expected)


@pytest.mark.parametrize("name", LAYERS)
def test_layer_fused_path_equals_explicit_path(name: str) -> None:
    layer = build_layer(name, torch.float64)
    inputs = layer_inputs(name, 2, 4, 6 if name != "self" else 4, torch.float64)
    valid_lens = torch.tensor([0, 3])
    fused = run_layer(layer, *inputs, valid_lens=valid_lens, is_causal=True)
    explicit = run_layer(layer, *inputs, valid_lens=valid_lens, is_causal=True, need_weights=True)
    torch.testing.assert_close(fused.output, explicit.output, rtol=1e-12, atol=1e-12)


# -- multi-head against torch.nn.MultiheadAttention --------------------------------------------


def torch_pair(
    embed_dim: int, num_heads: int, kdim: int | None, vdim: int | None, bias: bool
) -> tuple[nn.MultiheadAttention, zoo.MultiHeadAttention]:
    reference = (
        nn.MultiheadAttention(embed_dim, num_heads, bias=bias, batch_first=True, kdim=kdim, vdim=vdim).double().eval()
    )
    with torch.no_grad():  # non-zero biases, so a bias that is not copied shows up
        for name, param in reference.named_parameters():
            if "bias" in name:
                param.normal_()
    ours = zoo.MultiHeadAttention(embed_dim, num_heads, kdim=kdim, vdim=vdim, bias=bias).double().eval()
    return reference, ours.load_from_torch(reference)


@pytest.mark.parametrize(
    ("kdim", "vdim", "bias"),
    [(None, None, True), (6, 10, True), (6, 10, False)],
    ids=["same_dims", "kdim_vdim", "no_bias"],
)
@pytest.mark.parametrize("need_weights", [True, False], ids=["explicit", "fused"])
def test_multi_head_equals_torch_with_padding(
    kdim: int | None, vdim: int | None, bias: bool, need_weights: bool
) -> None:
    reference, ours = torch_pair(16, 4, kdim, vdim, bias)
    q = torch.randn(3, 4, 16, dtype=torch.float64)
    k = torch.randn(3, 5, kdim or 16, dtype=torch.float64)
    v = torch.randn(3, 5, vdim or 16, dtype=torch.float64)
    valid_lens = torch.tensor([5, 2, 1])
    key_padding_mask = torch.arange(5)[None, :] >= valid_lens[:, None]  # True = ignore, torch's convention
    expected, expected_weights = reference(
        q, k, v, key_padding_mask=key_padding_mask, need_weights=True, average_attn_weights=False
    )
    out, weights = ours(q, k, v, valid_lens, need_weights=need_weights)
    torch.testing.assert_close(out, expected)
    if need_weights:
        assert weights.shape == (3, 4, 4, 5)
        torch.testing.assert_close(weights, expected_weights)


def test_multi_head_equals_torch_with_causal_and_boolean_masks() -> None:
    reference, ours = torch_pair(16, 2, 6, 10, True)
    q = torch.randn(2, 3, 16, dtype=torch.float64)
    k, v = torch.randn(2, 5, 6, dtype=torch.float64), torch.randn(2, 5, 10, dtype=torch.float64)
    attend = torch.rand(2, 3, 5) > 0.3
    attend[:, :, 0] = True  # torch gives NaN for rows with no key; keep one key per row
    allowed = attend & zoo.causal_mask(3, 5)
    # torch takes a (B * H, Lq, Lk) mask with True = forbidden
    torch_mask = (~allowed).repeat_interleave(2, dim=0)
    expected, expected_weights = reference(q, k, v, attn_mask=torch_mask, need_weights=True, average_attn_weights=False)
    out, weights = ours(q, k, v, attn_mask=attend, is_causal=True, need_weights=True)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(weights, expected_weights)
    torch.testing.assert_close(ours(q, k, v, attn_mask=attend, is_causal=True).output, expected)


def test_multi_head_per_head_mask() -> None:
    layer = build_layer("multi_head", torch.float64)
    q, k, v = layer_inputs("multi_head", 2, 3, 4, torch.float64)
    per_head = torch.rand(2, 2, 3, 4) > 0.4
    _, weights = layer(q, k, v, attn_mask=per_head, need_weights=True)
    assert torch.all(weights[~per_head] == 0)


def test_load_from_torch_rejects_other_sizes() -> None:
    with pytest.raises(ValueError, match="differ"):
        zoo.MultiHeadAttention(16, 4).load_from_torch(nn.MultiheadAttention(16, 2, batch_first=True))


@pytest.mark.parametrize("valid_lens", [None, torch.tensor([4, 2]), torch.tensor([[1, 2, 3, 4], [4, 3, 0, 1]])])
@pytest.mark.parametrize("is_causal", [False, True])
def test_self_attention_equals_multi_head_on_x_x_x(valid_lens: Tensor | None, is_causal: bool) -> None:
    self_attention = build_layer("self", torch.float64)
    multi_head = zoo.MultiHeadAttention(8, 2).double().eval()
    multi_head.load_state_dict(self_attention.state_dict())
    x = torch.randn(2, 4, 8, dtype=torch.float64)
    out, weights = run_layer(self_attention, x, valid_lens=valid_lens, is_causal=is_causal, need_weights=True)
    expected, expected_weights = multi_head(x, x, x, valid_lens, is_causal=is_causal, need_weights=True)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(weights, expected_weights)


@pytest.mark.parametrize("valid_lens", [None, torch.tensor([6, 2]), torch.tensor([[1, 2, 3], [6, 0, 5]])])
def test_cross_attention_equals_multi_head_on_x_mem_mem(valid_lens: Tensor | None) -> None:
    cross = build_layer("cross", torch.float64)
    multi_head = zoo.MultiHeadAttention(8, 2, kdim=6, vdim=6).double().eval()
    multi_head.load_state_dict(cross.state_dict())
    x, memory = torch.randn(2, 3, 8, dtype=torch.float64), torch.randn(2, 6, 6, dtype=torch.float64)
    out, weights = run_layer(cross, x, memory, valid_lens=valid_lens, need_weights=True)
    expected, expected_weights = multi_head(x, memory, memory, valid_lens, need_weights=True)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(weights, expected_weights)


@pytest.mark.parametrize("score", ["additive", "gaussian_kernel", "average"])
def test_layers_run_any_scoring_attention_per_head(score: str) -> None:
    layer = zoo.create_attention("multi_head", embed_dim=8, num_heads=2, attention=score).double().eval()
    assert isinstance(layer.score_attention, zoo.get_attention(score))
    q, k, v = (torch.randn(2, n, 8, dtype=torch.float64) for n in (3, 5, 5))
    out, weights = layer(q, k, v, torch.tensor([5, 2]), need_weights=True)
    # the same computation by hand: project, split heads, run the scoring attention, merge

    def heads(x: Tensor) -> Tensor:
        return x.unflatten(-1, (2, 4)).transpose(1, 2)

    def project(proj: nn.Module | None, x: Tensor) -> Tensor:  # a layer hands on what it does not read
        return heads(x if proj is None else proj(x))

    mask = (torch.arange(5) < torch.tensor([5, 2])[:, None])[:, None, None, :]
    expected_heads, expected_weights = layer.score_attention(
        project(layer.q_proj, q), project(layer.k_proj, k), project(layer.v_proj, v), attn_mask=mask, need_weights=True
    )
    torch.testing.assert_close(weights, expected_weights)
    torch.testing.assert_close(out, layer.out_proj(expected_heads.transpose(1, 2).flatten(-2)))


def test_attention_kwargs_reach_the_scoring_attention() -> None:
    layer = zoo.create_attention(
        "self", embed_dim=8, num_heads=2, attention=zoo.AttentionSpec("gaussian_kernel", {"bandwidth": 3.0})
    )
    assert layer.score_attention.bandwidth == pytest.approx(3.0)
    layer = zoo.create_attention(
        "self", embed_dim=8, num_heads=2, attention=zoo.AttentionSpec("additive", {"num_hiddens": 5})
    )
    assert layer.score_attention.query_proj.weight.shape == (5, 4)


# -- causality ----------------------------------------------------------------------------------


def causal_forward(name: str, module: nn.Module, q: Tensor, k: Tensor, v: Tensor, need_weights: bool) -> Tensor:
    """``is_causal=True`` through each variant's own signature; ``need_weights`` picks the path."""
    context = zoo.AttentionContext(is_causal=True, need_weights=need_weights)
    if name == "self":
        return module(q, context).output
    if name == "cross":
        return module(q, k, context).output
    return module(q, k, v, is_causal=True, need_weights=need_weights).output


@pytest.mark.parametrize("need_weights", [False, True], ids=["fused", "explicit"])
@pytest.mark.parametrize("lk", [6, 9], ids=["square", "more_keys"])
@pytest.mark.parametrize("name", SCORING + LAYERS)
def test_causal_outputs_ignore_future_positions(name: str, lk: int, need_weights: bool) -> None:
    lq = 6
    if name == "self":
        lk = lq
    dtype = torch.float64
    if name in SCORING:
        module = build_scoring(name, dtype)
        query_size, key_size = qk_dims(name)
        q, k, v = (
            torch.randn(2, lq, query_size, dtype=dtype),
            torch.randn(2, lk, key_size, dtype=dtype),
            torch.randn(2, lk, 3, dtype=dtype),
        )
    else:
        module = build_layer(name, dtype)
        q, *rest = layer_inputs(name, 2, lq, lk, dtype)
        k = v = torch.zeros(0)
        if rest:
            k = rest[0]
            v = rest[1] if len(rest) > 1 else rest[0]
    shift = lk - lq  # bottom-right alignment: query i sees keys 0 .. i + shift
    baseline = causal_forward(name, module, q, k, v, need_weights)
    for i in range(lq):
        q2 = q.clone()
        q2[:, i + 1 :] += 10 * torch.randn_like(q2[:, i + 1 :])
        k2, v2 = k.clone(), v.clone()
        if k.numel():
            k2[:, i + shift + 1 :] += 10 * torch.randn_like(k2[:, i + shift + 1 :])
            if v is not k:
                v2[:, i + shift + 1 :] += 10 * torch.randn_like(v2[:, i + shift + 1 :])
            else:
                v2 = k2
        changed = causal_forward(name, module, q2, k2, v2, need_weights)
        torch.testing.assert_close(changed[:, : i + 1], baseline[:, : i + 1], rtol=1e-12, atol=1e-12)
        if i + 1 < lq:
            assert not torch.allclose(changed[:, i + 1 :], baseline[:, i + 1 :]), (
                "the perturbation should matter later on"
            )


def test_causal_with_more_queries_than_keys_masks_early_queries_fully() -> None:
    attention = build_scoring("dot_product")
    q, k, v = torch.randn(1, 4, 4), torch.randn(1, 2, 4), torch.randn(1, 2, 3)
    for need_weights in (False, True):
        out = attention(q, k, v, is_causal=True, need_weights=need_weights).output
        assert torch.equal(out[0, :2], torch.zeros(2, 3)), "the first two queries come before every key"
        assert torch.isfinite(out).all()


# -- half precision -------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("need_weights", [False, True], ids=["fused", "explicit"])
@pytest.mark.parametrize("name", SCORING)
def test_scoring_half_precision_has_no_nan(name: str, dtype: torch.dtype, need_weights: bool) -> None:
    attention = build_scoring(name, dtype)
    query_size, key_size = qk_dims(name)
    q = torch.randn(2, 3, query_size).to(dtype).requires_grad_()
    k = torch.randn(2, 5, key_size).to(dtype).requires_grad_()
    v = torch.randn(2, 5, 4).to(dtype).requires_grad_()
    attn_mask = torch.ones(2, 3, 5, dtype=torch.bool)
    attn_mask[1, 2] = False  # a fully masked row
    out, weights = attention(
        q, k, v, torch.tensor([0, 4]), attn_mask=attn_mask, is_causal=True, need_weights=need_weights
    )
    assert out.dtype == dtype and out.shape == (2, 3, 4)
    assert torch.isfinite(out).all()
    assert torch.equal(out[0], torch.zeros(3, 4, dtype=dtype)), "valid length 0: zero output"
    assert torch.equal(out[1, 2], torch.zeros(4, dtype=dtype)), "fully masked row: zero output"
    if need_weights:
        assert weights.dtype == dtype and torch.isfinite(weights).all()
    out.float().square().sum().backward()
    inputs = (v,) if name == "average" else (q, k, v)  # average pooling ignores queries and keys
    for tensor in (*inputs, *attention.parameters()):
        assert tensor.grad is not None and torch.isfinite(tensor.grad).all()
    assert torch.equal(v.grad[0], torch.zeros_like(v.grad[0])), "no key is seen: no gradient"


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("score", ["dot_product", "additive"])
@pytest.mark.parametrize("name", LAYERS)
def test_layer_half_precision_has_no_nan(name: str, score: str, dtype: torch.dtype) -> None:
    layer = build_layer(name, dtype, bias=False, attention=score)
    inputs = [t.requires_grad_() for t in layer_inputs(name, 2, 3, 3, dtype)]
    attn_mask = torch.ones(2, 3, 3, dtype=torch.bool)
    attn_mask[1, 0] = False  # a fully masked row
    out, weights = run_layer(layer, *inputs, valid_lens=torch.tensor([0, 3]), attn_mask=attn_mask, need_weights=True)
    assert out.dtype == dtype and torch.isfinite(out).all() and torch.isfinite(weights).all()
    assert torch.equal(out[0], torch.zeros_like(out[0])), "valid length 0: zero output (no biases)"
    assert torch.equal(out[1, 0], torch.zeros_like(out[1, 0]))
    fused = run_layer(layer, *inputs, valid_lens=torch.tensor([0, 3]), attn_mask=attn_mask).output
    assert torch.isfinite(fused).all()
    (out.float().square().sum() + fused.float().square().sum()).backward()
    for tensor in (*inputs, *layer.parameters()):
        assert tensor.grad is not None and torch.isfinite(tensor.grad).all()


# -- gradients ----------------------------------------------------------------------------------


def gradcheck_masks(batch: int, lq: int, lk: int) -> dict:
    attn_mask = torch.rand(batch, lq, lk) > 0.3
    attn_mask[0, 1] = False  # a fully masked row
    attn_mask[:, :, 0] |= torch.arange(lq) != 1
    return {"valid_lens": torch.tensor([lk, 2]), "attn_mask": attn_mask}


def _double_inputs(*shapes: tuple[int, ...]) -> tuple[Tensor, ...]:
    return tuple(torch.randn(*shape, dtype=torch.float64, requires_grad=True) for shape in shapes)


def test_gradcheck_additive() -> None:
    attention = build_scoring("additive", torch.float64)
    inputs = _double_inputs((2, 3, 5), (2, 4, 3), (2, 4, 2))
    masks = gradcheck_masks(2, 3, 4)
    assert torch.autograd.gradcheck(lambda q, k, v: tuple(attention(q, k, v, need_weights=True, **masks)), inputs)


@pytest.mark.parametrize("need_weights", [True, False], ids=["explicit", "fused"])
def test_gradcheck_dot_product(need_weights: bool) -> None:
    attention = build_scoring("dot_product", torch.float64)
    inputs = _double_inputs((2, 3, 4), (2, 4, 4), (2, 4, 2))
    masks = gradcheck_masks(2, 3, 4)

    def fn(q: Tensor, k: Tensor, v: Tensor) -> Tensor | tuple[Tensor, ...]:
        out = attention(q, k, v, need_weights=need_weights, **masks)
        return tuple(out) if need_weights else out.output

    assert torch.autograd.gradcheck(fn, inputs)
    assert torch.autograd.gradcheck(
        lambda q, k, v: attention(q, k, v, is_causal=True, need_weights=need_weights).output, inputs
    )


def test_gradcheck_gaussian_kernel_learnable_bandwidth() -> None:
    attention = build_scoring("gaussian_kernel", torch.float64, learnable=True)
    assert isinstance(attention.inverse_bandwidth, nn.Parameter)
    inputs = (
        *_double_inputs((2, 3, 4), (2, 4, 4), (2, 4, 2)),
        attention.inverse_bandwidth.detach().clone().requires_grad_(),
    )
    masks = gradcheck_masks(2, 3, 4)

    def fn(q: Tensor, k: Tensor, v: Tensor, w: Tensor) -> tuple[Tensor, ...]:
        return tuple(functional_call(attention, {"inverse_bandwidth": w}, (q, k, v), {"need_weights": True, **masks}))

    assert torch.autograd.gradcheck(fn, inputs)


def test_gaussian_kernel_learnable_bandwidth_gets_gradient() -> None:
    attention = build_scoring("gaussian_kernel", learnable=True).train()
    out = attention(torch.randn(1, 3, 2), torch.randn(1, 4, 2), torch.randn(1, 4, 1)).output
    out.sum().backward()
    assert attention.inverse_bandwidth.grad is not None and attention.inverse_bandwidth.grad != 0
    assert "inverse_bandwidth" in attention.state_dict()


@pytest.mark.parametrize("need_weights", [True, False], ids=["explicit", "fused"])
def test_gradcheck_multi_head(need_weights: bool) -> None:
    layer = zoo.MultiHeadAttention(4, 2, kdim=3, vdim=2).double().eval()
    params = {name: p.detach().clone().requires_grad_() for name, p in layer.named_parameters()}
    names = list(params)
    inputs = (*_double_inputs((2, 3, 4), (2, 4, 3), (2, 4, 2)), *params.values())
    masks = gradcheck_masks(2, 3, 4)

    def fn(q: Tensor, k: Tensor, v: Tensor, *weights: Tensor) -> Tensor:
        out = functional_call(layer, dict(zip(names, weights)), (q, k, v), {"need_weights": need_weights, **masks})
        return out.output

    assert torch.autograd.gradcheck(fn, inputs)


# -- bad input ----------------------------------------------------------------------------------


def _qkv(q_shape=(2, 3, 4), k_shape=(2, 5, 4), v_shape=(2, 5, 6)) -> tuple[Tensor, Tensor, Tensor]:
    return torch.randn(*q_shape), torch.randn(*k_shape), torch.randn(*v_shape)


@pytest.mark.parametrize("name", SCORING)
@pytest.mark.parametrize(
    ("shapes", "match"),
    [
        (((3, 4), (2, 5, 4), (2, 5, 6)), r"queries must have shape \(batch, length, features\)"),
        (((2, 3, 4), (3, 5, 4), (3, 5, 6)), r"batch shapes differ"),
        (((2, 3, 4), (2, 5, 4), (2, 4, 6)), r"keys and values must have the same length"),
    ],
    ids=["wrong_rank", "batch_mismatch", "kv_length_mismatch"],
)
def test_scoring_rejects_bad_shapes(name: str, shapes: tuple, match: str) -> None:
    attention = (
        zoo.create_attention(name, query_size=4, key_size=4) if name == "additive" else zoo.create_attention(name)
    )
    with pytest.raises(ValueError, match=match):
        attention(*_qkv(*shapes))


def test_dot_product_rejects_query_key_size_mismatch() -> None:
    with pytest.raises(ValueError, match="same feature size; got 4 and 3"):
        zoo.create_attention("dot_product")(*_qkv((2, 3, 4), (2, 5, 3)))


def test_additive_rejects_sizes_it_was_not_built_for() -> None:
    with pytest.raises(ValueError, match="built for queries of size 4"):
        zoo.create_attention("additive", query_size=4, key_size=4)(*_qkv((2, 3, 5)))


@pytest.mark.parametrize("valid_lens", [torch.tensor([1, 6]), torch.tensor([-1, 2])])
@pytest.mark.parametrize("name", SCORING + ["multi_head"])
def test_valid_lens_out_of_range(name: str, valid_lens: Tensor) -> None:
    if name == "multi_head":
        module, inputs = zoo.create_attention(name, embed_dim=4, num_heads=2), _qkv(v_shape=(2, 5, 4))
    else:
        query_size, key_size = qk_dims(name)
        module, inputs = build_scoring(name), _qkv((2, 3, query_size), (2, 5, key_size))
    with pytest.raises(ValueError, match=r"valid_lens must lie in \[0, 5\]"):
        module(*inputs, valid_lens)


def test_float_attn_mask_is_rejected() -> None:
    with pytest.raises(ValueError, match="boolean"):
        zoo.create_attention("dot_product")(*_qkv(), attn_mask=torch.zeros(2, 3, 5))
    with pytest.raises(ValueError, match="boolean"):
        zoo.create_attention("multi_head", embed_dim=4, num_heads=2)(
            *_qkv(v_shape=(2, 5, 4)), attn_mask=torch.zeros(3, 5)
        )


def test_attn_mask_that_does_not_broadcast_is_rejected() -> None:
    with pytest.raises(ValueError, match="does not broadcast"):
        zoo.create_attention("dot_product")(*_qkv(), attn_mask=torch.ones(2, 4, 5, dtype=torch.bool))


def test_layer_rejects_bad_shapes() -> None:
    layer = zoo.create_attention("multi_head", embed_dim=8, num_heads=2)
    with pytest.raises(ValueError, match=r"queries must have shape \(batch, length, 8\)"):
        layer(torch.randn(3, 8), torch.randn(2, 3, 8), torch.randn(2, 3, 8))
    with pytest.raises(ValueError, match="keys must have 8 features; got 6"):
        layer(torch.randn(2, 3, 8), torch.randn(2, 3, 6), torch.randn(2, 3, 8))
    with pytest.raises(ValueError, match="batch sizes differ"):
        layer(torch.randn(2, 3, 8), torch.randn(3, 3, 8), torch.randn(3, 3, 8))
    with pytest.raises(ValueError, match="same length"):
        layer(torch.randn(2, 3, 8), torch.randn(2, 3, 8), torch.randn(2, 4, 8))


def test_embed_dim_not_divisible_by_num_heads() -> None:
    with pytest.raises(ValueError, match=r"embed_dim \(10\) must be divisible by num_heads \(3\).*\[1, 2, 5, 10\]"):
        zoo.create_attention("multi_head", embed_dim=10, num_heads=3)


def test_unknown_scoring_name_suggests() -> None:
    with pytest.raises(UnknownNameError, match="Unknown attention 'nope'") as info:
        zoo.create_attention("self", embed_dim=8, num_heads=2, attention="nope")
    assert isinstance(info.value, KeyError)
    with pytest.raises(KeyError, match="Did you mean 'dot_product'"):
        zoo.create_attention("multi_head", embed_dim=8, num_heads=2, attention="dot_prodct")


def test_an_unknown_name_suggests_only_what_would_serve_there() -> None:
    """The heads of a layer take a scoring attention: a misspelt one is matched among those, not
    among the layers; a causal stack's slot lists only causal names."""
    with pytest.raises(UnknownNameError) as info:
        zoo.create_attention("softmax", embed_dim=8, num_heads=2, scores="sigmoidd")
    message = str(info.value)
    assert "Did you mean 'sigmoid'" in message and "Names that would serve here:" in message
    assert "mla" not in message and "deltanet" not in message
    with pytest.raises(UnknownNameError) as info:
        zoo.attention.require_attention("gated_deltanett", layers=True, causal=True)
    message = str(info.value)
    assert "Did you mean 'gated_deltanet'" in message
    assert "gated_deltanet" in message.split("serve here:")[1] and "sinkhorn" not in message


@pytest.mark.parametrize("layer_name", LAYERS)
def test_layer_cannot_be_used_as_per_head_scoring(layer_name: str) -> None:
    with pytest.raises(
        ValueError, match=rf"'{layer_name}' cannot be used by .*per-head.*Compatible registered names: .*dot_product"
    ):
        zoo.create_attention("multi_head", embed_dim=8, num_heads=2, attention=layer_name)


def test_bad_constructor_arguments() -> None:
    with pytest.raises(ValueError, match="bandwidth must be positive"):
        zoo.create_attention("gaussian_kernel", bandwidth=0.0)
    with pytest.raises(ValueError, match="dropout"):
        zoo.create_attention("dot_product", dropout=1.5)
    with pytest.raises(ValueError, match="query_size must be a positive integer"):
        zoo.create_attention("additive", query_size=0, key_size=2)


# -- capabilities -------------------------------------------------------------------------------


class _NoCausalAttention(zoo.Attention):
    """A plugin that cannot honour causal masks and says so."""

    supports_causal = False

    def score(self, queries: Tensor, keys: Tensor) -> Tensor:
        return queries @ keys.transpose(-2, -1)


@pytest.fixture
def no_causal() -> Iterator[str]:
    zoo.register_attention("no_causal")(_NoCausalAttention)
    yield "no_causal"
    zoo.ATTENTION_REGISTRY.unregister("no_causal")


def test_plugin_without_causal_support_refuses_is_causal(no_causal: str) -> None:
    attention = zoo.create_attention(no_causal)
    q, k, v = _qkv()
    assert attention(q, k, v).output.shape == (2, 3, 6)
    with pytest.raises(zoo.IncompatibleAttentionError, match="does not support causal masking"):
        attention(q, k, v, is_causal=True)


def test_layer_with_non_causal_scoring_refuses_is_causal(no_causal: str) -> None:
    layer = zoo.create_attention("self", embed_dim=8, num_heads=2, attention=no_causal)
    x = torch.randn(2, 3, 8)
    assert layer(x).output.shape == (2, 3, 8)
    with pytest.raises(zoo.IncompatibleAttentionError, match="causal"):
        layer(x, zoo.AttentionContext(is_causal=True))


def test_require_attention_lists_compatible_names(no_causal: str) -> None:
    assert zoo.require_attention(no_causal) is _NoCausalAttention
    assert zoo.require_attention("dot_product", causal=True) is zoo.DotProductAttention
    with pytest.raises(zoo.IncompatibleAttentionError, match="causal masking") as info:
        zoo.require_attention(no_causal, causal=True, role="a decoder")
    message = str(info.value)
    assert "'no_causal' cannot be used by a decoder" in message
    compatible = message.split("Compatible registered names: ")[1].rstrip(".").split(", ")
    assert {"additive", "dot_product", "gaussian_kernel", "average"} <= set(compatible)
    assert no_causal not in compatible
    assert not {"multi_head", "self", "cross"} & set(compatible), "layers are not scoring attentions"


def test_require_attention_refuses_a_need_it_does_not_know() -> None:
    """A misspelt need must not pass as "not needed"."""
    with pytest.raises(TypeError, match=r"unknown needs \['casual'\]; the needs are \['bidirectional', 'causal'"):
        zoo.require_attention("dot_product", casual=True)


def test_capability_flags_of_built_ins() -> None:
    assert zoo.DotProductAttention.has_fused_path and zoo.GaussianKernelAttention.has_fused_path
    assert not zoo.AdditiveAttention.has_fused_path
    for name in SCORING + LAYERS:
        cls = zoo.get_attention(name)
        assert cls.supports_causal and cls.supports_padding_mask and cls.supports_weights


def test_weights_are_none_unless_requested() -> None:
    for name in SCORING:
        q_size, k_size = qk_dims(name)
        out = build_scoring(name)(*_qkv((2, 3, q_size), (2, 5, k_size)))
        assert isinstance(out, zoo.AttentionOutput) and out.weights is None


def test_dropout_is_active_only_in_training() -> None:
    attention = zoo.create_attention("additive", query_size=4, key_size=4, dropout=0.5)
    q, k, v = _qkv(v_shape=(2, 5, 6))
    attention.eval()
    first, second = attention(q, k, v).output, attention(q, k, v).output
    assert torch.equal(first, second)
    attention.train()
    assert not torch.equal(attention(q, k, v).output, first)
