"""Tests of the masked softmax and the mask helpers (``zoo/attention/contract/masking.py``)."""

from __future__ import annotations

import pytest
import torch

import zoo


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


def padded_softmax_like_reference(scores: torch.Tensor, valid_lens: torch.Tensor) -> torch.Tensor:
    """The reference notes' approach, written independently: push padded scores to -1e6, softmax.

    Only meaningful for valid lengths >= 1 (a length of 0 gives a uniform row there).
    """
    num_queries, num_keys = scores.shape[-2:]
    if valid_lens.dim() == 1:
        per_query = valid_lens[:, None].expand(-1, num_queries)
    else:
        per_query = valid_lens
    filled = scores.clone()
    for b in range(scores.shape[0]):
        for i in range(num_queries):
            filled[b, i, int(per_query[b, i]) :] = -1e6
    return torch.softmax(filled, dim=-1)


def expected_keep(valid_lens: torch.Tensor, num_queries: int, num_keys: int) -> torch.Tensor:
    """``(B, Lq, Lk)`` booleans: True where key ``j`` is within the query's valid length."""
    lens = valid_lens[:, None].expand(-1, num_queries) if valid_lens.dim() == 1 else valid_lens
    keys = torch.arange(num_keys)
    return keys[None, None, :] < lens[:, :, None]


# -- valid_lens ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "valid_lens",
    [torch.tensor([2, 3]), torch.tensor([[1, 3], [2, 4]])],
    ids=["per_sequence", "per_query"],
)
def test_rows_sum_to_one_over_valid_keys_and_zero_beyond(valid_lens: torch.Tensor) -> None:
    scores = torch.rand(2, 2, 4)
    weights = zoo.masked_softmax(scores, valid_lens)
    keep = expected_keep(valid_lens, 2, 4)
    assert weights.shape == scores.shape
    assert torch.all(weights[~keep] == 0), "weights beyond the valid length must be exactly 0"
    assert torch.allclose(weights.sum(-1), torch.ones(2, 2))
    assert torch.all(weights[keep] > 0)


@pytest.mark.parametrize(
    "valid_lens",
    [torch.tensor([2, 3]), torch.tensor([[1, 3], [2, 4]]), torch.tensor([4, 1])],
    ids=["per_sequence", "per_query", "full_and_one"],
)
def test_matches_reference_notes_for_nonzero_lengths(valid_lens: torch.Tensor) -> None:
    scores = torch.randn(2, 2, 4)
    expected = padded_softmax_like_reference(scores, valid_lens)
    torch.testing.assert_close(zoo.masked_softmax(scores, valid_lens), expected)


def test_no_mask_is_plain_softmax() -> None:
    scores = torch.randn(3, 2, 5)
    torch.testing.assert_close(zoo.masked_softmax(scores), torch.softmax(scores, dim=-1))


def test_valid_length_zero_gives_all_zero_row() -> None:
    scores = torch.randn(2, 3, 4)
    weights = zoo.masked_softmax(scores, torch.tensor([0, 2]))
    assert not torch.isnan(weights).any()
    assert torch.equal(weights[0], torch.zeros(3, 4)), "no valid key: zeros, not NaN and not uniform"
    torch.testing.assert_close(weights[1].sum(-1), torch.ones(3))


def test_per_query_zero_length_only_zeroes_that_query() -> None:
    scores = torch.randn(1, 3, 4)
    weights = zoo.masked_softmax(scores, torch.tensor([[0, 1, 4]]))
    assert torch.equal(weights[0, 0], torch.zeros(4))
    assert torch.equal(weights[0, 1], torch.tensor([1.0, 0.0, 0.0, 0.0]))
    torch.testing.assert_close(weights[0, 2], torch.softmax(scores[0, 2], -1))


def test_boolean_mask_combines_with_valid_lens() -> None:
    scores = torch.randn(2, 3, 5)
    mask = torch.rand(2, 3, 5) > 0.4
    valid_lens = torch.tensor([3, 5])
    weights = zoo.masked_softmax(scores, valid_lens, mask=mask)
    keep = mask & expected_keep(valid_lens, 3, 5)
    assert torch.all(weights[~keep] == 0)
    row_has_key = keep.any(-1)
    torch.testing.assert_close(weights.sum(-1), row_has_key.float())


def test_fully_masked_row_from_boolean_mask_is_zero() -> None:
    scores = torch.randn(1, 2, 3)
    mask = torch.tensor([[[False, False, False], [True, False, True]]])
    weights = zoo.masked_softmax(scores, mask=mask)
    assert torch.equal(weights[0, 0], torch.zeros(3))
    torch.testing.assert_close(weights[0, 1].sum(), torch.tensor(1.0))


