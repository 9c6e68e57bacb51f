"""Tests of ``zoo.attention.kernels.delta_product`` against a per-token loop of Gated DeltaProduct,
``n`` Householder steps a token, in the paper's orientation."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor

from tests.attention.kernels.inputs import BATCH, TOLERANCE, assert_matches, padding_mask, randn, uniform
from zoo.attention.kernels import (
    delta_product_chunkwise,
    delta_product_recurrent,
    delta_product_weights,
    delta_rule_chunkwise,
)

DK, DV, STEPS = 4, 3, 3


def reference(
    q: Tensor, k: Tensor, v: Tensor, beta: Tensor, log_decay: Tensor, state: Tensor, mask: Tensor
) -> tuple[Tensor, Tensor]:
    """Token by token, a ``(dv, dk)`` state: ``H_0 = a_t S_{t-1}``, ``H_j = H_{j-1} (I - b_j k_j
    k_j^T) + b_j v_j k_j^T`` for each of the token's steps, ``S_t = H_n``, ``o_t = S_t q_t``."""
    outputs = torch.zeros(*q.shape[:-1], v.shape[-1], dtype=q.dtype)
    eye = torch.eye(q.shape[-1], dtype=q.dtype)
    for t in range(q.shape[-2]):
        updated = log_decay[..., t, None, None].exp() * state
        for j in range(k.shape[-2]):
            k_j, b_j = k[..., t, j, :], beta[..., t, j, None, None]
            erase = eye - b_j * torch.einsum("...i,...j->...ij", k_j, k_j)
            updated = updated @ erase + b_j * torch.einsum("...i,...j->...ij", v[..., t, j, :], k_j)
        real = mask[..., t]
        state = torch.where(real[..., None, None], updated, state)
        outputs[..., t, :] = torch.where(real[..., None], torch.einsum("...ij,...j->...i", state, q[..., t, :]), 0.0)
    return outputs, state


@pytest.fixture
def generator() -> torch.Generator:
    return torch.Generator().manual_seed(0)


def inputs(length: int, generator: torch.Generator) -> tuple[Tensor, ...]:
    """Queries, ``STEPS`` unit keys and values a token, betas in ``[0, 2)`` (negative eigenvalues)
    and log decays in ``[-2, 0)``."""
    q = randn(*BATCH, length, DK, generator=generator)
    k = F.normalize(randn(*BATCH, length, STEPS, DK, generator=generator), dim=-1)
    v = randn(*BATCH, length, STEPS, DV, generator=generator)
    beta = uniform(*BATCH, length, STEPS, low=0.0, high=2.0, generator=generator)
    log_decay = uniform(*BATCH, length, low=-2.0, high=0.0, generator=generator)
    return q, k, v, beta, log_decay


@pytest.mark.parametrize("length", (1, 50))
def test_every_form_matches_the_papers_recurrence(length: int, generator: torch.Generator) -> None:
    q, k, v, beta, log_decay = inputs(length, generator)
    initial_state = randn(*BATCH, DK, DV, generator=generator)
    mask = padding_mask(length)
    expected_output, expected_state = reference(q, k, v, beta, log_decay, initial_state.mT, mask)
    forms = {
        "recurrent": lambda: delta_product_recurrent(q, k, v, beta, log_decay, state=initial_state, mask=mask),
        **{
            f"chunks of {size}": lambda size=size: delta_product_chunkwise(
                q, k, v, beta, log_decay, chunk_size=size, initial_state=initial_state, mask=mask
            )
            for size in (1, 7, 64, None)
        },
    }
    for form, run in forms.items():
        for actual, reference_value in zip(run(), (expected_output, expected_state.mT)):
            torch.testing.assert_close(
                actual, reference_value, atol=TOLERANCE, rtol=0, msg=lambda message, form=form: f"{form}: {message}"
            )


def test_one_step_a_token_is_gated_deltanet(generator: torch.Generator) -> None:
    q, k, v, beta, log_decay = (x[..., :1, :] if x.dim() == 5 else x for x in inputs(30, generator))
    beta = beta[..., :1] / 2
    single, _ = delta_product_chunkwise(q, k, v, beta, log_decay, chunk_size=8)
    gated, _ = delta_rule_chunkwise(q, k[..., 0, :], v[..., 0, :], beta[..., 0], log_decay, chunk_size=8)
    assert_matches(single, gated)


def test_the_weights_sum_each_tokens_steps(generator: torch.Generator) -> None:
    """With a token's values all equal, the output from a zero state is ``weights @ v``."""
    q, k, v, beta, log_decay = inputs(24, generator)
    v = v[..., :1, :].expand_as(v)
    mask = padding_mask(24)
    output, _ = delta_product_chunkwise(q, k, v, beta, log_decay, chunk_size=None, mask=mask)
    weights = delta_product_weights(q, k, beta, log_decay, mask=mask)
    assert_matches(weights @ v[..., 0, :], output)
    assert (weights.triu(1) == 0).all()


def test_a_prompt_then_single_steps_continue_one_run(generator: torch.Generator) -> None:
    q, k, v, beta, log_decay = inputs(40, generator)
    mask = padding_mask(40)
    whole, whole_state = delta_product_chunkwise(q, k, v, beta, log_decay, chunk_size=8, mask=mask)
    output, state = delta_product_chunkwise(
        q[..., :25, :], k[..., :25, :, :], v[..., :25, :, :], beta[..., :25, :], log_decay[..., :25],
        chunk_size=8, mask=mask[..., :25],
    )  # fmt: skip
    outputs = [output]
    for t in range(25, 40):
        step = slice(t, t + 1)
        output, state = delta_product_recurrent(
            q[..., step, :], k[..., step, :, :], v[..., step, :, :], beta[..., step, :], log_decay[..., step],
            state=state, mask=mask[..., step],
        )  # fmt: skip
        outputs.append(output)
    assert_matches(torch.cat(outputs, dim=-2), whole)
    assert_matches(state, whole_state)
