"""flash-linear-attention's Triton chunk kernels behind the zoo's recurrences (``fla-core``, optional).

A recurrent family's ``prepare`` returns what its recurrence reads (the zoo's ``Recurrence``:
``q``, ``k``, ``v`` ``(B, H, T, d)``, ``log_decay``, ``beta``); the zoo runs it in its own
chunkwise form (:mod:`~zoo.attention.kernels.decay`, :mod:`~zoo.attention.kernels.delta_rule`).
:func:`fla_chunk` runs the same recurrence in flash-linear-attention's fused kernels, which keep the
state in float32 on chip and were built to beat FlashAttention at long lengths:

=============================  ================================  ======================================
the recurrence                 family                            fla op (``fla.ops...``)
=============================  ================================  ======================================
scalar decay, constant a head  retention (no padding)            ``simple_gla.chunk_simple_gla``, ``g_gamma``
scalar decay per step          Mamba-2, retention with padding   ``simple_gla.chunk_simple_gla``, ``g``
decay per key dimension        GLA                               ``gla.chunk_gla``, ``g``
delta rule, 16-bit             DeltaNet                          ``delta_rule.chunk_delta_rule``
delta rule, float32            DeltaNet                          ``gated_delta_rule.chunk_gated_delta_rule``, ``g = 0``
decayed delta rule             Gated DeltaNet                    ``gated_delta_rule.chunk_gated_delta_rule``
``n`` delta steps a token      Gated DeltaProduct                the delta rule's op on ``n * T`` steps
diagonal plus rank one         Kimi Delta Attention, RWKV-7      ``generalized_delta_rule.chunk_dplr_delta_rule``
=============================  ================================  ======================================

The last two rows are the recurrences of 2025 (:mod:`zoo.attention.modules.recurrence`):

* A :class:`~zoo.attention.modules.recurrence.ProductRecurrence` (Gated DeltaProduct) runs as fla's own
  ``chunk_gated_delta_product`` lays it out: each token's ``n`` delta-rule steps one after
  another, the decay at the first and the query at the last
  (:func:`~zoo.attention.kernels.delta_product.over_steps`), in the delta rule's op above. fla's
  ``chunk_gated_delta_product`` itself is not called: it refuses float32 (an assertion in 0.6.0),
  in which the zoo's layers run their recurrences, and it is the same interleaving.
* A :class:`~zoo.attention.modules.recurrence.LowRankRecurrence` (``S_t = (Diag(exp(g_t)) + a_t^T b_t)
  S_{t-1} + k_t^T v_t``: KDA, RWKV-7) is fla's DPLR delta rule, whose reference (``naive.py``:
  ``S_t = exp(gk_t) S_{t-1} + beta_t^T (alpha_t S_{t-1}) + k_t^T v_t``, its arguments named ``a``
  for ``alpha`` and ``b`` for ``beta``) names the two vectors the other way round: fla's ``a`` is
  the zoo's ``b`` (the row that reads the state) and fla's ``b`` the zoo's ``a``. KDA is this
  recurrence with ``a = -beta k`` and ``b = exp(g) k`` (its ``prepare`` says why); fla's
  ``chunk_kda`` takes ``k``, ``g`` and ``beta`` apart, which the low-rank form does not keep, so
  KDA runs in the DPLR op, exact to rounding.

A decaying state with a signed decay (Mamba-2's ``negative_eigenvalues``, a ``Recurrence`` with
``negative_decay``) has no op here: fla's ops read log decays, which have no sign
(:data:`SIGNED_DECAY_REFUSAL`; :func:`fla_refusal` refuses it). The delta rule's ``beta`` in ``(0,
2)`` (the delta-rule families' ``negative_eigenvalues``) needs nothing: fla's ops take any ``beta``.

What the conversion does, and why it is exact (the adapter's tests run each family against the
zoo's chunkwise form through stand-ins of these ops written from fla's documentation):

* Both keep the state as ``(dk, dv)`` and read it as ``o_t = scale * q_t S_t``, with
  ``S_t = exp(g_t) S_{t-1} + k_t^T v_t`` (``g`` a log decay *per step*, summed inside the kernel:
  the zoo's ``log_decay``) and the delta rule ``S_t = exp(g_t) S_{t-1} + k_t^T beta_t (v_t - k_t
  exp(g_t) S_{t-1})``, as :mod:`~zoo.attention.kernels.delta_rule` writes it.
* Layout: fla takes ``(B, T, H, d)``, gates ``(B, T, H)`` or ``(B, T, H, dk)``, states
  ``(B, H, dk, dv)``; the zoo's ``(B, H, T, d)`` is transposed on the way in and out.
* Scale: fla multiplies the queries by ``scale``, ``dk ** -0.5`` by default; the families have
  scaled them already in ``prepare``, so ``scale=1.0``. Keys: the delta-rule families
  L2-normalize them in ``prepare``, so fla's in-kernel normalization stays off.
* Mamba-2's queries and keys, shared by groups of value heads, are repeated to one per value
  head (fla's decaying ops take as many query heads as value heads).
* Key padding (``mask`` ``(B, 1 or H, T)``, True at real tokens, anywhere in the sequence) is
  applied as the zoo's kernels apply it (:func:`~zoo.attention.kernels.chunking.zero_padding`):
  zero keys, queries, values, betas and log decays make a padded step an identity step with a
  zero output, in any op. fla's own answer to padding is ``cu_seqlens`` (sequences packed into
  one row, ``B = 1``), which saves the padded steps' work but takes right padding only and
  repacks the batch; zeroing is exact for left and right padding alike and keeps the batch as it
  is. A mask that differs per query has no meaning for a recurrence and is refused.
* Dtypes: the ops read ``dtype`` (default: the recurrence's, float32 in the zoo's layers) and
  return the output and final state in the recurrence's dtype. fla runs float16, bfloat16 and
  float32, the state in float32 (``promote_types(dtype, float32)`` here). ``chunk_delta_rule``
  refuses float32 (an assertion in fla 0.6.0), so an ungated delta rule in float32 runs in
  ``chunk_gated_delta_rule`` with zero log decays, which is the same recurrence. Errors are
  rounding inside fla's chunks (its matrix products may run in TF32 on float32 inputs);
  ``tests/cuda/test_fla_cuda.py`` holds them to the tolerances of fla's own tests (a relative
  RMS error of 0.005 on outputs and states).
* fla chooses its own chunk size (64): the zoo's ``chunk_size`` does not enter, and the result
  does not depend on it beyond rounding.
* Gradients flow to everything the recurrence reads (fla's ops are autograd functions), except
  through ``g_gamma``: a per-head decay that requires a gradient is passed as ``g`` instead.

:func:`fla_available` says whether the kernels can run: ``fla-core`` (and Triton) installed and a
CUDA device. Written for fla-core 0.6.0 (pure Python; ``torch>=2.7``, ``triton>=3.3``, which the
GPU machine's PyTorch 2.11 and Triton 3.6 meet), its signatures read from that release;
``pip install attention-zoo[fla]``.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
from collections.abc import Callable
from importlib.metadata import PackageNotFoundError, version
from typing import Protocol

import torch
from torch import Tensor

from zoo.attention.kernels.chunking import zero_padding
from zoo.attention.kernels.delta_product import over_steps

__all__ = [
    "SIGNED_DECAY_REFUSAL",
    "LowRankInputs",
    "ProductInputs",
    "RecurrenceInputs",
    "fla_available",
    "fla_chunk",
    "fla_refusal",
]

SIGNED_DECAY_REFUSAL = (
    "its kernels take decays in (0, 1], and negative_eigenvalues makes this decay signed; run the zoo's forms "
    "(backend 'auto' or 'zoo')"
)
"""Why fla cannot run a signed decay (Mamba-2's ``negative_eigenvalues``): its ops read log decays, so a
negative decay has no input; the delta rule's ``beta`` in ``(0, 2)`` it does run."""


class RecurrenceInputs(Protocol):
    """What :func:`fla_chunk` reads of a recurrence (the zoo's ``Recurrence`` has it)."""

    q: Tensor
    k: Tensor
    v: Tensor
    log_decay: Tensor | None
    beta: Tensor | None
    negative_decay: Tensor | None


class LowRankInputs(Protocol):
    """A diagonal-plus-rank-one recurrence (the zoo's ``LowRankRecurrence``): besides
    :class:`RecurrenceInputs`' ``q``, ``k``, ``v`` and ``log_decay`` (here ``(B, H, T, dk)``), the
    rank-one correction's ``a`` and ``b`` ``(B, H, T, dk)``."""

    q: Tensor
    k: Tensor
    v: Tensor
    log_decay: Tensor
    a: Tensor
    b: Tensor


class ProductInputs(Protocol):
    """``n`` delta-rule steps a token (the zoo's ``ProductRecurrence``): ``q`` ``(B, H, T, dk)``,
    ``k`` ``(B, H, T, n, dk)``, ``v`` ``(B, H, T, n, dv)``, ``beta`` ``(B, H, T, n)``, ``log_decay``
    ``(B, H, T)`` or None."""

    q: Tensor
    k: Tensor
    v: Tensor
    beta: Tensor
    log_decay: Tensor | None


def fla_available(device: torch.device | str) -> bool:
    """Whether fla's kernels can run on ``device``: a CUDA device, with ``fla-core`` and Triton installed."""
    if torch.device(device).type != "cuda":
        return False
    return all(importlib.util.find_spec(name) is not None for name in ("fla", "triton"))


#: Triton releases whose code for fla's gated ``chunk_bwd_dqkwg`` is wrong on Hopper (fla's issue
#: #640): fla 0.6.0 refuses that backward there unless tilelang stands in for Triton
_HOPPER_BAD_TRITON = ("3.4.0", "3.7.1")


@functools.cache
def _gated_backward_broken(device: torch.device) -> bool:
    """Whether fla refuses its gated kernels' backward on ``device`` (see :func:`fla_refusal`)."""
    from packaging.version import Version  # fla-core's dependency, as Triton is

    if (
        device.type != "cuda"
        or torch.cuda.get_device_capability(device)[0] != 9
        or importlib.util.find_spec("tilelang") is not None
    ):
        return False
    try:
        triton = Version(version("triton"))
    except PackageNotFoundError:
        return False
    return Version(_HOPPER_BAD_TRITON[0]) <= triton < Version(_HOPPER_BAD_TRITON[1])


def _gated_backward(recurrence: RecurrenceInputs | LowRankInputs | ProductInputs, mask: Tensor | None) -> bool:
    """Whether fla's backward of this recurrence runs its gated ``chunk_bwd_dqkwg``: the delta rule
    in ``chunk_gated_delta_rule`` (every delta rule here but an ungated one in 16 bits, Gated
    DeltaProduct's too) and a scalar decay passed as ``g`` (Mamba-2; retention with padding)."""
    if hasattr(recurrence, "a"):
        return False  # the DPLR op has a backward of its own
    if recurrence.beta is not None:
        return recurrence.log_decay is not None or recurrence.q.dtype not in (torch.float16, torch.bfloat16)
    log_decay = recurrence.log_decay
    return log_decay is not None and log_decay.shape[-1] == 1 and not (mask is None and _per_head(log_decay))


def fla_refusal(recurrence: RecurrenceInputs | LowRankInputs | ProductInputs, mask: Tensor | None) -> str | None:
    """Why fla's kernels cannot run this call of :func:`fla_chunk` here, or None.

    fla 0.6.0 raises in the backward of its gated chunk kernels on Hopper GPUs (the H100 and
    H200) under Triton 3.4 to 3.7.0, whose code for them is wrong there (fla's issue #640), unless
    tilelang is installed; PyTorch 2.11's CUDA builds bring Triton 3.6. A call that will need that
    backward (gradients enabled, an input that requires one) is refused, and ``auto`` runs the
    zoo's form instead; a forward without gradients still runs in fla's kernels.

    A signed decay (:data:`SIGNED_DECAY_REFUSAL`) is refused always.
    """
    if getattr(recurrence, "negative_decay", None) is not None:
        return SIGNED_DECAY_REFUSAL
    q = recurrence.q
    inputs = (q, recurrence.k, recurrence.v, recurrence.log_decay, getattr(recurrence, "beta", None))
    if not torch.is_grad_enabled() or not any(x is not None and x.requires_grad for x in inputs):
        return None
    if not _gated_backward(recurrence, mask) or not _gated_backward_broken(q.device):
        return None
    return (
        "fla 0.6.0 refuses the backward of its gated kernels on Hopper GPUs under Triton < 3.7.1 "
        "(its issue #640); install triton>=3.7.1 or tilelang, or run without gradients"
    )


def fla_chunk(
    recurrence: RecurrenceInputs | LowRankInputs | ProductInputs,
    initial_state: Tensor | None = None,
    mask: Tensor | None = None,
    *,
    dtype: torch.dtype | None = None,
) -> tuple[Tensor, Tensor]:
    """The recurrence's output and final state from ``initial_state``, in fla's chunk kernels.

    Computes what the zoo's ``Recurrence.chunkwise(chunk_size, initial_state, mask)`` computes
    (see the module docstring for the op each recurrence takes, and why the result is the same).

    Args:
        recurrence: ``q``, ``k`` ``(B, G, T, dk)`` (``G`` dividing ``H``; Mamba-2's groups),
            ``v`` ``(B, H, T, dv)``, ``log_decay`` broadcastable to ``(B, H, T, 1 or dk)``
            without ``beta``, to ``(B, H, T)`` (or None) with ``beta`` ``(B, H, T)``; or a
            :class:`LowRankInputs` or a :class:`ProductInputs`.
        initial_state: ``(B, H, dk, dv)``; zeros if None.
        mask: Key padding ``(B, 1 or H, T)``, True at real tokens; None for none.
        dtype: What fla's kernels read; None: the recurrence's dtype.

    Returns:
        The output ``(B, H, T, dv)`` and the final state ``(B, H, dk, dv)``, in the recurrence's dtype.

    Raises:
        ValueError: ``mask`` differs per query (it must have the dimensions of ``(B, H, T)``), or the
            decay is signed (:data:`SIGNED_DECAY_REFUSAL`).
    """
    if getattr(recurrence, "negative_decay", None) is not None:
        raise ValueError(f"fla_chunk cannot run this recurrence: {SIGNED_DECAY_REFUSAL}.")
    q = recurrence.q
    if mask is not None and mask.dim() != q.dim() - 1:
        raise ValueError(
            f"fla_chunk takes a key padding mask (B, 1 or H, T), the same for every query; got shape {tuple(mask.shape)}."
        )
    compute = dtype or q.dtype
    state = None if initial_state is None else initial_state.to(torch.promote_types(compute, torch.float32))
    options = {"scale": 1.0, "initial_state": state, "output_final_state": True}
    if hasattr(recurrence, "a"):
        output, final = _low_rank(recurrence, mask, compute, options)  # type: ignore[arg-type]
    elif recurrence.k.dim() == q.dim() + 1:  # keys (B, H, T, n, dk): n steps a token
        output, final = over_steps(
            lambda *inputs, mask: _delta_rule(*inputs, mask, compute, options),
            q, recurrence.k, recurrence.v, recurrence.beta, recurrence.log_decay, mask,  # type: ignore[arg-type]
        )  # fmt: skip
    else:
        output, final = _single(recurrence, mask, compute, options)  # type: ignore[arg-type]
    return output.to(q.dtype), final.to(q.dtype)


def _single(
    recurrence: RecurrenceInputs, mask: Tensor | None, compute: torch.dtype, options: dict[str, object]
) -> tuple[Tensor, Tensor]:
    """A decaying state or the (decayed) delta rule, with Mamba-2's shared queries and keys repeated."""
    q, k, v, beta = recurrence.q, recurrence.k, recurrence.v, recurrence.beta
    groups = v.shape[-3] // q.shape[-3]
    if groups > 1:
        q, k = q.repeat_interleave(groups, dim=-3), k.repeat_interleave(groups, dim=-3)
    if beta is None:
        return _decaying(q, k, v, recurrence.log_decay, mask, compute, options)
    return _delta_rule(q, k, v, beta, recurrence.log_decay, mask, compute, options)


def _delta_rule(
    q: Tensor, k: Tensor, v: Tensor, beta: Tensor, log_decay: Tensor | None, mask: Tensor | None,
    compute: torch.dtype, options: dict[str, object],
) -> tuple[Tensor, Tensor]:  # fmt: skip
    """The (decayed) delta rule: ``chunk_delta_rule`` ungated in 16 bits, else ``chunk_gated_delta_rule``."""
    ungated_16bit = log_decay is None and compute in (torch.float16, torch.bfloat16)
    full = v.shape[:-1]
    log_decay = q.new_zeros(()) if log_decay is None else log_decay
    q, k, v, beta, log_decay = zero_padding(
        mask, q, k, v, torch.broadcast_to(beta, full), torch.broadcast_to(log_decay, full)
    )
    q, k, v, beta, log_decay = (_fla_layout(x, compute) for x in (q, k, v, beta, log_decay))
    if ungated_16bit:
        output, final = _op("delta_rule", "chunk_delta_rule")(q, k, v, beta, **options)
    else:
        output, final = _op("gated_delta_rule", "chunk_gated_delta_rule")(q, k, v, log_decay, beta, **options)
    return output.transpose(1, 2), final


def _low_rank(
    recurrence: LowRankInputs, mask: Tensor | None, compute: torch.dtype, options: dict[str, object]
) -> tuple[Tensor, Tensor]:
    """A diagonal-plus-rank-one recurrence in ``chunk_dplr_delta_rule`` (fla's ``a`` is the zoo's ``b``)."""
    r = recurrence
    q, k, v, a, b, log_decay = zero_padding(mask, r.q, r.k, r.v, r.a, r.b, r.log_decay)
    q, k, v, a, b, log_decay = (_fla_layout(x, compute) for x in (q, k, v, a, b, log_decay))
    output, final = _op("generalized_delta_rule", "chunk_dplr_delta_rule")(q, k, v, b, a, log_decay, **options)
    return output.transpose(1, 2), final


def _decaying(
    q: Tensor, k: Tensor, v: Tensor, log_decay: Tensor | None, mask: Tensor | None, compute: torch.dtype,
    options: dict[str, object],
) -> tuple[Tensor, Tensor]:  # fmt: skip
    """A decaying state: ``chunk_simple_gla`` for a scalar decay, ``chunk_gla`` for one per key dimension."""
    if log_decay is None:
        raise ValueError("fla_chunk: a recurrence without beta (a decaying state) needs a log_decay.")
    batch, heads, steps = v.shape[:-1]
    width = log_decay.shape[-1]
    if width == 1 and mask is None and _per_head(log_decay):  # retention: one decay a head, every step
        gamma = torch.broadcast_to(log_decay.reshape(-1), (heads,)).to(torch.promote_types(compute, torch.float32))
        q, k, v = (_fla_layout(x, compute) for x in (q, k, v))
        output, final = _op("simple_gla", "chunk_simple_gla")(q, k, v, g_gamma=gamma, **options)
        return output.transpose(1, 2), final
    log_decay = torch.broadcast_to(log_decay, (batch, heads, steps, width))
    q, k, v, log_decay = zero_padding(mask, q, k, v, log_decay)
    if width == 1:
        q, k, v, log_decay = (_fla_layout(x, compute) for x in (q, k, v, log_decay.squeeze(-1)))
        output, final = _op("simple_gla", "chunk_simple_gla")(q, k, v, g=log_decay, **options)
    else:
        q, k, v, log_decay = (_fla_layout(x, compute) for x in (q, k, v, log_decay))
        output, final = _op("gla", "chunk_gla")(q, k, v, log_decay, **options)
    return output.transpose(1, 2), final


def _per_head(log_decay: Tensor) -> bool:
    """Whether a scalar log decay is one number a head, the same for every sequence and step, and
    needs no gradient (fla's ``g_gamma`` gets none)."""
    shape = (1,) * (4 - log_decay.dim()) + tuple(log_decay.shape)
    return shape[0] == 1 and shape[2] == 1 and not log_decay.requires_grad


def _fla_layout(x: Tensor, dtype: torch.dtype) -> Tensor:
    """``(B, H, T, ...)`` -> fla's ``(B, T, H, ...)`` in ``dtype``."""
    return x.transpose(1, 2).to(dtype)


def _op(module: str, name: str) -> Callable[..., tuple[Tensor, Tensor]]:
    """``fla.ops.<module>.<name>``, imported on first use (fla-core is an optional extra)."""
    return getattr(importlib.import_module(f"fla.ops.{module}"), name)
