"""transformers' Mamba-2 kernel functions (Mamba-2, Falcon-H1, Bamba, ...) on the zoo's scalar-decay
kernels (the package docstring says what maps to what)."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from zoo.attention.kernels.decay import decay_chunkwise, decay_recurrent
from zoo.errors import ConfigurationError
from zoo.integrations.hf_kernels.layouts import compute_dtype, heads_first, refuse_packed

__all__ = ["mamba2_chunk_scan", "mamba2_selective_state_update"]


def _step_sizes(dt: Tensor, dt_bias: Tensor | None, softplus: bool) -> Tensor:
    if dt_bias is not None:
        dt = dt + dt_bias.to(dt.dtype)
    return F.softplus(dt) if softplus else dt


def _gated(output: Tensor, z: Tensor | None) -> Tensor:
    """mamba_ssm's optional ``y * silu(z)`` (transformers' layers pass ``z=None``)."""
    return output if z is None else output * F.silu(z.to(output.dtype))


def mamba2_chunk_scan(
    hidden_states: Tensor,
    dt: Tensor,
    A: Tensor,
    B: Tensor,
    C: Tensor,
    chunk_size: int,
    D: Tensor | None = None,
    dt_bias: Tensor | None = None,
    initial_states: Tensor | None = None,
    dt_softplus: bool = False,
    dt_limit: tuple[float, float] = (0.0, float("inf")),
    return_final_states: bool = False,
    z: Tensor | None = None,
    **kwargs: Any,
) -> Tensor | tuple[Tensor, Tensor]:
    """transformers' ``mamba2_chunk_scan`` on the zoo's chunkwise scalar-decay kernel.

    ``hidden_states`` ``(B, T, H, P)``, ``dt`` ``(B, T, H)``, ``A`` ``(H,)``, ``B`` and ``C`` ``(B, T,
    G, N)``, ``D`` and ``dt_bias`` ``(H,)``, state ``(B, H, P, N)``. Returns the output ``(B, T, H,
    P)`` in the compute dtype (as transformers' does) and, if asked, the final state.
    """
    refuse_packed(kwargs)
    dtype = compute_dtype(hidden_states)
    heads = hidden_states.shape[2]
    dt = _step_sizes(dt, dt_bias, dt_softplus).clamp(dt_limit[0], dt_limit[1]).to(dtype)
    x = heads_first(hidden_states, dtype)
    c, b = (heads_first(y, dtype).repeat_interleave(heads // y.shape[2], dim=1) for y in (C, B))
    steps = dt.transpose(1, 2).unsqueeze(-1)  # (B, H, T, 1)
    start = None if initial_states is None else initial_states.to(dtype).mT
    output, state = decay_chunkwise(
        c, b * steps, x, steps * A.to(dtype)[:, None, None], chunk_size=chunk_size, initial_state=start
    )
    if D is not None:
        output = output + D.to(dtype)[:, None, None] * x
    output = _gated(output.transpose(1, 2).contiguous(), z)
    return (output, state.mT.contiguous()) if return_final_states else output


def _uniform_over_head_dim(x: Tensor, name: str) -> Tensor:
    """``x[..., 0, :]`` of a tensor expanded along the head dimension (dim ``-2`` of ``A``'s
    ``(H, P, N)``); a per-channel one is not the scalar-decay recurrence."""
    first = x[..., :1, :]
    if not torch.equal(x, first.expand_as(x)):
        raise ConfigurationError(
            f"the zoo's Mamba-2 step takes {name} equal along the head dimension (one value per head): "
            "undo the routing for this model."
        )
    return first.squeeze(-2)


def mamba2_selective_state_update(
    state: Tensor,
    hidden_states: Tensor,
    dt: Tensor,
    A: Tensor,
    B: Tensor,
    C: Tensor,
    D: Tensor | None = None,
    dt_bias: Tensor | None = None,
    dt_softplus: bool = False,
    z: Tensor | None = None,
    **kwargs: Any,
) -> Tensor:
    """transformers' ``mamba2_selective_state_update`` (one decoding step) on the zoo's recurrent
    decay kernel, with a decay per state dimension.

    ``state`` ``(B, H, P, N)`` (updated in place), ``hidden_states`` and ``dt`` ``(B, H, P)``, ``A``
    ``(H, P, N)``, ``B`` and ``C`` ``(B, G, N)``, ``D`` and ``dt_bias`` ``(H, P)``: the layer expands
    ``dt``, ``A``, ``D`` and ``dt_bias`` from one value per head along ``P``, which this requires.
    Returns the output ``(B, H, P)`` in ``hidden_states``' dtype.
    """
    refuse_packed(kwargs)
    dtype = compute_dtype(hidden_states)
    heads = hidden_states.shape[1]
    bias = None if dt_bias is None else _uniform_over_head_dim(dt_bias.unsqueeze(-1), "dt_bias")
    steps = _step_sizes(_uniform_over_head_dim(dt.unsqueeze(-1), "dt"), bias, dt_softplus).to(dtype)  # (B, H, 1)
    log_decay = steps * _uniform_over_head_dim(A, "A").to(dtype)  # (B, H, N)
    c, b = (y.to(dtype).repeat_interleave(heads // y.shape[1], dim=1) for y in (C, B))
    x = hidden_states.to(dtype)
    output, new_state = decay_recurrent(
        c.unsqueeze(-2),
        (b * steps).unsqueeze(-2),
        x.unsqueeze(-2),
        log_decay.unsqueeze(-2),
        state=state.to(dtype).mT,
    )
    state.copy_(new_state.mT)
    output = output.squeeze(-2)
    if D is not None:
        output = output + D.to(dtype) * x
    return _gated(output, z).to(hidden_states.dtype)
