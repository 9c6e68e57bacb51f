"""Tests of ``zoo.attention.kernels.delta_rule`` against per-token loops of DeltaNet and Gated DeltaNet."""

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
from zoo.attention.kernels import delta_rule_chunkwise, delta_rule_recurrent, delta_rule_weights


def delta_rule_parallel(
    q: Tensor, k: Tensor, v: Tensor, beta: Tensor, log_decay: Tensor | None = None, **options
) -> tuple[Tensor, ...]:
    """The parallel form (one chunk) and its weights: ``(output, weights, final_state)``."""
    output, state = delta_rule_chunkwise(q, k, v, beta, log_decay, chunk_size=None, **options)
    return output, delta_rule_weights(q, k, beta, log_decay, mask=options.get("mask")), state


DK, DV = 4, 3
LENGTHS = (1, 50, 64, 130)
CHUNK_SIZES = (1, 7, 16, 64)


def reference(
    q: Tensor, k: Tensor, v: Tensor, beta: Tensor, log_decay: Tensor | None, state: Tensor, mask: Tensor
) -> tuple[Tensor, Tensor]:
    """The papers' recurrence token by token, in their orientation: ``(dv, dk)`` state, ``o_t = S_t q_t``.

    ``S_t = a_t S_{t-1} (I - beta_t k_t k_t^T) + beta_t v_t k_t^T``, ``a_t = 1`` without decays
    (DeltaNet).
    A padded token leaves the state as it was and outputs zero. ``state`` and the returned final
    state are ``(*batch, dv, dk)``.
    """
    outputs = torch.zeros_like(v)
    eye = torch.eye(q.shape[-1], dtype=q.dtype)
    for t in range(q.shape[-2]):
        k_t, b_t = k[..., t, :], beta[..., t, None, None]
        decay = 1.0 if log_decay is None else log_decay[..., t, None, None].exp()
        erase = eye - b_t * torch.einsum("...i,...j->...ij", k_t, k_t)
        updated = decay * state @ erase + b_t * torch.einsum("...i,...j->...ij", v[..., t, :], k_t)
        real = mask[..., t]
        state = torch.where(real[..., None, None], updated, state)
        read = torch.einsum("...ij,...j->...i", state, q[..., t, :])
        outputs[..., t, :] = torch.where(real[..., None], read, 0.0)
    return outputs, state


@pytest.fixture
def generator() -> torch.Generator:
    return torch.Generator().manual_seed(0)


def inputs(length: int, generator: torch.Generator, gated: bool) -> tuple[Tensor | None, ...]:
    """Queries, unit keys, values, betas in ``[0, 1)``, and log decays in ``[-2, 0)`` if ``gated``."""
    q, k, v = qkv(length, DK, DV, generator, unit_keys=True)
    beta = uniform(*BATCH, length, low=0.0, high=1.0, generator=generator)
    log_decay = uniform(*BATCH, length, low=-2.0, high=0.0, generator=generator) if gated else None
    return q, k, v, beta, log_decay


@pytest.mark.parametrize("gated", [False, True], ids=["deltanet", "gated"])
@pytest.mark.parametrize("length", LENGTHS)
def test_parallel_and_recurrent_match_reference(length: int, gated: bool, generator: torch.Generator) -> None:
    q, k, v, beta, log_decay = inputs(length, generator, gated)
    initial_state = randn(*BATCH, DK, DV, generator=generator)
    mask = padding_mask(length)
    expected_output, expected_state = reference(q, k, v, beta, log_decay, initial_state.mT, mask)

    output, _, state = delta_rule_parallel(q, k, v, beta, log_decay, initial_state=initial_state, mask=mask)
    assert_matches(output, expected_output)
    assert_matches(state, expected_state.mT)
    output, state = delta_rule_recurrent(q, k, v, beta, log_decay, state=initial_state, mask=mask)
    assert_matches(output, expected_output)
    assert_matches(state, expected_state.mT)


@pytest.mark.parametrize("gated", [False, True], ids=["deltanet", "gated"])
@pytest.mark.parametrize("chunk_size", CHUNK_SIZES)
@pytest.mark.parametrize("length", LENGTHS)
def test_chunkwise_matches_reference(length: int, chunk_size: int, gated: bool, generator: torch.Generator) -> None:
    q, k, v, beta, log_decay = inputs(length, generator, gated)
    initial_state = randn(*BATCH, DK, DV, generator=generator)
    mask = padding_mask(length)
    expected_output, expected_state = reference(q, k, v, beta, log_decay, initial_state.mT, mask)

    output, state = delta_rule_chunkwise(
        q, k, v, beta, log_decay, chunk_size=chunk_size, initial_state=initial_state, mask=mask
    )
    assert_matches(output, expected_output)
    assert_matches(state, expected_state.mT)


