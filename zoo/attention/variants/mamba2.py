"""Mamba-2 (Dao and Gu, 2024) as an attention layer: the state-space dual (SSD) of a selective state space.

The block's input ``u`` is projected to ``x`` (``expand * embed_dim`` wide, cut into the heads),
``B`` and ``C`` (``ngroups`` groups of ``d_state``, each shared by ``num_heads / ngroups`` heads),
the gate ``z`` and a step size per head; ``x``, ``B`` and ``C`` pass a short causal convolution
(kernel 4, with a bias) and SiLU. Per head, a state ``h`` of shape ``(d_state, head_dim)`` decays
by one scalar per step::

    a_t = exp(-dt_t A_h),        h_t = a_t h_{t-1} + B_t^T (dt_t x_t),        y_t = C_t h_t + D_h x_t

with ``dt_t = softplus(u_t w + dt_bias)`` and ``A_h = exp(A_log_h) > 0`` learned per head
(:class:`~zoo.attention.modules.gating.StepDecay`, Mamba-2's initialization: ``A`` uniform in
``(1, 16)``, step sizes log-uniform in ``(0.001, 0.1)``). Unrolled, ``y = (L * C B^T) (dt x) + D x``
with ``L_ij = a_{j+1} ... a_i``: attention under a 1-semiseparable mask, with ``C`` as queries,
``B`` as keys and ``x`` as values, which is what the scalar-decay kernels compute
(:mod:`zoo.attention.kernels.decay`). The parallel form is that masked matrix; the chunkwise form
is SSD's block decomposition. Queries are not scaled (SSD has no temperature).

The output: ``y`` times ``silu(z)``, then an RMSNorm over each group of ``expand * embed_dim /
ngroups`` features with a scale per feature (Mamba-2's gated RMSNorm, gate before the norm), then
the output projection back to ``embed_dim``.

Here the projection is four linear maps (``v_proj`` for ``x``, ``k_proj`` for ``B``, ``q_proj``
for ``C``, ``gate`` for ``z``) and the step sizes' (``decay.proj``), where Mamba-2 fuses them into
one ``in_proj``: the same function, and the names the other families use. Defaults as
``mamba_ssm``'s ``Mamba2``: ``expand = 2``, ``d_state = 128``, ``ngroups = 1``; the heads are the
stack's ``num_heads`` (Mamba-2 fixes the head size at 64 instead). ``dt`` limits and learned
initial states, off by default in Mamba-2, are left out.

``negative_eigenvalues`` (off by default, so stored models compute what they did) maps each step's
decay to ``a_t = 2 exp(-dt_t A_h) - 1`` in ``(-1, 1)``
(:func:`~zoo.attention.modules.gating.positive_and_negative`): a transition with a negative
eigenvalue flips the state's sign, with which one layer can track parity. Grazzi et al. (2025,
"Unlocking State-Tracking in Linear RNNs Through Negative Eigenvalues") show it for Mamba-1, in a
selective scan of their own (``positive_and_negative``); for Mamba-2 it is the zoo's extension,
the same map on SSD's scalar decay. SSD's matrix form holds with signs: ``L_ij = a_{j+1} ... a_i``
is ``s_i s_j |a_{j+1} ... a_i|`` with ``s_t`` the parity of the negative steps so far, so the
decay kernels keep ``log|a_t|`` and carry the signs on the values and outputs in every form
(:mod:`zoo.attention.kernels.decay`). flash-linear-attention's kernels take decays in ``(0, 1]``:
with the option on, ``auto`` runs the zoo's forms and a forced ``fla`` backend is refused.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from typing_extensions import Unpack

from zoo.attention.build.factory import register_attention_layer
from zoo.attention.kernels.fla import SIGNED_DECAY_REFUSAL
from zoo.attention.modules.gating import DT_RANGE, StepDecay, positive_and_negative
from zoo.attention.modules.recurrent import Recurrence, RecurrentLayer, RecurrentOptions

__all__ = ["Mamba2Attention"]

#: where Mamba-2's ``A`` starts, uniform (``mamba_ssm``'s ``A_init_range``)
A_RANGE = (1.0, 16.0)


@register_attention_layer("mamba2", aliases=("mamba", "ssd"))
class Mamba2Attention(RecurrentLayer):
    """Mamba-2's state-space dual (see the module docstring).

    Args:
        embed_dim: The block's width.
        num_heads: Heads: one ``A``, ``dt_bias`` and ``D`` each.
        expand: The inner width ``x`` (and ``z``), in multiples of ``embed_dim``.
        d_state: The state size per head: the width of each group's ``B`` and ``C``.
        ngroups: Groups of heads that share ``B`` and ``C`` (and the norm's groups); must divide
            ``num_heads``.
        negative_eigenvalues: ``a_t`` in ``(-1, 1)`` rather than ``(0, 1)`` (see the module docstring).
        dt_range: Where the step sizes start, log-uniform (``mamba_ssm``'s ``dt_min``, ``dt_max``).
        a_range: Where ``A`` starts, uniform (``mamba_ssm``'s ``A_init_range``).
        options: :class:`~zoo.attention.modules.recurrent.RecurrentLayer`'s (``conv_size`` 4, with a bias).

    Parameters of its own: ``decay`` (a projection ``embed_dim -> num_heads`` and, per head,
    ``A_log`` and ``dt_bias``); ``D`` per head (the skip, starting at 1); ``gate``
    (``embed_dim -> inner width``, no bias), ``z``; ``norm_weight``, the norm's scale per feature.
    """

    #: SiLU on ``C``, ``B`` and ``x``, as Mamba-2's convolution has
    silu = "always"

    #: a state ``d_state`` wide makes the pass between chunks the larger cost on the CPU
    #: (``zoo.attention.modules.recurrent``; ``docs/results/speed.md``, each family's chunk on the
    #: CPU and Mamba-2's shared chunk-state products)
    cpu_chunk_size = 64

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        *,
        expand: float = 2.0,
        d_state: int = 128,
        ngroups: int = 1,
        negative_eigenvalues: bool = False,
        dt_range: tuple[float, float] = DT_RANGE,
        a_range: tuple[float, float] = A_RANGE,
        **options: Unpack[RecurrentOptions],
    ) -> None:
        inner = int(embed_dim * expand)
        super().__init__(
            embed_dim,
            num_heads,
            key_dim=ngroups * d_state,
            value_dim=inner,
            qk_heads=ngroups,
            conv_bias=True,
            **options,
        )
        self.ngroups, self.negative_eigenvalues = ngroups, negative_eigenvalues
        self.decay = StepDecay(embed_dim, num_heads, a_range=tuple(a_range), dt_range=tuple(dt_range))
        self.D = nn.Parameter(torch.ones(num_heads))
        self.gate = nn.Linear(embed_dim, inner, bias=False)
        self.norm_weight = nn.Parameter(torch.ones(inner))

    @classmethod
    def legacy_layout(cls, embed_dim: int, num_heads: int) -> dict[str, Any]:
        """Before it was a layer, Mamba-2 read per-head ``B`` and ``C`` from the multi-head
        layer's query and key projections (``ngroups = num_heads``, ``d_state`` the head size) and
        had no expansion and no convolution."""
        return {"conv_size": 0, "expand": 1.0, "d_state": embed_dim // num_heads, "ngroups": num_heads}

    def prepare(self, queries: Tensor, keys: Tensor, values: Tensor, layer_input: Tensor) -> Recurrence:
        dt, log_decay = self.decay(layer_input, queries.dtype)  # (B, H, T) each
        skip = self.D.to(values.dtype)[:, None, None] * values
        negative = None
        if self.negative_eigenvalues:
            log_decay, negative = positive_and_negative(log_decay)
            negative = negative.unsqueeze(-1)
        return Recurrence(
            queries, keys, values * dt.unsqueeze(-1), log_decay.unsqueeze(-1), skip=skip, negative_decay=negative
        )

    def _fla_refusal(self, device: torch.device) -> str | None:
        """fla's kernels take no signed decay (:mod:`zoo.attention.kernels.fla`)."""
        return SIGNED_DECAY_REFUSAL if self.negative_eigenvalues else super()._fla_refusal(device)

    def finish(self, output: Tensor, layer_input: Tensor) -> Tensor:
        gated = output * F.silu(self.split_heads(self.gate(layer_input)).to(output.dtype))  # (B, H, T, hd)
        batch, heads, steps, width = gated.shape
        groups = gated.transpose(1, 2).reshape(batch, steps, self.ngroups, heads * width // self.ngroups)
        normed = F.rms_norm(groups, (groups.shape[-1],), eps=1e-5).flatten(-2) * self.norm_weight.to(output.dtype)
        return normed.unflatten(-1, (heads, width)).transpose(1, 2)

    def legacy_state_dict(self, state_dict: dict[str, Any], prefix: str) -> None:
        """The norm's scale was stored per head, ``(H, 1, head_dim)``."""
        key = prefix + "norm_weight"
        if key in state_dict and state_dict[key].dim() == 3:
            state_dict[key] = state_dict[key].flatten()
