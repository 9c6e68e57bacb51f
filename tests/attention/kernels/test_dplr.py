"""Tests of ``zoo.attention.kernels.dplr`` against per-token loops of Kimi Delta Attention's and
RWKV-7's recurrences, each written in its paper's orientation."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor

from tests.attention.kernels.inputs import (
    BATCH,
    TOLERANCE,
    assert_close_relative,
    assert_matches,
    padding_mask,
    randn,
    uniform,
)
from zoo.attention.kernels import decay, dplr_chunkwise, dplr_recurrent, dplr_weights

DK, DV = 4, 3
LENGTHS = (1, 50, 130)
CHUNK_SIZES = (1, 7, 16, 64)


def kda_reference(
    q: Tensor, k: Tensor, v: Tensor, beta: Tensor, log_alpha: Tensor, state: Tensor, mask: Tensor
) -> tuple[Tensor, Tensor]:
    """The Kimi Linear report's recurrence: ``S_t = (I - beta_t k_t k_t^T) Diag(alpha_t) S_{t-1} +
    beta_t k_t v_t^T`` with a ``(dk, dv)`` state and ``o_t = S_t^T q_t``; a padded token leaves
    the state and reads zero."""
    outputs = torch.zeros_like(v)
    eye = torch.eye(q.shape[-1], dtype=q.dtype)
    for t in range(q.shape[-2]):
        k_t, b_t = k[..., t, :], beta[..., t, None, None]
        erase = eye - b_t * torch.einsum("...i,...j->...ij", k_t, k_t)
        decayed = torch.diag_embed(log_alpha[..., t, :].exp()) @ state
        updated = erase @ decayed + b_t * torch.einsum("...i,...j->...ij", k_t, v[..., t, :])
        real = mask[..., t]
        state = torch.where(real[..., None, None], updated, state)
        outputs[..., t, :] = torch.where(real[..., None], torch.einsum("...ij,...i->...j", state, q[..., t, :]), 0.0)
    return outputs, state


def rwkv7_reference(
    r: Tensor, k: Tensor, v: Tensor, kappa: Tensor, a: Tensor, log_w: Tensor, state: Tensor, mask: Tensor
) -> tuple[Tensor, Tensor]:
    """RWKV-7's recurrence: ``wkv_t = wkv_{t-1} (Diag(w_t) - kappa_t^T (a_t * kappa_t)) + v_t^T k_t``
    with a ``(dv, dk)`` state and ``o_t = wkv_t r_t``."""
    outputs = torch.zeros_like(v)
    for t in range(r.shape[-2]):
        kappa_t = kappa[..., t, :]
        transition = torch.diag_embed(log_w[..., t, :].exp()) - torch.einsum(
            "...i,...j->...ij", kappa_t, a[..., t, :] * kappa_t
        )
        updated = state @ transition + torch.einsum("...i,...j->...ij", v[..., t, :], k[..., t, :])
        real = mask[..., t]
        state = torch.where(real[..., None, None], updated, state)
        outputs[..., t, :] = torch.where(real[..., None], torch.einsum("...ij,...j->...i", state, r[..., t, :]), 0.0)
    return outputs, state


@pytest.fixture
def generator() -> torch.Generator:
    return torch.Generator().manual_seed(0)


def kda_inputs(length: int, generator: torch.Generator) -> dict[str, Tensor]:
    """Queries, unit keys, values, betas in ``[0, 1)`` and log decays per key dimension in ``[-2, 0)``."""
    return {
        "q": randn(*BATCH, length, DK, generator=generator),
        "k": F.normalize(randn(*BATCH, length, DK, generator=generator), dim=-1),
        "v": randn(*BATCH, length, DV, generator=generator),
        "beta": uniform(*BATCH, length, low=0.0, high=1.0, generator=generator),
        "log_alpha": uniform(*BATCH, length, DK, low=-2.0, high=0.0, generator=generator),
    }


def kda_arguments(x: dict[str, Tensor]) -> tuple[Tensor, ...]:
    """The kernel's ``q, k, v, a, b, log_decay`` for Kimi Delta Attention."""
    beta = x["beta"].unsqueeze(-1)
    return x["q"], beta * x["k"], x["v"], -beta * x["k"], x["k"] * x["log_alpha"].exp(), x["log_alpha"]


def rwkv7_inputs(length: int, generator: torch.Generator) -> dict[str, Tensor]:
    """Receptance, keys, values, unit removal keys, rates in ``[0, 1)`` and RWKV-7's log decays."""
    return {
        "r": randn(*BATCH, length, DK, generator=generator),
        "k": randn(*BATCH, length, DK, generator=generator),
        "v": randn(*BATCH, length, DV, generator=generator),
        "kappa": F.normalize(randn(*BATCH, length, DK, generator=generator), dim=-1),
        "a": uniform(*BATCH, length, DK, low=0.0, high=1.0, generator=generator),
        "log_w": uniform(*BATCH, length, DK, low=-0.6, high=0.0, generator=generator),
    }


def rwkv7_arguments(x: dict[str, Tensor]) -> tuple[Tensor, ...]:
    return x["r"], x["k"], x["v"], -(x["a"] * x["kappa"]), x["kappa"], x["log_w"]


