"""The contract's numerical checks: half precision stays finite and close to float32, and every
input and trainable parameter gets a finite gradient that matches finite differences."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor
from torch.autograd.gradcheck import GradcheckError

from zoo.testing.checks import close
from zoo.testing.harness import Harness
from zoo.testing.report import fail

__all__ = ["check_gradients", "half_precision_check"]

_HALF_TOL = {torch.float16: 1e-2, torch.bfloat16: 6e-2}
#: Keys in the check that every trainable parameter gets a gradient: longer than the gradient
#: check's few tokens, so that a layer's blocks fill (NSA compresses blocks of 8 keys, and at
#: fewer its compression's parameters take no part, as at none of its training lengths).
LEARNING_LENGTH = 32


def half_precision_check(dtype: torch.dtype) -> Callable[[Harness, torch.Generator], None]:
    def check(h: Harness, g: torch.Generator) -> None:
        lq, lk = h.lengths
        module = h.module(dtype)
        reference = copy.deepcopy(module).float()  # the same rounded parameters, computed in float32
        kwargs: dict[str, Any] = {}
        valid_lens = None
        if h.can.supports_padding_mask:
            valid_lens = torch.tensor([lk, 3, 0])
        if h.can.supports_causal:
            kwargs["is_causal"] = True
        inputs = tuple(t.detach().requires_grad_() for t in _unique(h.inputs(lq, lk, g, dtype)))
        tied = _retie(h, inputs)
        output, _ = h(module, tied, valid_lens, **kwargs)
        expected, _ = h(reference, tuple(t.float() for t in tied), valid_lens, **kwargs)
        if output.dtype != dtype:
            fail(f"{dtype} inputs gave a {output.dtype} output.")
        if not torch.isfinite(output).all():
            fail(f"the output in {dtype} has NaN or inf (a fully masked row is included).")
        tol = _HALF_TOL[dtype]
        if not close(output, expected, atol=tol, rtol=tol):
            fail(
                f"the output in {dtype} differs from float32 by up to {float((output.float() - expected).abs().max()):.3g} (tolerance {tol})."
            )
        output.float().square().sum().backward()
        for name, tensor in (*(("an input", t) for t in inputs), *module.named_parameters()):
            if tensor.grad is not None and not torch.isfinite(tensor.grad).all():
                fail(f"the gradient of {name} in {dtype} has NaN or inf.")

    return check


def _unique(tensors: tuple[Tensor, Tensor, Tensor]) -> tuple[Tensor, ...]:
    """The distinct tensors among queries, keys and values (one for ``x``, two for ``x_memory``)."""
    return tuple({id(t): t for t in tensors}.values())


def _retie(h: Harness, distinct: tuple[Tensor, ...]) -> tuple[Tensor, Tensor, Tensor]:
    """Queries, keys and values from the distinct tensors, tied as the layer's forward ties them."""
    if h.form == "x":
        return distinct[0], distinct[0], distinct[0]
    if h.form == "x_memory":
        return distinct[0], distinct[1], distinct[1]
    return distinct[0], distinct[1], distinct[2]


def check_gradients(h: Harness, g: torch.Generator) -> None:
    lq, lk = (4, 4) if h.lengths[0] == h.lengths[1] else (3, 4)  # small: gradcheck runs in float64
    module = h.module(torch.float64)
    inputs, valid_lens = _backward(h, module, lq, lk, g, torch.float64)
    values = inputs[-1]
    if values.grad is None or not torch.any(values.grad != 0):
        fail("the values get no gradient.")
    for tensor in inputs:
        if tensor.grad is not None and not torch.isfinite(tensor.grad).all():
            fail("an input's gradient has NaN or inf (a fully masked row is included).")
    for name, param in module.named_parameters():
        if param.grad is not None and not torch.isfinite(param.grad).all():
            fail(f"the trainable parameter {name!r} gets a non-finite gradient.")
    _check_every_parameter_learns(h, g)
    fresh = tuple(t.detach().requires_grad_() for t in inputs)

    def forward(*tensors: Tensor) -> Tensor:
        return h(module, _retie(h, tensors), valid_lens)[0]

    try:
        torch.autograd.gradcheck(forward, fresh, eps=1e-6, atol=1e-5, rtol=1e-3, fast_mode=True)
    except GradcheckError as error:
        fail(f"analytical gradients differ from finite differences in float64: {str(error).splitlines()[0]}")


def _backward(
    h: Harness, module: torch.nn.Module, lq: int, lk: int, g: torch.Generator, dtype: torch.dtype
) -> tuple[tuple[Tensor, ...], Tensor | None]:
    """Backpropagate a random projection of ``module``'s output over new inputs of ``lq`` queries
    and ``lk`` keys (a full, a short and an empty row where the variant takes padding); returns
    the distinct inputs, holding their gradients, and the lengths used."""
    inputs = tuple(t.detach().requires_grad_() for t in _unique(h.inputs(lq, lk, g, dtype)))
    valid_lens = torch.tensor([lk, 2, 0]) if h.can.supports_padding_mask else None
    output, _ = h(module, _retie(h, inputs), valid_lens)
    output.mul(torch.randn(output.shape, generator=g, dtype=dtype).to(output.device)).sum().backward()
    return inputs, valid_lens


def _check_every_parameter_learns(h: Harness, g: torch.Generator) -> None:
    """Every trainable parameter gets a finite gradient from a forward over ``LEARNING_LENGTH``
    keys (fewer where a module was built for at most ``max_len``), padded rows included: one
    that gets none stops DistributedDataParallel."""
    module = h.module()
    lq, lk = h.lengths
    limits = [m.max_len for m in module.modules() if isinstance(getattr(m, "max_len", None), int)]
    longest = min([LEARNING_LENGTH, *limits])  # a layer built for at most max_len keys (Linformer) gets those
    _backward(h, module, max(1, lq * longest // lk), longest, g, torch.float32)
    for name, param in module.named_parameters():
        if param.requires_grad and (param.grad is None or not torch.isfinite(param.grad).all()):
            fail(f"the trainable parameter {name!r} gets {'no' if param.grad is None else 'a non-finite'} gradient.")
