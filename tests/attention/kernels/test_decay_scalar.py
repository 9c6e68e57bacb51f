"""Tests of ``zoo.attention.kernels.decay`` with a scalar decay per step (width 1) against a per-token
loop of retention's recurrence."""

from __future__ import annotations

from unittest.mock import patch

import pytest
import torch
from torch import Tensor

from tests.attention.kernels.inputs import (
    BATCH,
    assert_close_relative,
    assert_matches,
    padding_mask,
    qkv,
    randn,
    uniform,
)
from zoo.attention.kernels import decay, decay_chunkwise, decay_recurrent, decay_weights


def scalar_decay_parallel(q: Tensor, k: Tensor, v: Tensor, log_decay: Tensor, **options) -> tuple[Tensor, ...]:
    """The parallel form (one chunk) and its weights: ``(output, weights, final_state)``."""
    output, state = decay_chunkwise(q, k, v, log_decay.unsqueeze(-1), chunk_size=None, **options)
    return output, decay_weights(q, k, log_decay.unsqueeze(-1), mask=options.get("mask")), state


def scalar_decay_chunkwise(q: Tensor, k: Tensor, v: Tensor, log_decay: Tensor, **options) -> tuple[Tensor, ...]:
    return decay_chunkwise(q, k, v, log_decay.unsqueeze(-1), **options)


def scalar_decay_recurrent(q: Tensor, k: Tensor, v: Tensor, log_decay: Tensor, **options) -> tuple[Tensor, ...]:
    return decay_recurrent(q, k, v, log_decay.unsqueeze(-1), **options)


DK, DV = 4, 3
LENGTHS = (1, 50, 64, 130)
CHUNK_SIZES = (1, 7, 16, 64)


