"""DeltaProduct (Siems et al., 2025): ``n`` steps of the delta rule per token, a product of ``n``
generalized Householder transitions, decayed once per token (Gated DeltaProduct).

In the kernels' orientation (row vectors, a ``(dk, dv)`` state, ``o_t = q_t S_t``), token ``t``
with keys ``k_{t,1..n}``, values ``v_{t,1..n}`` and strengths ``beta_{t,1..n}``::

    H_{t,0} = a_t S_{t-1}
    H_{t,j} = (I - beta_{t,j} k_{t,j}^T k_{t,j}) H_{t,j-1} + beta_{t,j} k_{t,j}^T v_{t,j},   j = 1..n
    S_t = H_{t,n},        o_t = q_t S_t

so the state's transition is ``prod_j (I - beta_{t,j} k_{t,j}^T k_{t,j})`` times the decay: with
``beta`` in ``(0, 2)`` its eigenvalues reach ``[-1, 1]`` and it can rotate and reflect, which is
what the paper adds to DeltaNet (``n = 1`` is Gated DeltaNet).

That is the delta rule (:mod:`~zoo.attention.kernels.delta_rule`) over ``n * T`` steps: token
``t``'s ``n`` steps in turn, the decay at the first of them, its query at the last (zero queries at
the others, whose outputs are dropped), as flash-linear-attention's ``gated_delta_product`` lays
them out. So each form here is the delta rule's form on the interleaved steps, and as exact:

* :func:`delta_product_recurrent`: one step at a time, ``n`` per token; the form for decoding;
* :func:`delta_product_chunkwise`: the WY form in chunks of ``chunk_size`` tokens
  (``n * chunk_size`` steps); ``chunk_size=None`` is the parallel form;
* :func:`delta_product_weights`: the parallel form's weights, ``(T, T)``: for each query token,
  the weights of each earlier token's ``n`` steps, summed. With ``n`` values per token these are a
  heatmap of how much each token's writes reach a query, not a matrix the values multiply (they do
  when a token's ``n`` values are equal).

Conventions: queries ``(*batch, T, dk)``, keys ``(*batch, T, n, dk)``, values ``(*batch, T, n,
dv)``, ``beta`` ``(*batch, T, n)``, ``log_decay`` ``(*batch, T)`` or None (no decay), state
``(*batch, dk, dv)``; ``mask`` ``(*batch, T)`` (or broadcastable with as many dimensions) True at
real tokens: a padded token's ``n`` steps are identity steps. Callers L2-normalize the keys and
scale the queries.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch.nn.functional as F
from torch import Tensor

from zoo.attention.kernels.delta_rule import delta_rule_chunkwise, delta_rule_recurrent, delta_rule_weights

__all__ = ["delta_product_chunkwise", "delta_product_recurrent", "delta_product_weights", "over_steps"]


def _interleaved(
    q: Tensor, k: Tensor, v: Tensor, beta: Tensor, log_decay: Tensor | None, mask: Tensor | None
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor | None, Tensor | None]:
    """The token's ``n`` steps laid out one after another: ``n * T`` steps of the delta rule."""
    steps = k.shape[-2]
    q = F.pad(q.unsqueeze(-2), (0, 0, steps - 1, 0)).flatten(-3, -2)  # the query at each token's last step
    k, v, beta = k.flatten(-3, -2), v.flatten(-3, -2), beta.flatten(-2)
    if log_decay is not None:  # the decay at each token's first step
        log_decay = F.pad(log_decay.unsqueeze(-1), (0, steps - 1)).flatten(-2)
    if mask is not None:
        mask = mask.repeat_interleave(steps, dim=-1)
    return q, k, v, beta, log_decay, mask


def _per_token(output: Tensor, steps: int) -> Tensor:
    """The outputs at each token's last step: ``(*batch, n * T, dv)`` -> ``(*batch, T, dv)``."""
    return output.unflatten(-2, (-1, steps))[..., -1, :]


def over_steps(
    form: Callable[..., tuple[Tensor, Tensor]],
    q: Tensor,
    k: Tensor,
    v: Tensor,
    beta: Tensor,
    log_decay: Tensor | None,
    mask: Tensor | None,
    **options: Any,
) -> tuple[Tensor, Tensor]:
    """The delta rule's ``form`` over the interleaved steps; its outputs at each token's last step.

    ``form(q, k, v, beta, log_decay, mask=..., **options) -> (output, state)`` is any form of the
    delta rule on ``(*batch, steps, ...)`` inputs: the zoo's, or flash-linear-attention's kernels
    (:mod:`~zoo.attention.kernels.fla`)."""
    steps = k.shape[-2]
    q, k, v, beta, log_decay, mask = _interleaved(q, k, v, beta, log_decay, mask)
    output, state = form(q, k, v, beta, log_decay, mask=mask, **options)
    return _per_token(output, steps), state


def delta_product_chunkwise(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    beta: Tensor,
    log_decay: Tensor | None = None,
    *,
    chunk_size: int | None = 64,
    initial_state: Tensor | None = None,
    mask: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """The chunkwise form over chunks of ``chunk_size`` tokens (None: the parallel form).

    Returns:
        ``(output, final_state)``: ``(*batch, T, dv)`` and ``(*batch, dk, dv)``.
    """
    size = None if chunk_size is None else chunk_size * k.shape[-2]
    return over_steps(
        delta_rule_chunkwise, q, k, v, beta, log_decay, mask, chunk_size=size, initial_state=initial_state
    )


def delta_product_recurrent(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    beta: Tensor,
    log_decay: Tensor | None = None,
    *,
    state: Tensor | None = None,
    mask: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """The recurrent form from ``state`` (zeros if None): ``n`` delta-rule steps per token; returns
    as :func:`delta_product_chunkwise`."""
    return over_steps(delta_rule_recurrent, q, k, v, beta, log_decay, mask, state=state)


def delta_product_weights(
    q: Tensor, k: Tensor, beta: Tensor, log_decay: Tensor | None = None, *, mask: Tensor | None = None
) -> Tensor:
    """The parallel form's ``(*batch, T, T)`` weights, summed over each key token's ``n`` steps (see
    the module docstring); lower triangular."""
    steps = k.shape[-2]
    q, k, _, beta, log_decay, mask = _interleaved(q, k, k, beta, log_decay, mask)
    weights = delta_rule_weights(q, k, beta, log_decay, mask=mask)  # (*batch, nT, nT)
    return _per_token(weights, steps).unflatten(-1, (-1, steps)).sum(-1)
