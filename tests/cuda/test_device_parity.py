"""The device-parity helper of the CUDA group, run on the CPU (default suite): it passes the
built-ins, and it catches a variant that overflows in half precision or leaks NaN."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor

import zoo
from tests.cuda.device_parity import compare_with_cpu, parity_cases, scoring_attentions


def test_every_scoring_attention_is_compared() -> None:
    names = scoring_attentions()
    assert {"dot_product", "additive", "linear", "local"} <= set(names)
    assert not {"multi_head", "self", "cross"} & set(names)  # layers, not what runs in a head


@pytest.mark.parametrize(("score", "case"), parity_cases())
def test_cpu_float32_matches_itself(score: str, case: str) -> None:
    parity = compare_with_cpu(score, case, "cpu", torch.float32, autocast=False)
    assert parity.finite and parity.error == 0.0


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["float16", "bfloat16"])
@pytest.mark.parametrize(("score", "case"), parity_cases())
def test_cpu_half_precision_autocast_is_close_to_float32(score: str, case: str, dtype: torch.dtype) -> None:
    """The CPU twin of the CUDA comparison under autocast (it caught ``reformer`` filling half
    scores with a float32-sized constant)."""
    parity = compare_with_cpu(score, case, "cpu", dtype, autocast=True)
    assert parity.ok, parity
    assert parity.error > 0  # half precision really ran: the output is rounded


class _Overflows(zoo.DotProductAttention):
    """Scores scaled far up: exp overflows where a kernel does not subtract the row maximum in
    float32, and float16 itself overflows at 65504."""

    def score(self, queries: Tensor, keys: Tensor) -> Tensor:
        return super().score(queries, keys) * 1e5

    def attend(self, queries, keys, values, context):
        return super(zoo.DotProductAttention, self).attend(queries, keys, values, context)


class _NaNForEmptyRows(zoo.DotProductAttention):
    """Softmax over all-masked rows without the zoo's guard: NaN where no key is visible."""

    def attend(self, queries, keys, values, context):
        scores = self.score(queries, keys).masked_fill(~context.mask, float("-inf"))
        return zoo.AttentionOutput(torch.softmax(scores, -1) @ values, None)


@pytest.fixture
def register():
    names = []

    def add(name, cls):
        zoo.register_attention(name)(cls)
        names.append(name)

    yield add
    for name in names:
        zoo.ATTENTION_REGISTRY.unregister(name)


def test_a_variant_overflowing_in_float16_is_caught(register) -> None:
    register("test_overflows", _Overflows)
    parity = compare_with_cpu("test_overflows", "padding", "cpu", torch.float16, autocast=False)
    assert not parity.ok


def test_nan_for_a_query_with_nothing_to_attend_to_is_caught(register) -> None:
    register("test_nan_rows", _NaNForEmptyRows)
    assert compare_with_cpu("dot_product", "padding", "cpu", torch.float32, autocast=False).finite
    assert not compare_with_cpu("test_nan_rows", "padding", "cpu", torch.float32, autocast=False).finite
