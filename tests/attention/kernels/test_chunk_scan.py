"""The pass between chunks and its hand-written adjoint against the loop written out for autograd."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor

from zoo.attention.kernels.chunk_scan import chunk_scan

from .inputs import randn, uniform


def looped(
    initial: Tensor,
    decay: Tensor,
    update: Tensor | None,
    values: Tensor | None,
    from_state: Tensor | None,
    written: Tensor | None,
) -> tuple[Tensor, Tensor, Tensor | None]:
    """``R_n = U_n + W_n S_n``, ``S_{n+1} = D_n S_n + A_n R_n + E_n``, one chunk at a time."""
    state, entering, reads = initial, [], []
    for n in range(decay.shape[-3]):
        entering.append(state)
        following = decay[..., n, :, :] * state
        if update is not None:
            following = following + update[..., n, :, :]
        if values is not None:
            reads.append(values[..., n, :, :] + from_state[..., n, :, :] @ state)
            following = following + written[..., n, :, :] @ reads[-1]
        state = following
    return torch.stack(entering, -3), state, torch.stack(reads, -3) if reads else None


def operands(form: str, decay_width: int, generator: torch.Generator) -> dict[str, Tensor | None]:
    """Random ``(2, 3)``-batched operands of 5 chunks of 4 steps, ``dk`` 3, ``dv`` 2."""
    chunks, steps, dk, dv = 5, 4, 3, 2
    given = {
        "initial": randn(2, 3, dk, dv, generator=generator),
        "decay": uniform(2, 3, chunks, decay_width, 1, low=0.2, high=1.0, generator=generator),
        "update": randn(2, 3, chunks, dk, dv, generator=generator) if form != "delta" else None,
        "values": None,
        "from_state": None,
        "written": None,
    }
    if form != "decay":
        given |= {
            "values": randn(2, 3, chunks, steps, dv, generator=generator),
            "from_state": randn(2, 3, chunks, steps, dk, generator=generator) / 2,
            "written": randn(2, 3, chunks, dk, steps, generator=generator) / 2,
        }
    return {name: None if t is None else t.requires_grad_() for name, t in given.items()}


@pytest.mark.parametrize("decay_width", [1, 3], ids=["decay-per-head", "decay-per-key"])
@pytest.mark.parametrize("form", ["decay", "delta", "generalized"])
def test_the_scan_and_its_gradients_equal_the_loop(form: str, decay_width: int) -> None:
    given = operands(form, decay_width, torch.Generator().manual_seed(decay_width))
    leaves = [t for t in given.values() if t is not None]
    initial, decay = given["initial"], given["decay"]
    rest = {name: given[name] for name in ("values", "from_state", "written")}
    scanned = chunk_scan(initial, decay, given["update"], **rest)
    expected = looped(initial, decay, given["update"], *rest.values())
    outputs = [t for t in scanned if t is not None]
    assert len(outputs) == len([t for t in expected if t is not None])
    generator = torch.Generator().manual_seed(7)
    seeds = [randn(*t.shape, generator=generator) for t in outputs]
    for got, want in zip(outputs, expected):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    got_grads = torch.autograd.grad(outputs, leaves, seeds)
    want_grads = torch.autograd.grad([t for t in expected if t is not None], leaves, seeds)
    for got, want in zip(got_grads, want_grads):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)


def test_a_broadcast_initial_state_gets_its_summed_gradient() -> None:
    generator = torch.Generator().manual_seed(3)
    initial = randn(1, 1, 3, 2, generator=generator).requires_grad_()
    decay = uniform(2, 3, 4, 1, 1, low=0.5, high=1.0, generator=generator)
    update = randn(2, 3, 4, 3, 2, generator=generator)
    entering, final, reads = chunk_scan(initial, decay, update)
    assert reads is None and entering.shape == (2, 3, 4, 3, 2) and final.shape == (2, 3, 3, 2)
    (grad,) = torch.autograd.grad(final.sum(), initial)
    (want,) = torch.autograd.grad(looped(initial.expand(2, 3, 3, 2), decay, update, None, None, None)[1].sum(), initial)
    torch.testing.assert_close(grad, want)


def test_the_corrected_operands_come_together() -> None:
    with pytest.raises(ValueError, match="together"):
        chunk_scan(torch.zeros(3, 2), torch.ones(4, 1, 1), values=torch.zeros(4, 2, 2))
    with pytest.raises(ValueError, match="never changes"):
        chunk_scan(torch.zeros(3, 2), None)


@pytest.mark.parametrize("form", ["decay", "delta", "generalized"])
def test_no_decay_equals_a_decay_of_one(form: str) -> None:
    """DeltaNet's scan passes no decay: the same states, reads and gradients as ``D_n = 1``."""
    given = operands(form, 1, torch.Generator().manual_seed(11))
    leaves = [t for name, t in given.items() if t is not None and name != "decay"]
    rest = {name: given[name] for name in ("values", "from_state", "written")}
    ones = torch.ones_like(given["decay"])
    without = [t for t in chunk_scan(given["initial"], None, given["update"], **rest) if t is not None]
    with_ones = [t for t in chunk_scan(given["initial"], ones, given["update"], **rest) if t is not None]
    seeds = [torch.randn_like(t) for t in without]
    for got, want in zip(without, with_ones):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    for got, want in zip(torch.autograd.grad(without, leaves, seeds), torch.autograd.grad(with_ones, leaves, seeds)):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
