"""The zoo's recurrence kernels inside transformers' models, in place of their PyTorch fallbacks.

Why: transformers' linear-attention and state-space models call module-level kernel functions
(``torch_chunk_gated_delta_rule`` in Qwen3-Next, ``chunk_kimi_delta_attention`` in Kimi Linear,
``mamba2_chunk_scan`` in Mamba-2, ...). Each is decorated with
``use_kernel_func_from_hub_with_fallback``, which takes fla's or mamba_ssm's kernel when that
package is installed and otherwise the PyTorch loop written in the modeling file. Without those
packages (a CPU, a machine with no Triton), :func:`use_zoo_kernels` puts the zoo's chunkwise and
recurrent kernels (:mod:`zoo.attention.kernels`) in their place, offline: it rebinds the names in
the already imported modeling modules, which the layers look up on every call, and calls
nothing on the Hub::

    routed = use_zoo_kernels(model)   # routed.names: the "<module>.<function>" names rebound
    ...
    routed.undo()                     # or: with use_zoo_kernels(model): ...

A name is rebound in its module, so every model of that family in the process uses the zoo's
kernel until :meth:`RoutedKernels.undo`. Any modeling module holding one of the names below is
routed (Qwen3.5, Olmo hybrid, Falcon-H1, Bamba, ... copy them from the three families above).
Where fla or mamba_ssm is installed, their kernels are what the names hold, and those are replaced
too (``undo`` puts them back).

What maps to what (transformers' layouts are ``(B, T, H, D)``, the zoo's ``(B, H, T, D)`` with the
heads in the batch; every state is ``(B, H, dk, dv)`` read as ``o_t = q_t S_t`` on both sides,
except Mamba-2's, whose ``(B, H, headdim, d_state)`` is the transpose):

* gated delta rule (Yang, Kautz and Hatamizadeh, 2024, arXiv:2412.06464):
  ``S_t = exp(g_t) (I - beta_t k_t^T k_t) S_{t-1} + beta_t k_t^T v_t``, ``o_t = scale q_t S_t``:
  :func:`~zoo.attention.kernels.delta_rule.delta_rule_chunkwise` and ``delta_rule_recurrent``
  with ``log_decay = g``. Query and key heads are repeated for grouped value heads, as
  transformers does.
* Kimi Delta Attention (Kimi Team, 2025, arXiv:2510.26692): the same with ``exp(g_t)`` a diagonal,
  one decay per key dimension: the generalized delta rule
  (:mod:`~zoo.attention.kernels.dplr`) with ``a = -beta k``, ``b = k * exp(g)``, written key
  ``beta k``, as the zoo's ``kda`` layer calls it.
* Mamba-2's SSD (Dao and Gu, 2024, arXiv:2405.21060): ``h_t = exp(dt_t A) h_{t-1} + dt_t x_t^T
  B_t``, ``y_t = C_t h_t + D x_t`` (``dt = softplus(dt + dt_bias)`` clamped to ``dt_limit``; the
  zoo's orientation, ``(d_state, headdim)``): the scalar decay kernel
  (:mod:`~zoo.attention.kernels.decay`) with queries ``C``, keys ``dt B``, values ``x`` and
  ``log_decay = dt A``. Groups of ``B`` and ``C`` are repeated over the heads. The single-step
  update writes the new state into the cache's tensor in place, as transformers' does.
  ``mamba2_split_conv1d_scan_combined`` is left alone: its PyTorch fallback returns None, and the
  layer then takes the path through ``mamba2_chunk_scan``.

Where it departs from transformers' functions, and why: the computation runs in float32 for
float32 and lower inputs, as theirs does, but float64 stays float64 (theirs rounds it to float32),
so the zoo's float64 tests compare exactly; ``scale`` (fla's keyword, default ``D**-0.5``) is
honoured rather than ignored. Packed sequences (``cu_seqlens``, ``seq_idx``) are refused with a
:class:`~zoo.errors.ConfigurationError`, as transformers' fallbacks refuse them. The L2
normalization of ``use_qk_l2norm_in_kernel`` is transformers' and fla's ``x / sqrt(|x|^2 + 1e-6)``,
not the zoo layers' ``x / max(|x|, eps)``, so the routed model computes what the original does.

Checked in ``tests/integrations/test_hf_kernels.py``: tiny Qwen3-Next, Kimi Linear and Mamba-2
models give the same logits, greedy generations and gradients with and without the zoo's kernels.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType, TracebackType
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from zoo.attention.kernels.decay import decay_chunkwise, decay_recurrent
from zoo.attention.kernels.delta_rule import delta_rule_chunkwise, delta_rule_recurrent
from zoo.attention.kernels.dplr import dplr_chunkwise, dplr_recurrent
from zoo.errors import ConfigurationError

__all__ = [
    "ROUTES",
    "RoutedKernels",
    "chunk_gated_delta_rule",
    "chunk_kimi_delta_attention",
    "mamba2_chunk_scan",
    "mamba2_selective_state_update",
    "recurrent_gated_delta_rule",
    "recurrent_kimi_delta_attention",
    "use_zoo_kernels",
]

_L2_EPS = 1e-6  # transformers' and fla's l2norm: x / sqrt(|x|^2 + eps)


def _compute_dtype(x: Tensor) -> torch.dtype:
    """float32 for float32 and lower inputs (transformers' choice), float64 for float64."""
    return torch.promote_types(x.dtype, torch.float32)


def _refuse_packed(kwargs: dict[str, Any]) -> None:
    """Packed sequences need the boundaries inside the kernel, which the zoo's kernels do not take."""
    for name in ("cu_seqlens", "seq_idx"):
        if kwargs.get(name) is not None:
            raise ConfigurationError(
                f"the zoo's kernels do not keep packed sequences apart ({name} given): pad the batch instead, "
                "or undo the routing."
            )


def _heads_first(x: Tensor, dtype: torch.dtype) -> Tensor:
    """``(B, T, H, ...)`` to ``(B, H, T, ...)`` in ``dtype``."""
    return x.transpose(1, 2).to(dtype)


def _l2norm(x: Tensor) -> Tensor:
    return x * torch.rsqrt(x.pow(2).sum(-1, keepdim=True) + _L2_EPS)


def _delta_inputs(
    query: Tensor, key: Tensor, value: Tensor, normalize: bool, scale: float | None
) -> tuple[Tensor, Tensor, Tensor]:
    """Queries, keys and values heads first in the compute dtype, query and key heads repeated to
    the value heads, L2-normalized if asked, queries scaled."""
    dtype = _compute_dtype(query)
    groups = value.shape[2] // key.shape[2]
    q, k, v = (_heads_first(x, dtype) for x in (query, key, value))
    if groups > 1:
        q, k = (x.repeat_interleave(groups, dim=1) for x in (q, k))
    if normalize:
        q, k = _l2norm(q), _l2norm(k)
    return q * (q.shape[-1] ** -0.5 if scale is None else scale), k, v


def _returned(output: Tensor, state: Tensor, dtype: torch.dtype, keep_state: bool) -> tuple[Tensor, Tensor | None]:
    """The output back to ``(B, T, H, dv)`` in the input's dtype; the state if asked for."""
    return output.transpose(1, 2).contiguous().to(dtype), state if keep_state else None


def _state_in(state: Tensor | None, like: Tensor) -> Tensor | None:
    return None if state is None else state.to(like.dtype)


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
    _refuse_packed(kwargs)
    q, k, v = _delta_inputs(query, key, value, use_qk_l2norm_in_kernel, scale)
    output, state = delta_rule_chunkwise(
        q,
        k,
        v,
        beta.transpose(1, 2).to(v.dtype),
        g.transpose(1, 2).to(v.dtype),
        chunk_size=chunk_size,
        initial_state=_state_in(initial_state, v),
    )
    return _returned(output, state, query.dtype, output_final_state)


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
    _refuse_packed(kwargs)
    q, k, v = _delta_inputs(query, key, value, use_qk_l2norm_in_kernel, scale)
    output, state = delta_rule_recurrent(
        q,
        k,
        v,
        beta.transpose(1, 2).to(v.dtype),
        g.transpose(1, 2).to(v.dtype),
        state=_state_in(initial_state, v),
    )
    return _returned(output, state, query.dtype, output_final_state)


def _kda_inputs(
    query: Tensor, key: Tensor, value: Tensor, g: Tensor, beta: Tensor, normalize: bool, scale: float | None
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    """The generalized delta rule's ``q, k, v, a, b, log_decay`` for Kimi Delta Attention."""
    q, k, v = _delta_inputs(query, key, value, normalize, scale)
    log_decay = _heads_first(g, v.dtype)
    beta = _heads_first(beta, v.dtype).unsqueeze(-1)
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
    _refuse_packed(kwargs)
    inputs = _kda_inputs(query, key, value, g, beta, use_qk_l2norm_in_kernel, scale)
    output, state = dplr_chunkwise(*inputs, chunk_size=chunk_size, initial_state=_state_in(initial_state, inputs[2]))
    return _returned(output, state, query.dtype, output_final_state)


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
    _refuse_packed(kwargs)
    inputs = _kda_inputs(query, key, value, g, beta, use_qk_l2norm_in_kernel, scale)
    output, state = dplr_recurrent(*inputs, state=_state_in(initial_state, inputs[2]))
    return _returned(output, state, query.dtype, output_final_state)


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
    _refuse_packed(kwargs)
    dtype = _compute_dtype(hidden_states)
    heads = hidden_states.shape[2]
    dt = _step_sizes(dt, dt_bias, dt_softplus).clamp(dt_limit[0], dt_limit[1]).to(dtype)
    x = _heads_first(hidden_states, dtype)
    c, b = (_heads_first(y, dtype).repeat_interleave(heads // y.shape[2], dim=1) for y in (C, B))
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
    _refuse_packed(kwargs)
    dtype = _compute_dtype(hidden_states)
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


ROUTES: dict[str, Callable[..., Any]] = {
    "torch_chunk_gated_delta_rule": chunk_gated_delta_rule,
    "torch_recurrent_gated_delta_rule": recurrent_gated_delta_rule,
    "chunk_kimi_delta_attention": chunk_kimi_delta_attention,
    "recurrent_kimi_delta_attention": recurrent_kimi_delta_attention,
    "mamba2_chunk_scan": mamba2_chunk_scan,
    "mamba2_selective_state_update": mamba2_selective_state_update,
}
"""The module-level names in transformers' modeling files and the zoo's function for each."""


@dataclass
class RoutedKernels:
    """What :func:`use_zoo_kernels` rebound, and how to put it back (also a context manager)."""

    replaced: list[tuple[ModuleType, str, Callable[..., Any]]] = field(default_factory=list)

    @property
    def names(self) -> list[str]:
        """``"<module>.<function>"`` for each rebound name, e.g.
        ``transformers.models.mamba2.modeling_mamba2.mamba2_chunk_scan``."""
        return [f"{module.__name__}.{name}" for module, name, _ in self.replaced]

    def undo(self) -> None:
        """Rebind each name to the function it held before (idempotent)."""
        for module, name, original in reversed(self.replaced):
            setattr(module, name, original)
        self.replaced.clear()

    def __enter__(self) -> RoutedKernels:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.undo()


def use_zoo_kernels(model: nn.Module) -> RoutedKernels:
    """Rebind the kernel functions of ``model``'s modeling modules (see :data:`ROUTES`) to the
    zoo's; names already routed are left as they are (so nested calls undo only their own).

    Returns:
        A :class:`RoutedKernels`: ``names`` lists what was rebound (empty: nothing in the model
        calls a kernel the zoo has), ``undo()`` restores it.
    """
    routed = RoutedKernels()
    modules = sorted({type(part).__module__ for part in model.modules()})
    for module in (sys.modules[name] for name in modules if name in sys.modules):
        for name, zoo_function in ROUTES.items():
            original = getattr(module, name, None)
            if original is not None and original is not zoo_function:
                setattr(module, name, zoo_function)
                routed.replaced.append((module, name, original))
    return routed
