"""transformers' gated delta rule (Qwen3-Next, Qwen3.5, Olmo hybrid) and Kimi Delta Attention kernel
functions on the zoo's delta-rule and generalized delta-rule kernels (the package docstring says
what maps to what)."""

from __future__ import annotations

from typing import Any

from torch import Tensor

from zoo.attention.kernels.delta_rule import delta_rule_chunkwise, delta_rule_recurrent
from zoo.attention.kernels.dplr import dplr_chunkwise, dplr_recurrent
from zoo.integrations.hf_kernels.layouts import compute_dtype, heads_first, l2norm, refuse_packed, returned, state_in

__all__ = [
    "chunk_gated_delta_rule",
    "chunk_kimi_delta_attention",
    "recurrent_gated_delta_rule",
    "recurrent_kimi_delta_attention",
]


def _delta_inputs(
    query: Tensor, key: Tensor, value: Tensor, normalize: bool, scale: float | None
) -> tuple[Tensor, Tensor, Tensor]:
    """Queries, keys and values heads first in the compute dtype, query and key heads repeated to
    the value heads, L2-normalized if asked, queries scaled."""
    dtype = compute_dtype(query)
    groups = value.shape[2] // key.shape[2]
    q, k, v = (heads_first(x, dtype) for x in (query, key, value))
    if groups > 1:
        q, k = (x.repeat_interleave(groups, dim=1) for x in (q, k))
    if normalize:
        q, k = l2norm(q), l2norm(k)
    return q * (q.shape[-1] ** -0.5 if scale is None else scale), k, v


def chunk_gated_delta_rule(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    g: Tensor,
    beta: Tensor,
    chunk_size: int = 64,
    initial_state: Tensor | None = None,
    output_final_state: bool = False,
    use_qk_l2norm_in_kernel: bool = False,
    scale: float | None = None,
    **kwargs: Any,
) -> tuple[Tensor, Tensor | None]:
    """transformers' ``torch_chunk_gated_delta_rule`` on the zoo's chunkwise delta rule.

    Queries and keys ``(B, T, Hk, dk)``, values ``(B, T, H, dv)`` (``H`` a multiple of ``Hk``), ``g``
    (log decays) and ``beta`` ``(B, T, H)``, state ``(B, H, dk, dv)``. Returns the output
    ``(B, T, H, dv)`` in the queries' dtype and the final state (or None).
    """
    refuse_packed(kwargs)
    q, k, v = _delta_inputs(query, key, value, use_qk_l2norm_in_kernel, scale)
    output, state = delta_rule_chunkwise(
        q,
        k,
        v,
        beta.transpose(1, 2).to(v.dtype),
        g.transpose(1, 2).to(v.dtype),
        chunk_size=chunk_size,
        initial_state=state_in(initial_state, v),
    )
    return returned(output, state, query.dtype, output_final_state)


def recurrent_gated_delta_rule(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    g: Tensor,
    beta: Tensor,
    initial_state: Tensor | None = None,
    output_final_state: bool = False,
    use_qk_l2norm_in_kernel: bool = False,
    scale: float | None = None,
    **kwargs: Any,
) -> tuple[Tensor, Tensor | None]:
    """transformers' ``torch_recurrent_gated_delta_rule`` on the zoo's recurrent delta rule; args
    as :func:`chunk_gated_delta_rule`'s."""
    refuse_packed(kwargs)
    q, k, v = _delta_inputs(query, key, value, use_qk_l2norm_in_kernel, scale)
    output, state = delta_rule_recurrent(
        q,
        k,
        v,
        beta.transpose(1, 2).to(v.dtype),
        g.transpose(1, 2).to(v.dtype),
        state=state_in(initial_state, v),
    )
    return returned(output, state, query.dtype, output_final_state)


def _kda_inputs(
    query: Tensor, key: Tensor, value: Tensor, g: Tensor, beta: Tensor, normalize: bool, scale: float | None
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    """The generalized delta rule's ``q, k, v, a, b, log_decay`` for Kimi Delta Attention."""
    q, k, v = _delta_inputs(query, key, value, normalize, scale)
    log_decay = heads_first(g, v.dtype)
    beta = heads_first(beta, v.dtype).unsqueeze(-1)
    return q, beta * k, v, -beta * k, k * log_decay.exp(), log_decay


def chunk_kimi_delta_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    g: Tensor,
    beta: Tensor,
    chunk_size: int = 64,
    initial_state: Tensor | None = None,
    output_final_state: bool = False,
    use_qk_l2norm_in_kernel: bool = False,
    scale: float | None = None,
    **kwargs: Any,
) -> tuple[Tensor, Tensor | None]:
    """transformers' ``chunk_kimi_delta_attention`` on the zoo's chunkwise generalized delta rule.

    Queries, keys and ``g`` (log decays per key dimension) ``(B, T, H, dk)``, values ``(B, T, H,
    dv)``, ``beta`` ``(B, T, H)``, state ``(B, H, dk, dv)``. Returns as :func:`chunk_gated_delta_rule`.
    """
    refuse_packed(kwargs)
    inputs = _kda_inputs(query, key, value, g, beta, use_qk_l2norm_in_kernel, scale)
    output, state = dplr_chunkwise(*inputs, chunk_size=chunk_size, initial_state=state_in(initial_state, inputs[2]))
    return returned(output, state, query.dtype, output_final_state)


def recurrent_kimi_delta_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    g: Tensor,
    beta: Tensor,
    initial_state: Tensor | None = None,
    output_final_state: bool = False,
    use_qk_l2norm_in_kernel: bool = False,
    scale: float | None = None,
    **kwargs: Any,
) -> tuple[Tensor, Tensor | None]:
    """transformers' ``recurrent_kimi_delta_attention`` on the zoo's recurrent generalized delta
    rule; args as :func:`chunk_kimi_delta_attention`'s."""
    refuse_packed(kwargs)
    inputs = _kda_inputs(query, key, value, g, beta, use_qk_l2norm_in_kernel, scale)
    output, state = dplr_recurrent(*inputs, state=state_in(initial_state, inputs[2]))
    return returned(output, state, query.dtype, output_final_state)
