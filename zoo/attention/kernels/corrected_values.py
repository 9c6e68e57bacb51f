"""DeltaFormer's delta-corrected values (Zhong, Xu, Ao and Shi, 2025, "Understanding Transformer
from the Perspective of Associative Memory", arXiv 2505.19488): the delta rule's
dual form with a softmax kernel.

Per head, with read vectors ``r_i`` (DeltaFormer's: the keys themselves, ``r_i = k_i``), keys
``k_j``, values ``v_i`` and write strengths ``beta_i``, the value a position writes is its value
less what the memory already returns for it:

    u_i = v_i - beta_i sum_{j < i} p_ij u_j,      p_ij = softmax_{j < i, j visible}(r_i . k_j * scale)

(``u_0 = v_0``; a row that sees no earlier key keeps ``u_i = v_i``). With a linear kernel
``p_ij = r_i . k_j`` this is DeltaNet's ``u``; with softmax it leaves the linear family: ``u`` is
the solution of the unit lower-triangular system ``(I + diag(beta) P) U = V``. Three forms that
agree up to rounding, each continuing ``earlier`` (the ``u`` of ``S`` positions already seen,
whose keys lead ``keys``):

* :func:`corrected_values` with ``chunk_size=None``: the parallel form, one triangular solve over
  the ``(T, T)`` weights of the new positions;
* :func:`corrected_values` with a ``chunk_size`` ``C``: chunk by chunk, each chunk's rows of ``P``
  (``(C, S + T)``: softmax normalizes over every earlier key, so a row is formed whole) with the
  earlier chunks' ``u`` on the right-hand side and a ``C x C`` solve (fla's
  ``fla/ops/deltaformer/parallel.py`` runs the same scheme in Triton, its ``invcum`` the solve);
* :func:`corrected_values_recurrent`: one position at a time, the decoding form.

``visible`` (boolean, broadcastable to ``(B, H, T, S + T)``, True where a key may be read, None:
every key) hides padding; the strict causality ``j < S + i`` is added here.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["corrected_values", "corrected_values_recurrent", "write_weights"]


def write_weights(read: Tensor, keys: Tensor, visible: Tensor | None, scale: float) -> Tensor:
    """``p`` ``(B, H, T, S + T)`` of new positions' ``read`` ``(B, H, T, d)`` over ``keys``
    ``(B, H, S + T, d)``: softmax over the visible keys strictly before each position (exactly zero
    elsewhere, and a row with none all zero), in float32 at least."""
    compute = torch.promote_types(read.dtype, torch.float32)
    num_new, num_keys = read.shape[-2], keys.shape[-2]
    before = (
        torch.arange(num_keys, device=read.device)
        < torch.arange(num_keys - num_new, num_keys, device=read.device)[:, None]
    )
    seen = before if visible is None else before & visible
    scores = (read.to(compute) @ keys.to(compute).transpose(-1, -2)) * scale
    weights = torch.softmax(scores.masked_fill(~seen, torch.finfo(compute).min), dim=-1)
    return weights * seen * seen.any(-1, keepdim=True)


def corrected_values(
    read: Tensor,
    keys: Tensor,
    values: Tensor,
    beta: Tensor,
    *,
    scale: float,
    earlier: Tensor | None = None,
    visible: Tensor | None = None,
    chunk_size: int | None = None,
) -> Tensor:
    """``u`` ``(B, H, T, d_v)`` of new positions' ``read`` ``(B, H, T, d)``, ``values``
    ``(B, H, T, d_v)`` and ``beta`` ``(B, H, T)`` after ``earlier`` ``(B, H, S, d_v)`` (None: no
    earlier position), ``keys`` ``(B, H, S + T, d)`` holding the earlier keys then the new ones:
    the parallel form for ``chunk_size`` None, chunk by chunk otherwise (module docstring)."""
    num_new = read.shape[-2]
    size = num_new if chunk_size is None else chunk_size
    if size < 1:
        raise ValueError(f"corrected_values: chunk_size must be a positive integer or None; got {chunk_size}.")
    solved, start = _start(values, earlier)
    for first in range(0, num_new, size):
        last = min(first + size, num_new)
        p = write_weights(
            read[..., first:last, :], keys[..., : start + last, :], _rows(visible, first, last, start), scale
        )
        strength = beta[..., first:last, None].to(solved.dtype)
        right = values[..., first:last, :].to(solved.dtype) - strength * (p[..., : start + first] @ solved)
        system = torch.eye(last - first, dtype=solved.dtype, device=read.device) + strength * p[..., start + first :]
        solved = torch.cat([solved, torch.linalg.solve_triangular(system, right, upper=False, unitriangular=True)], -2)
    return solved[..., start:, :].to(values.dtype)


def corrected_values_recurrent(
    read: Tensor,
    keys: Tensor,
    values: Tensor,
    beta: Tensor,
    *,
    scale: float,
    earlier: Tensor | None = None,
    visible: Tensor | None = None,
) -> Tensor:
    """:func:`corrected_values` one position at a time (the decoding form): each ``u_i`` from the
    ``u`` before it and its own row of weights, no system to solve."""
    solved, start = _start(values, earlier)
    for t in range(read.shape[-2]):
        p = write_weights(
            read[..., t : t + 1, :], keys[..., : start + t + 1, :], _rows(visible, t, t + 1, start), scale
        )
        step = values[..., t : t + 1, :].to(solved.dtype) - beta[..., t, None, None].to(solved.dtype) * (
            p[..., :-1] @ solved
        )
        solved = torch.cat([solved, step], dim=-2)
    return solved[..., start:, :].to(values.dtype)


def _start(values: Tensor, earlier: Tensor | None) -> tuple[Tensor, int]:
    """The ``u`` already solved (in float32 at least) and how many."""
    compute = torch.promote_types(values.dtype, torch.float32)
    solved = values[..., :0, :] if earlier is None else earlier
    return solved.to(compute), solved.shape[-2]


def _rows(visible: Tensor | None, first: int, last: int, start: int) -> Tensor | None:
    """``visible`` at new rows ``first .. last - 1`` and keys up to the last of them."""
    if visible is None:
        return None
    rows = visible[..., first:last, :] if visible.shape[-2] > 1 else visible
    return rows[..., : start + last]