FAMILIES = {
    "kda": (kda_inputs, kda_arguments, lambda x, state, mask: kda_reference(**x, state=state, mask=mask), False),
    "rwkv7": (rwkv7_inputs, rwkv7_arguments, lambda x, state, mask: rwkv7_reference(**x, state=state, mask=mask), True),
}


def expected(family: str, x: dict[str, Tensor], state: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    """The reference's output and final state, the state in the kernel's ``(dk, dv)`` orientation."""
    reference, transposed = FAMILIES[family][2], FAMILIES[family][3]
    output, final = reference(x, state.mT if transposed else state, mask)
    return output, final.mT if transposed else final


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("length", LENGTHS)
@pytest.mark.parametrize("span_limit", [40.0, -1.0], ids=["16-step sub-chunks", "1-step sub-chunks"])
def test_every_form_matches_the_papers_recurrence(
    family: str, length: int, span_limit: float, generator: torch.Generator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each form against the paper's per-token loop, with the decay kernel's longest sub-chunks and
    its shortest (one step, under a limit below any drop)."""
    monkeypatch.setattr(decay, "SPAN_LIMIT", span_limit)
    make, arguments = FAMILIES[family][:2]
    x = make(length, generator)
    initial_state = randn(*BATCH, DK, DV, generator=generator)
    mask = padding_mask(length)
    expected_output, expected_state = expected(family, x, initial_state, mask)
    forms = {
        "recurrent": lambda: dplr_recurrent(*arguments(x), state=initial_state, mask=mask),
        **{
            f"chunks of {size}": lambda size=size: dplr_chunkwise(
                *arguments(x), chunk_size=size, initial_state=initial_state, mask=mask
            )
            for size in (*CHUNK_SIZES, None)
        },
    }
    for form, run in forms.items():
        for actual, reference in zip(run(), (expected_output, expected_state)):
            torch.testing.assert_close(
                actual, reference, atol=TOLERANCE, rtol=0, msg=lambda message, form=form: f"{form}: {message}"
            )


@pytest.mark.parametrize("family", FAMILIES)
def test_the_weights_give_the_output_from_a_zero_state(family: str, generator: torch.Generator) -> None:
    make, arguments = FAMILIES[family][:2]
    x = make(40, generator)
    mask = padding_mask(40)
    q, k, v, a, b, log_decay = arguments(x)
    output, _ = expected(family, x, torch.zeros(*BATCH, DK, DV, dtype=torch.float64), mask)
    weights = dplr_weights(q, k, a, b, log_decay, mask=mask)
    assert_matches(weights @ v, output)
    assert (weights.triu(1) == 0).all() and not weights[0, :, :, 27:].any()  # the right padding writes nothing


def test_a_prompt_then_single_steps_continue_one_run(generator: torch.Generator) -> None:
    x = kda_inputs(70, generator)
    arguments = kda_arguments(x)
    mask = padding_mask(70)
    whole, whole_state = dplr_chunkwise(*arguments, chunk_size=16, mask=mask)
    outputs, state = [], None
    for start, stop in ((0, 45), (45, 46), (46, 52), (52, 70)):
        part = [t[..., start:stop, :] for t in arguments]
        form = dplr_chunkwise if stop - start > 1 else dplr_recurrent
        options = {"initial_state": state} if form is dplr_chunkwise else {"state": state}
        output, state = form(*part, mask=mask[..., start:stop], **options)
        outputs.append(output)
    assert_matches(torch.cat(outputs, dim=-2), whole)
    assert_matches(state, whole_state)


def test_chunkwise_gradients_equal_parallel_gradients(generator: torch.Generator) -> None:
    x = rwkv7_inputs(20, generator)
    initial_state = randn(*BATCH, DK, DV, generator=generator)
    leaves = [t.requires_grad_() for t in (*x.values(), initial_state)]
    weights = randn(*BATCH, 20, DV, generator=generator), randn(*BATCH, DK, DV, generator=generator)
    mask = padding_mask(20)

    def gradients(chunk_size: int | None) -> tuple[Tensor, ...]:
        output, state = dplr_chunkwise(
            *rwkv7_arguments(x), chunk_size=chunk_size, initial_state=initial_state, mask=mask
        )
        return torch.autograd.grad((output * weights[0]).sum() + (state * weights[1]).sum(), leaves)

    for chunked, parallel in zip(gradients(7), gradients(None)):
        assert_matches(chunked, parallel)


def test_long_float32_input_with_strong_decays_stays_accurate(generator: torch.Generator) -> None:
    """Decays of exp(-80) a step here and there (Kimi Delta Attention's gate can reach them):
    float32 stays within 1e-5 of float64, and finite."""
    x = kda_inputs(4096, generator)
    strong = torch.rand(*BATCH, 4096, 1, generator=generator) < 0.02
    x["log_alpha"] = torch.where(strong, x["log_alpha"] * 40, x["log_alpha"] * 0.05)
    arguments = kda_arguments(x)
    expected_output, expected_state = dplr_chunkwise(*arguments)
    output, state = dplr_chunkwise(*(t.float() for t in arguments))
    assert_close_relative(output, expected_output, 1e-5)
    assert_close_relative(state, expected_state, 1e-5)