@pytest.mark.parametrize("gated", [False, True], ids=["deltanet", "gated"])
def test_without_mask_or_state_the_weights_give_the_output(gated: bool, generator: torch.Generator) -> None:
    q, k, v, beta, log_decay = inputs(40, generator, gated)
    no_padding = torch.ones(*BATCH, 40, dtype=torch.bool)
    expected_output, expected_state = reference(q, k, v, beta, log_decay, q.new_zeros(*BATCH, DV, DK), no_padding)

    output, weights, state = delta_rule_parallel(q, k, v, beta, log_decay)
    assert_matches(output, expected_output)
    assert_matches(state, expected_state.mT)
    assert_matches(weights @ v, output)
    assert (weights.triu(1) == 0).all()
    output, state = delta_rule_chunkwise(q, k, v, beta, log_decay, chunk_size=16)
    assert_matches(output, expected_output)
    assert_matches(state, expected_state.mT)


@pytest.mark.parametrize("prefill", [delta_rule_chunkwise, delta_rule_parallel])
def test_prefill_then_decoding_continues_one_run(prefill, generator: torch.Generator) -> None:
    q, k, v, beta, log_decay = inputs(70, generator, gated=True)
    mask = padding_mask(70)
    whole, whole_state = delta_rule_chunkwise(q, k, v, beta, log_decay, chunk_size=16, mask=mask)

    head = slice(0, 45)
    first = prefill(
        q[..., head, :], k[..., head, :], v[..., head, :], beta[..., head], log_decay[..., head], mask=mask[..., head]
    )
    outputs, state = [first[0]], first[-1]
    for start, stop in ((45, 46), (46, 47), (47, 52), (52, 70)):
        step = slice(start, stop)
        output, state = delta_rule_recurrent(
            q[..., step, :],
            k[..., step, :],
            v[..., step, :],
            beta[..., step],
            log_decay[..., step],
            state=state,
            mask=mask[..., step],
        )
        outputs.append(output)
    assert_matches(torch.cat(outputs, dim=-2), whole)
    assert_matches(state, whole_state)


def test_chunkwise_gradients_equal_parallel_gradients(generator: torch.Generator) -> None:
    q, k, v, beta, log_decay = inputs(20, generator, gated=True)
    initial_state = randn(*BATCH, DK, DV, generator=generator)
    leaves = [x.requires_grad_() for x in (q, k, v, beta, log_decay, initial_state)]
    output_weight, state_weight = randn(*BATCH, 20, DV, generator=generator), randn(*BATCH, DK, DV, generator=generator)
    mask = padding_mask(20)

    def gradients(output: Tensor, state: Tensor) -> tuple[Tensor, ...]:
        return torch.autograd.grad((output * output_weight).sum() + (state * state_weight).sum(), leaves)

    output, _, state = delta_rule_parallel(q, k, v, beta, log_decay, initial_state=initial_state, mask=mask)
    expected = gradients(output, state)
    actual = gradients(
        *delta_rule_chunkwise(q, k, v, beta, log_decay, chunk_size=7, initial_state=initial_state, mask=mask)
    )
    for grad, expected_grad in zip(actual, expected):
        assert_matches(grad, expected_grad)


def test_long_float32_input_with_strong_gates_stays_accurate(generator: torch.Generator) -> None:
    length = 16_384
    q, _, v = (randn(1, 2, length, 8, generator=generator) for _ in range(3))
    k = torch.nn.functional.normalize(randn(1, 2, length, 8, generator=generator), dim=-1)
    beta = uniform(1, 2, length, low=0.0, high=1.0, generator=generator)
    log_decay = uniform(1, 2, length, low=-0.05, high=0.0, generator=generator)
    strong = torch.rand(1, 2, length, generator=generator) < 0.02
    strong[:, :, 4_000:4_300] = True
    log_decay = torch.where(strong, uniform(1, 2, length, low=-10.0, high=-5.0, generator=generator), log_decay)

    expected_output, expected_state = delta_rule_chunkwise(q, k, v, beta, log_decay)
    output, state = delta_rule_chunkwise(*(x.float() for x in (q, k, v, beta, log_decay)))
    assert_close_relative(output, expected_output, 1e-5)
    assert_close_relative(state, expected_state, 1e-5)


def test_the_recurrent_state_does_not_grow_with_the_input(generator: torch.Generator) -> None:
    for length in (1, 9):
        q, k, v, beta, log_decay = inputs(length, generator, gated=True)
        output, state = delta_rule_recurrent(q, k, v, beta, log_decay)
        assert output.shape == (*BATCH, length, DV)
        assert state.shape == (*BATCH, DK, DV)


def test_a_chunk_size_below_one_is_refused(generator: torch.Generator) -> None:
    with pytest.raises(ValueError, match="chunk_size"):
        delta_rule_chunkwise(*inputs(4, generator, gated=False), chunk_size=0)