def test_no_nan_gradient_through_fully_masked_rows() -> None:
    scores = torch.randn(2, 3, 4, requires_grad=True)
    mask = torch.ones(2, 3, 4, dtype=torch.bool)
    mask[0, 1] = False
    weights = zoo.masked_softmax(scores, torch.tensor([0, 3]), mask=mask)
    (weights * torch.randn_like(weights)).sum().backward()
    assert scores.grad is not None
    assert torch.isfinite(scores.grad).all()
    assert torch.equal(scores.grad[0], torch.zeros(3, 4)), "fully masked rows get no gradient"


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_scores_keep_dtype_and_stay_finite(dtype: torch.dtype) -> None:
    # Large magnitudes that would overflow a half-precision exp if the softmax ran in that dtype.
    scores = (torch.randn(2, 3, 6) * 100).to(dtype)
    valid_lens = torch.tensor([[0, 2, 6], [1, 6, 3]])
    weights = zoo.masked_softmax(scores, valid_lens)
    assert weights.dtype == dtype
    assert torch.isfinite(weights).all()
    assert torch.equal(weights[0, 0], torch.zeros(6, dtype=dtype))
    keep = expected_keep(valid_lens, 3, 6)
    assert torch.all(weights[~keep] == 0)
    sums = weights.float().sum(-1)
    torch.testing.assert_close(sums, keep.any(-1).float(), atol=1e-2, rtol=0)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_gradients_are_finite(dtype: torch.dtype) -> None:
    scores = torch.randn(2, 2, 4).to(dtype).requires_grad_()
    weights = zoo.masked_softmax(scores, torch.tensor([0, 4]))
    weights.float().sum().backward()
    assert scores.grad is not None and scores.grad.dtype == dtype
    assert torch.isfinite(scores.grad).all()


def test_batch_of_any_rank() -> None:
    scores = torch.randn(2, 3, 4, 5)  # e.g. (batch, heads, Lq, Lk)
    weights = zoo.masked_softmax(scores, torch.tensor([[1, 2, 3], [5, 0, 4]]))
    assert torch.equal(weights[1, 1], torch.zeros(4, 5))
    assert torch.all(weights[0, 0, :, 1:] == 0)


# -- causal masks -------------------------------------------------------------------------


def test_causal_mask_square_is_lower_triangular() -> None:
    assert torch.equal(zoo.causal_mask(4, 4), torch.ones(4, 4, dtype=torch.bool).tril())


def test_causal_mask_aligns_bottom_right_when_fewer_queries() -> None:
    mask = zoo.causal_mask(2, 5)
    assert mask.dtype == torch.bool and mask.shape == (2, 5)
    assert mask[0].tolist() == [True, True, True, True, False]  # the first query sees 4 keys
    assert mask[1].tolist() == [True] * 5  # the last query sees every key
    assert mask.sum(-1).tolist() == [4, 5]


def test_causal_mask_single_query_sees_everything() -> None:
    assert zoo.causal_mask(1, 7).all()


def test_lengths_to_mask() -> None:
    mask = zoo.lengths_to_mask(torch.tensor([0, 2, 3]), 3)
    assert mask.tolist() == [[False, False, False], [True, True, False], [True, True, True]]


# -- errors -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("valid_lens", "match"),
    [
        (torch.tensor([-1, 2]), r"\[0, 4\]"),
        (torch.tensor([2, 5]), r"\[0, 4\]"),
        (torch.tensor([[1, 2, 3], [1, 2, 3]]), r"shape"),
        (torch.tensor([1, 2, 3]), r"shape"),
        (torch.tensor([1.5, 2.0]), r"whole numbers"),
        (torch.tensor([True, False]), r"integer"),
    ],
    ids=["negative", "longer_than_keys", "wrong_per_query_shape", "wrong_batch", "fractional", "boolean"],
)
def test_invalid_valid_lens_raise_value_error(valid_lens: torch.Tensor, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        zoo.masked_softmax(torch.randn(2, 2, 4), valid_lens)


def test_whole_number_float_valid_lens_are_accepted() -> None:
    scores = torch.randn(2, 2, 4)
    torch.testing.assert_close(
        zoo.masked_softmax(scores, torch.tensor([2.0, 3.0])),
        zoo.masked_softmax(scores, torch.tensor([2, 3])),
    )


def test_out_of_range_message_names_the_offending_values() -> None:
    with pytest.raises(ValueError, match=r"number of keys.*from 1 to 9"):
        zoo.masked_softmax(torch.randn(2, 2, 4), torch.tensor([1, 9]))


def test_non_boolean_mask_is_rejected() -> None:
    with pytest.raises((TypeError, ValueError), match="boolean"):
        zoo.masked_softmax(torch.randn(1, 2, 3), mask=torch.ones(1, 2, 3))


def test_scores_without_query_axis_are_rejected() -> None:
    with pytest.raises(ValueError, match="shape"):
        zoo.masked_softmax(torch.randn(4))
