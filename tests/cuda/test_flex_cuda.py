"""FlexAttention compiled on a GPU: :func:`zoo.attention.kernels.flex.flex_attend` in bfloat16
against the zoo's variant in float32 on the same inputs, forward (every mask and bias) and
backward (a window with padding; a T5 table, whose gradient comes through the score function).
Lengths of 1000: flex's 128-position tiles do not divide them. The CPU twin is
``tests/attention/kernels/test_flex.py`` (eager flex, float32, to 1e-5).
"""

from __future__ import annotations

import math

import pytest
import torch

import zoo
from zoo.attention.build.backends import attention_backend
from zoo.attention.kernels import flex
from zoo.positions.alibi import ALiBi
from zoo.positions.t5 import T5RelativeBias, t5_bucket

pytestmark = pytest.mark.cuda


@pytest.fixture(autouse=True)
def _references_in_the_zoos_forms():
    """The variants compute the references in their own forms (on CUDA, ``auto`` would hand them
    to flex too); the kernel under test is called directly."""
    with attention_backend("zoo"):
        yield


BATCH, HEADS, LENGTH, DIM = 3, 4, 1000, 64
TOLERANCE = 2e-2  # bfloat16 against float32, as the SDPA kernels' tests allow


def _inputs(num_queries: int = LENGTH, kv_heads: int = HEADS) -> tuple[torch.Tensor, ...]:
    generator = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(BATCH, HEADS, num_queries, DIM, device="cuda", generator=generator)
    k, v = (torch.randn(BATCH, kv_heads, LENGTH, DIM, device="cuda", generator=generator) for _ in range(2))
    return q, k, v


def _lengths() -> torch.Tensor:
    return torch.tensor([LENGTH, 700, 0], device="cuda")  # the last: no key, a zero output


def _ratio(actual: torch.Tensor, expected: torch.Tensor) -> float:
    """Root-mean-square error relative to the reference's, as flash-linear-attention's tests measure it."""
    actual, expected = actual.detach().float(), expected.detach()
    return float((actual - expected).square().mean().sqrt() / (expected.square().mean().sqrt() + 1e-8))


#: (id, variant, its arguments, is_causal, mask builder given the variant)
FORWARD_CASES = [
    ("local-causal", "local", {"window": 128}, True, lambda a: flex.sliding_window(128, is_causal=True)),
    (
        "longformer",
        "longformer",
        {"window": 64, "global_tokens": [0, 500]},
        False,
        lambda a: flex.longformer(64, a.global_positions, is_causal=False),
    ),
    (
        "sparse-causal",
        "sparse",
        {"block_size": 64, "summary": 8},
        True,
        lambda a: flex.fixed_sparse(64, 8, is_causal=True),
    ),
    (
        "bigbird",
        "bigbird",
        {"block_size": 64, "num_random_blocks": 3},
        False,
        lambda a: flex.bigbird(64, a.random_blocks(math.ceil(LENGTH / 64), torch.device("cuda"))),
    ),
]


@pytest.mark.parametrize(("name", "options", "is_causal", "builder"), [c[1:] for c in FORWARD_CASES],
                         ids=[c[0] for c in FORWARD_CASES])  # fmt: skip
def test_compiled_masks_in_bfloat16_match_the_variant(name: str, options: dict, is_causal: bool, builder) -> None:
    variant = zoo.create_attention(name, **options).to("cuda").eval()
    q, k, v = _inputs()
    lengths = _lengths()
    with torch.no_grad():
        expected, _ = variant(q, k, v, lengths[:, None].expand(-1, HEADS), is_causal=is_causal)
        output = flex.flex_attend(*(t.bfloat16() for t in (q, k, v)), mask=builder(variant) & flex.key_padding(lengths))
    assert output.dtype == torch.bfloat16 and torch.isfinite(output).all()
    torch.testing.assert_close(output.float(), expected, atol=TOLERANCE, rtol=TOLERANCE)
    assert torch.equal(output[2], torch.zeros_like(output[2]))


def test_compiled_alibi_with_grouped_heads_and_cached_queries() -> None:
    """ALiBi, one key and value head for four query heads, 100 queries at the last positions."""
    scheme = ALiBi(HEADS, causal=True).to("cuda")
    q, k, v = _inputs(num_queries=100, kv_heads=1)
    lengths = _lengths()
    with torch.no_grad():
        expected, _ = zoo.create_attention("dot_product")(
            q, k, v, lengths[:, None].expand(-1, HEADS), is_causal=True, position_bias=scheme
        )
        output = flex.flex_attend(
            *(t.bfloat16() for t in (q, k, v)),
            mask=flex.causal() & flex.key_padding(lengths),
            score_mod=flex.alibi_bias(scheme.slopes, is_causal=True),
            enable_gqa=True,
        )
    torch.testing.assert_close(output.float(), expected, atol=TOLERANCE, rtol=TOLERANCE)


def test_compiled_window_backward_matches_the_variant() -> None:
    variant = zoo.create_attention("local", window=128).to("cuda")
    q, k, v = (t.requires_grad_() for t in _inputs())
    lengths = _lengths()
    upstream = torch.randn(BATCH, HEADS, LENGTH, DIM, device="cuda")
    expected, _ = variant(q, k, v, lengths[:, None].expand(-1, HEADS), is_causal=True)
    expected_grads = torch.autograd.grad((expected * upstream).sum(), (q, k, v))
    low = [t.detach().bfloat16().requires_grad_() for t in (q, k, v)]
    output = flex.flex_attend(*low, mask=flex.sliding_window(128, is_causal=True) & flex.key_padding(lengths))
    grads = torch.autograd.grad((output.float() * upstream).sum(), low)
    assert _ratio(output, expected) < TOLERANCE
    for label, grad, reference in zip("qkv", grads, expected_grads):
        assert _ratio(grad, reference) < TOLERANCE, f"d{label}"


def test_compiled_t5_bias_learns_through_the_score_function() -> None:
    scheme = T5RelativeBias(HEADS, causal=True, init_std=0.5).to("cuda")
    buckets = t5_bucket(flex.relative_distances(LENGTH, "cuda"), bidirectional=False, num_buckets=32, max_distance=128)
    q, k, v = _inputs()
    upstream = torch.randn(BATCH, HEADS, LENGTH, DIM, device="cuda")
    expected, _ = zoo.create_attention("dot_product")(q, k, v, is_causal=True, position_bias=scheme)
    (expected_grad,) = torch.autograd.grad((expected * upstream).sum(), scheme.bias)
    output = flex.flex_attend(
        *(t.bfloat16() for t in (q, k, v)), mask=flex.causal(), score_mod=flex.bucketed_bias(scheme.bias, buckets)
    )
    (grad,) = torch.autograd.grad((output.float() * upstream).sum(), scheme.bias)
    assert _ratio(output, expected) < TOLERANCE
    assert _ratio(grad, expected_grad) < 5 * TOLERANCE  # a sum over a million bfloat16 products per bucket