def reference(q: Tensor, k: Tensor, v: Tensor, log_decay: Tensor, state: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    """RetNet / Mamba-2 token by token: ``S_n = g_n S_{n-1} + k_n^T v_n``, ``o_n = q_n S_n``.

    A padded token leaves the state as it was and outputs zero.
    """
    outputs = torch.zeros_like(v)
    for n in range(q.shape[-2]):
        updated = log_decay[..., n, None, None].exp() * state + torch.einsum(
            "...d,...e->...de", k[..., n, :], v[..., n, :]
        )
        real = mask[..., n]
        state = torch.where(real[..., None, None], updated, state)
        read = torch.einsum("...d,...de->...e", q[..., n, :], state)
        outputs[..., n, :] = torch.where(real[..., None], read, 0.0)
    return outputs, state


@pytest.fixture
def generator() -> torch.Generator:
    return torch.Generator().manual_seed(0)


def inputs(length: int, generator: torch.Generator) -> tuple[Tensor, ...]:
    """Queries, keys, values and log decays in ``[-2, 0)``, float64, batch 2 and 3 heads."""
    q, k, v = qkv(length, DK, DV, generator)
    return q, k, v, uniform(*BATCH, length, low=-2.0, high=0.0, generator=generator)


@pytest.mark.parametrize("length", LENGTHS)
def test_parallel_and_recurrent_match_reference(length: int, generator: torch.Generator) -> None:
    q, k, v, log_decay = inputs(length, generator)
    initial_state = randn(*BATCH, DK, DV, generator=generator)
    mask = padding_mask(length)
    expected_output, expected_state = reference(q, k, v, log_decay, initial_state, mask)

    output, _, state = scalar_decay_parallel(q, k, v, log_decay, initial_state=initial_state, mask=mask)
    assert_matches(output, expected_output)
    assert_matches(state, expected_state)
    output, state = scalar_decay_recurrent(q, k, v, log_decay, state=initial_state, mask=mask)
    assert_matches(output, expected_output)
    assert_matches(state, expected_state)


@pytest.mark.parametrize("chunk_size", CHUNK_SIZES)
@pytest.mark.parametrize("length", LENGTHS)
def test_chunkwise_matches_reference(length: int, chunk_size: int, generator: torch.Generator) -> None:
    q, k, v, log_decay = inputs(length, generator)
    initial_state = randn(*BATCH, DK, DV, generator=generator)
    mask = padding_mask(length)
    expected_output, expected_state = reference(q, k, v, log_decay, initial_state, mask)

    output, state = scalar_decay_chunkwise(
        q, k, v, log_decay, chunk_size=chunk_size, initial_state=initial_state, mask=mask
    )
    assert_matches(output, expected_output)
    assert_matches(state, expected_state)


def test_without_mask_or_state_the_weights_give_the_output(generator: torch.Generator) -> None:
    q, k, v, log_decay = inputs(40, generator)
    no_padding = torch.ones(*BATCH, 40, dtype=torch.bool)
    expected_output, expected_state = reference(q, k, v, log_decay, q.new_zeros(*BATCH, DK, DV), no_padding)

    output, weights, state = scalar_decay_parallel(q, k, v, log_decay)
    assert_matches(output, expected_output)
    assert_matches(state, expected_state)
    assert_matches(weights @ v, output)
    assert (weights.triu(1) == 0).all()
    output, state = scalar_decay_chunkwise(q, k, v, log_decay, chunk_size=16)
    assert_matches(output, expected_output)
    assert_matches(state, expected_state)


def test_a_decay_per_head_broadcasts_like_retention(generator: torch.Generator) -> None:
    q, k, v, _ = inputs(30, generator)
    per_head = torch.tensor([[-0.1], [-0.5], [-1.0]], dtype=torch.float64)  # (H, 1)
    expanded = per_head.expand(*BATCH, 30)
    for form in (scalar_decay_parallel, scalar_decay_recurrent):
        assert_matches(form(q, k, v, per_head)[0], form(q, k, v, expanded)[0])
    broadcast = scalar_decay_chunkwise(q, k, v, per_head, chunk_size=8)[0]
    assert_matches(broadcast, scalar_decay_chunkwise(q, k, v, expanded, chunk_size=8)[0])


@pytest.mark.parametrize("prefill", [scalar_decay_chunkwise, scalar_decay_parallel])
def test_prefill_then_decoding_continues_one_run(prefill, generator: torch.Generator) -> None:
    q, k, v, log_decay = inputs(70, generator)
    mask = padding_mask(70)
    whole, whole_state = scalar_decay_chunkwise(q, k, v, log_decay, chunk_size=16, mask=mask)

    first = prefill(q[..., :45, :], k[..., :45, :], v[..., :45, :], log_decay[..., :45], mask=mask[..., :45])
    outputs, state = [first[0]], first[-1]
    for start, stop in ((45, 46), (46, 47), (47, 52), (52, 70)):
        step = slice(start, stop)
        output, state = scalar_decay_recurrent(
            q[..., step, :],
            k[..., step, :],
            v[..., step, :],
            log_decay[..., step],
            state=state,
            mask=mask[..., step],
        )
        outputs.append(output)
    assert_matches(torch.cat(outputs, dim=-2), whole)
    assert_matches(state, whole_state)


def test_chunkwise_gradients_equal_parallel_gradients(generator: torch.Generator) -> None:
    q, k, v, log_decay = inputs(20, generator)
    initial_state = randn(*BATCH, DK, DV, generator=generator)
    leaves = [x.requires_grad_() for x in (q, k, v, log_decay, initial_state)]
    output_weight, state_weight = randn(*BATCH, 20, DV, generator=generator), randn(*BATCH, DK, DV, generator=generator)
    mask = padding_mask(20)

    def gradients(output: Tensor, state: Tensor) -> tuple[Tensor, ...]:
        return torch.autograd.grad((output * output_weight).sum() + (state * state_weight).sum(), leaves)

    output, _, state = scalar_decay_parallel(q, k, v, log_decay, initial_state=initial_state, mask=mask)
    expected = gradients(output, state)
    actual = gradients(
        *scalar_decay_chunkwise(q, k, v, log_decay, chunk_size=7, initial_state=initial_state, mask=mask)
    )
    for grad, expected_grad in zip(actual, expected):
        assert_matches(grad, expected_grad)


def test_long_float32_input_with_strong_gates_stays_accurate(generator: torch.Generator) -> None:
    length = 16_384
    q, k, v = (randn(1, 2, length, 8, generator=generator) for _ in range(3))
    log_decay = uniform(1, 2, length, low=-0.05, high=0.0, generator=generator)
    strong = torch.rand(1, 2, length, generator=generator) < 0.02
    log_decay = torch.where(strong, uniform(1, 2, length, low=-10.0, high=-5.0, generator=generator), log_decay)

    expected_output, expected_state = scalar_decay_chunkwise(q, k, v, log_decay)
    output, state = scalar_decay_chunkwise(q.float(), k.float(), v.float(), log_decay.float())
    assert_close_relative(output, expected_output, 1e-5)
    assert_close_relative(state, expected_state, 1e-5)


def test_the_recurrent_state_does_not_grow_with_the_input(generator: torch.Generator) -> None:
    for length in (1, 9):
        q, k, v, log_decay = inputs(length, generator)
        output, state = scalar_decay_recurrent(q, k, v, log_decay)
        assert output.shape == (*BATCH, length, DV)
        assert state.shape == (*BATCH, DK, DV)


def test_a_mask_across_heads_broadcasts_and_one_without_heads_is_refused(generator: torch.Generator) -> None:
    q, k, v, log_decay = inputs(20, generator)
    across_heads = padding_mask(20)[:, :1]  # (B, 1, T)
    for form in (scalar_decay_parallel, scalar_decay_chunkwise, scalar_decay_recurrent):
        broadcast = form(q, k, v, log_decay, mask=across_heads)[0]
        assert_matches(broadcast, form(q, k, v, log_decay, mask=across_heads.expand(*BATCH, 20))[0])
        with pytest.raises(ValueError, match="mask"):
            form(q, k, v, log_decay, mask=across_heads[:, 0])


def test_a_chunk_size_below_one_is_refused(generator: torch.Generator) -> None:
    with pytest.raises(ValueError, match="chunk_size"):
        scalar_decay_chunkwise(*inputs(4, generator), chunk_size=0)


@pytest.mark.parametrize("chunk_size", (7, 16))
def test_queries_and_keys_shared_by_the_heads_match_the_reference_and_its_gradients(
    chunk_size: int, generator: torch.Generator
) -> None:
    """Mamba-2's groups: queries and keys ``(B, 1, T, dk)`` for the 3 heads of ``(B, 3, T, dv)``
    values and decays, which the chunkwise form reads with the heads side by side."""
    length = 30
    q, k, v, log_decay = inputs(length, generator)
    q, k = q[:, :1], k[:, :1]
    initial_state = randn(*BATCH, DK, DV, generator=generator)
    mask = padding_mask(length)[:, :1]
    leaves = [x.requires_grad_() for x in (q, k, v, log_decay, initial_state)]
    output_weight, state_weight = randn(*v.shape, generator=generator), randn(*BATCH, DK, DV, generator=generator)

    def gradients(output: Tensor, state: Tensor) -> tuple[Tensor, ...]:
        return torch.autograd.grad((output * output_weight).sum() + (state * state_weight).sum(), leaves)

    heads_mask = mask.expand(*BATCH, length)
    expected_output, expected_state = reference(q, k, v, log_decay, initial_state, heads_mask)
    with patch.object(decay, "_chunked_shared", wraps=decay._chunked_shared) as shared:
        output, state = scalar_decay_chunkwise(
            q, k, v, log_decay, chunk_size=chunk_size, initial_state=initial_state, mask=mask
        )
    assert shared.call_count == 1  # the heads' states formed together, not head by head
    assert_matches(output, expected_output)
    assert_matches(state, expected_state)
    expected = gradients(*scalar_decay_recurrent(q, k, v, log_decay, state=initial_state, mask=mask))
    for grad, expected_grad in zip(gradients(output, state), expected):
        assert_matches(grad, expected_grad)
