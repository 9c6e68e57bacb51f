"""The scan of states against the decaying state written out one token at a time."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor

from zoo.attention.kernels.state_scan import decay_scan, scan_chunk_size
from zoo.attention.modules.recurrence import ScannedRecurrence

from .inputs import TOLERANCE, padding_mask, randn, uniform


def per_token(q: Tensor, k: Tensor, v: Tensor, log_decay: Tensor, state: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    """``S_t = Diag(a_t) S_{t-1} + k_t^T v_t``, ``o_t = q_t S_t``; a padded step leaves ``S`` and reads zero."""
    outputs = []
    for t in range(q.shape[-2]):
        step = mask[..., t, None, None]
        updated = log_decay[..., t, :, None].exp() * state + k[..., t, :, None] * v[..., t, None, :]
        state = torch.where(step, updated, state)
        outputs.append(torch.where(step[..., 0], (q[..., t, :, None] * state).sum(-2), 0.0))
    return torch.stack(outputs, dim=-2), state


def mamba_inputs(length: int, generator: torch.Generator) -> tuple[Tensor, ...]:
    """Queries and keys shared by 5 channels ``(2, 1, T, 4)``, one value a channel, a decay per
    channel and key dimension, a state, and a padding mask over the shared axis."""
    q, k = (randn(2, 1, length, 4, generator=generator) for _ in range(2))
    v = randn(2, 5, length, 1, generator=generator)
    log_decay = uniform(2, 5, length, 4, low=-2.0, high=0.0, generator=generator)
    state = randn(2, 5, 4, 1, generator=generator)
    return q, k, v, log_decay, state, padding_mask(length)[:, :1]


@pytest.mark.parametrize("length", [1, 7, 16, 37])
@pytest.mark.parametrize("chunk_size", [None, 1, 4, 16, 64])
def test_the_scan_equals_the_recurrence_token_by_token(length: int, chunk_size: int | None) -> None:
    q, k, v, log_decay, state, mask = mamba_inputs(length, torch.Generator().manual_seed(length))
    output, final = decay_scan(q, k, v, log_decay, chunk_size=chunk_size, initial_state=state, mask=mask)
    expected, expected_final = per_token(q, k, v, log_decay, state, mask)
    torch.testing.assert_close(output, expected, rtol=TOLERANCE, atol=TOLERANCE)
    torch.testing.assert_close(final, expected_final, rtol=TOLERANCE, atol=TOLERANCE)


def test_several_values_a_key_and_a_scalar_decay_scan_alike() -> None:
    generator = torch.Generator().manual_seed(3)
    q, k, v = (randn(2, 3, 21, width, generator=generator) for width in (4, 4, 3))
    log_decay = uniform(2, 3, 21, 1, low=-1.0, high=0.0, generator=generator)
    state, mask = torch.zeros(2, 3, 4, 3, dtype=torch.float64), torch.ones(2, 3, 21, dtype=torch.bool)
    output, final = decay_scan(q, k, v, log_decay, chunk_size=5)
    expected, expected_final = per_token(q, k, v, log_decay, state, mask)
    torch.testing.assert_close(output, expected, rtol=TOLERANCE, atol=TOLERANCE)
    torch.testing.assert_close(final, expected_final, rtol=TOLERANCE, atol=TOLERANCE)


def test_the_scan_passes_the_recurrences_gradients() -> None:
    inputs = [
        x.requires_grad_() if x.is_floating_point() else x for x in mamba_inputs(23, torch.Generator().manual_seed(5))
    ]
    weights = randn(2, 5, 23, 1, generator=torch.Generator().manual_seed(6))

    def gradients(run) -> list[Tensor]:  # noqa: ANN001
        output, final = run(*inputs)
        return list(torch.autograd.grad((output * weights).sum() + final.sum(), inputs[:5]))

    scanned = gradients(lambda q, k, v, d, s, m: decay_scan(q, k, v, d, chunk_size=6, initial_state=s, mask=m))
    for got, expected in zip(scanned, gradients(per_token), strict=True):
        torch.testing.assert_close(got, expected, rtol=TOLERANCE, atol=TOLERANCE)


def test_the_default_chunk_balances_the_two_loops_and_bad_sizes_are_refused() -> None:
    assert [scan_chunk_size(n) for n in (1, 64, 256, 4096, 16384)] == [8, 8, 16, 64, 128]
    q, k, v, log_decay, *_ = mamba_inputs(4, torch.Generator().manual_seed(0))
    with pytest.raises(ValueError, match="chunk_size must be a positive integer"):
        decay_scan(q, k, v, log_decay, chunk_size=0)
    with pytest.raises(ValueError, match=r"no beta \(the delta rule\)"):
        ScannedRecurrence(q, k, v, log_decay[..., :1], beta=torch.ones(2, 5, 4))


@pytest.mark.parametrize("chunk_size", [1, 4, 8])
def test_the_scan_leaves_its_inputs_as_they_were(chunk_size: int) -> None:
    """The scan exponentiates its decays in place of a step-major copy; whatever the layout (one
    step a chunk moves nothing, and a length of whole chunks is not padded), never the caller's."""
    q, k, v, log_decay, state, _ = mamba_inputs(8, torch.Generator().manual_seed(7))
    before = [x.clone() for x in (q, k, v, log_decay, state)]
    decay_scan(q, k, v, log_decay, chunk_size=chunk_size, initial_state=state)
    for got, expected in zip((q, k, v, log_decay, state), before, strict=True):
        torch.testing.assert_close(got, expected, rtol=0, atol=0)
