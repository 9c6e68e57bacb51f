"""Tests of ``zoo.attention.kernels.decay`` against a per-token loop of gated linear attention."""

from __future__ import annotations

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
from zoo.attention.kernels.decay import sub_chunk_length


def decay_parallel(q: Tensor, k: Tensor, v: Tensor, log_decay: Tensor, **options) -> tuple[Tensor, ...]:
    """The parallel form (one chunk) and its weights: ``(output, weights, final_state)``."""
    output, state = decay_chunkwise(q, k, v, log_decay, chunk_size=None, **options)
    return output, decay_weights(q, k, log_decay, mask=options.get("mask")), state


DK, DV = 4, 3
LENGTHS = (1, 50, 64, 130)
CHUNK_SIZES = (1, 7, 16, 40, 64)  # 40: not a multiple of the 16-step sub-chunks


def reference(q: Tensor, k: Tensor, v: Tensor, log_decay: Tensor, state: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    """GLA token by token: ``S_t = Diag(a_t) S_{t-1} + k_t^T v_t``, ``o_t = q_t S_t``.

    A padded token leaves the state as it was and outputs zero.
    """
    outputs = torch.zeros_like(v)
    for n in range(q.shape[-2]):
        updated = log_decay[..., n, :, None].exp() * state + torch.einsum(
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
    """Queries, keys, values and log decays in ``[-3, 0)`` per key dimension, float64."""
    q, k, v = qkv(length, DK, DV, generator)
    return q, k, v, uniform(*BATCH, length, DK, low=-3.0, high=0.0, generator=generator)


@pytest.mark.parametrize("length", LENGTHS)
def test_parallel_and_recurrent_match_reference(length: int, generator: torch.Generator) -> None:
    q, k, v, log_decay = inputs(length, generator)
    initial_state = randn(*BATCH, DK, DV, generator=generator)
    mask = padding_mask(length)
    expected_output, expected_state = reference(q, k, v, log_decay, initial_state, mask)

    output, _, state = decay_parallel(q, k, v, log_decay, initial_state=initial_state, mask=mask)
    assert_matches(output, expected_output)
    assert_matches(state, expected_state)
    output, state = decay_recurrent(q, k, v, log_decay, state=initial_state, mask=mask)
    assert_matches(output, expected_output)
    assert_matches(state, expected_state)


@pytest.mark.parametrize("chunk_size", CHUNK_SIZES)
@pytest.mark.parametrize("length", LENGTHS)
def test_chunkwise_matches_reference(length: int, chunk_size: int, generator: torch.Generator) -> None:
    q, k, v, log_decay = inputs(length, generator)
    initial_state = randn(*BATCH, DK, DV, generator=generator)
    mask = padding_mask(length)
    expected_output, expected_state = reference(q, k, v, log_decay, initial_state, mask)

    output, state = decay_chunkwise(q, k, v, log_decay, chunk_size=chunk_size, initial_state=initial_state, mask=mask)
    assert_matches(output, expected_output)
    assert_matches(state, expected_state)


def test_without_mask_or_state_the_weights_give_the_output(generator: torch.Generator) -> None:
    q, k, v, log_decay = inputs(40, generator)
    no_padding = torch.ones(*BATCH, 40, dtype=torch.bool)
    expected_output, expected_state = reference(q, k, v, log_decay, q.new_zeros(*BATCH, DK, DV), no_padding)

    output, weights, state = decay_parallel(q, k, v, log_decay)
    assert_matches(output, expected_output)
    assert_matches(state, expected_state)
    assert_matches(weights @ v, output)
    assert (weights.triu(1) == 0).all()
    output, state = decay_chunkwise(q, k, v, log_decay, chunk_size=16)
    assert_matches(output, expected_output)
    assert_matches(state, expected_state)


@pytest.mark.parametrize("prefill", [decay_chunkwise, decay_parallel])
def test_prefill_then_decoding_continues_one_run(prefill, generator: torch.Generator) -> None:
    q, k, v, log_decay = inputs(70, generator)
    mask = padding_mask(70)
    whole, whole_state = decay_chunkwise(q, k, v, log_decay, chunk_size=16, mask=mask)

    first = prefill(q[..., :45, :], k[..., :45, :], v[..., :45, :], log_decay[..., :45, :], mask=mask[..., :45])
    outputs, state = [first[0]], first[-1]
    for start, stop in ((45, 46), (46, 47), (47, 52), (52, 70)):
        step = slice(start, stop)
        output, state = decay_recurrent(
            q[..., step, :],
            k[..., step, :],
            v[..., step, :],
            log_decay[..., step, :],
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

    output, _, state = decay_parallel(q, k, v, log_decay, initial_state=initial_state, mask=mask)
    expected = gradients(output, state)
    actual = gradients(*decay_chunkwise(q, k, v, log_decay, chunk_size=7, initial_state=initial_state, mask=mask))
    for grad, expected_grad in zip(actual, expected):
        assert_matches(grad, expected_grad)


def test_long_float32_input_with_strong_gates_stays_accurate(generator: torch.Generator) -> None:
    length = 16_384
    q, k, v = (randn(1, 2, length, 8, generator=generator) for _ in range(3))
    # Weak gates with 2% strong ones, and a stretch where every gate is strong: there exp(-b_j) of
    # a chunk's cumulative log decay b would overflow float32 (b reaches about -480 in a chunk).
    log_decay = uniform(1, 2, length, 8, low=-0.05, high=0.0, generator=generator)
    strong = torch.rand(1, 2, length, 8, generator=generator) < 0.02
    strong[:, :, 4_000:4_300] = True
    log_decay = torch.where(strong, uniform(1, 2, length, 8, low=-10.0, high=-5.0, generator=generator), log_decay)

    expected_output, expected_state = decay_chunkwise(q, k, v, log_decay)
    output, state = decay_chunkwise(q.float(), k.float(), v.float(), log_decay.float())
    assert_close_relative(output, expected_output, 1e-5)
    assert_close_relative(state, expected_state, 1e-5)


def test_the_recurrent_state_does_not_grow_with_the_input(generator: torch.Generator) -> None:
    for length in (1, 9):
        q, k, v, log_decay = inputs(length, generator)
        output, state = decay_recurrent(q, k, v, log_decay)
        assert output.shape == (*BATCH, length, DV)
        assert state.shape == (*BATCH, DK, DV)


def test_a_chunk_size_below_one_is_refused(generator: torch.Generator) -> None:
    with pytest.raises(ValueError, match="chunk_size"):
        decay_chunkwise(*inputs(4, generator), chunk_size=0)


@pytest.mark.parametrize("span_limit", [40.0, 3.0, -1.0], ids=["16 steps", "4 steps", "1 step"])
def test_every_sub_chunk_length_matches_the_reference(
    span_limit: float, generator: torch.Generator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Mild gates (a drop of at most 0.5 a step) fit 16-step sub-chunks under the limit of 40; a
    limit of 3 halves them to 4 steps (at most 1.5 within one), a limit below any drop to one step.
    Each gives the recurrence, gradients included."""
    monkeypatch.setattr(decay, "SPAN_LIMIT", span_limit)
    q, k, v = qkv(70, DK, DV, generator)
    log_decay = uniform(*BATCH, 70, DK, low=-0.5, high=0.0, generator=generator).requires_grad_()
    mask = padding_mask(70)
    expected, _ = reference(q, k, v, log_decay, q.new_zeros(*BATCH, DK, DV), mask)
    for chunk_size in (16, 64, None):
        output, _ = decay_chunkwise(q, k, v, log_decay, chunk_size=chunk_size, mask=mask)
        assert_matches(output, expected)
    (gradient,) = torch.autograd.grad((output * v).sum(), log_decay)
    (expected_gradient,) = torch.autograd.grad((expected * v).sum(), log_decay)
    assert_matches(gradient, expected_gradient)


def test_a_sub_chunk_is_halved_until_its_decays_fit_the_limit() -> None:
    """A drop of 5 a step spans 75 over 16 steps and 35 over 8: 8-step sub-chunks; 20 a step: 2
    steps (20 within each); 50 a step: one step. One dimension and one step decide for the batch."""
    for per_step, expected in ((0.5, 16), (5.0, 8), (20.0, 2), (50.0, 1)):
        cum = torch.zeros(2, 3, 64, DK)
        cum[1, 2, :, -1] = -per_step * torch.arange(64.0)
        assert sub_chunk_length(cum, 16) == expected
    assert sub_chunk_length(torch.zeros(1, 10, DK), 10) == 10
