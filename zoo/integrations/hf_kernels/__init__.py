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

from torch import nn

from zoo.integrations.hf_kernels.delta_rules import (
    chunk_gated_delta_rule,
    chunk_kimi_delta_attention,
    recurrent_gated_delta_rule,
    recurrent_kimi_delta_attention,
)
from zoo.integrations.hf_kernels.mamba2 import mamba2_chunk_scan, mamba2_selective_state_update

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
