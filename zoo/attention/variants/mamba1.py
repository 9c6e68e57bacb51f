"""Mamba (Gu and Dao, 2023, "Mamba: Linear-Time Sequence Modeling with Selective State Spaces",
arXiv:2312.00752) as an attention layer: the selective scan, a state per channel.

The block's input ``u`` is projected to ``x`` and the gate ``z`` (``expand * embed_dim`` channels
each); ``x`` passes a short causal convolution (kernel 4, with a bias) and SiLU; the step sizes
``dt`` (one per channel) and the state's input and output maps ``B`` and ``C`` (``d_state`` each,
shared by every channel) are read from that convolved ``x``. Each channel ``c`` keeps a state
``h`` of ``d_state`` numbers, each with its own decay::

    dt_t = softplus((x_t W_down) W_dt + b_dt),          B_t = x_t W_B,        C_t = x_t W_C
    h_t,c = exp(dt_t,c A_c) * h_t-1,c + dt_t,c B_t x_t,c          (elementwise over d_state)
    y_t,c = C_t . h_t,c + D_c x_t,c,        out = (y * silu(z)) W_out

with ``A_c = -exp(A_log_c)`` (``d_state`` numbers per channel, S4D-real's ``-(1, 2, ..., d_state)``
at the start) and ``dt``'s low-rank map of rank ``ceil(embed_dim / 16)``.

How the zoo runs it: each channel is a head of a decaying state with a decay per key dimension
(:mod:`zoo.attention.kernels.decay`, gated linear attention's), with ``C_t`` as its query, ``B_t``
as its key (both ``d_state`` wide, shared by all channels as Mamba-2's groups share them), the
1-wide value ``dt_t,c x_t,c`` and the log decays ``dt_t,c A_c``: ``S_t = Diag(exp(dt_t,c A_c))
S_t-1 + B_t^T (dt_t,c x_t,c)``, ``y = C_t S_t``, the recurrence above with ``h`` a ``(d_state, 1)``
state. Its chunkwise form is the scan of states (:mod:`zoo.attention.kernels.state_scan`), as
Mamba's own selective scan: each step's ``(d_state, 1)`` state formed, chunks side by side, where
the chunks' ``(chunk, chunk)`` weight blocks over ``d_state`` would cost ``chunk`` times the
products for a 1-wide value. The parallel form (one ``(T, T)`` matrix per channel, for inputs up to
``chunk_size`` steps, and the weights), the recurrent form and decoding from the ``(B, channels,
d_state, 1)`` state are the decay kernels'. Measured on the CPU (one thread, a forward and backward
at batch 8, 256 tokens, width 64, 128 channels, side by side): 0.17 s with the scan, 0.44 s with
the weight blocks, against 0.041 s for ``mamba2`` with the same ``d_state`` of 16 and 0.017 s for
``gla``: a state per channel, each with its own decay per state dimension, is what Mamba-2's scalar
decay per head was made to avoid.

Reference code: ``mamba_ssm/modules/mamba_simple.py`` (``Mamba``) and ``selective_scan_ref`` in
``mamba_ssm/ops/selective_scan_interface.py``; fla's ``fla/layers/mamba.py`` is the same layer.
Followed: the equations, the defaults (``expand = 2``, ``d_state = 16``, ``d_conv = 4`` with a
bias, no projection biases), the initialization (``A`` as S4D-real, ``D`` ones, ``W_dt`` uniform in
``+-rank ** -0.5``, ``b_dt`` the inverse softplus of step sizes log-uniform in ``(0.001, 0.1)``).
Where it departs: Mamba's fused ``in_proj`` (to ``x`` and ``z``) is two maps here (``v_proj``,
``gate``) and its ``x_proj`` (to ``dt``'s low rank, ``B``, ``C``) three (``dt_down``, ``k_proj``,
``q_proj``): the same functions, under the names the other families use. ``dt`` is computed in the
state's precision (float32 at least). The layer has no heads: each channel is one, whatever the
stack's ``num_heads``. No position scheme (Mamba has none). The name ``mamba`` stays Mamba-2's
(stored configurations use it); this is ``mamba1``.

``negative_eigenvalues`` (off by default, so stored models compute what they did) is Grazzi et al.'s
(2025, "Unlocking State-Tracking in Linear RNNs Through Negative Eigenvalues") for this layer: each
decay ``exp(dt_t,c A_c)`` becomes ``2 exp(dt_t,c A_c) - 1`` in ``(-1, 1)``, as their
``positive_and_negative`` Mamba block maps its selective scan's ``deltaA``
(:func:`~zoo.attention.modules.gating.positive_and_negative`), so a channel can flip the sign of a
state dimension, with which one layer can track parity. The decay kernels keep ``log|a|`` and carry
the parity of each state dimension's negative steps on the queries and keys, in every form
(:mod:`zoo.attention.kernels.decay`).
"""

from __future__ import annotations

import math
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from typing_extensions import Unpack

from zoo.attention.build.factory import register_attention_layer
from zoo.attention.contract.cache import StateCache
from zoo.attention.contract.context import AttentionContext
from zoo.attention.modules.gating import positive_and_negative, step_bias
from zoo.attention.modules.recurrence import ScannedRecurrence
from zoo.attention.modules.recurrent import RecurrentLayer, RecurrentOptions

__all__ = ["Mamba1Attention"]


@register_attention_layer("mamba1", aliases=("selective_scan", "mamba_1"))
class Mamba1Attention(RecurrentLayer):
    """Mamba's selective scan (see the module docstring).

    Args:
        embed_dim: The block's width.
        num_heads: The stack's heads, not read: Mamba has none (each inner channel is its own head).
        expand: The inner width (channels of ``x`` and ``z``), in multiples of ``embed_dim``.
        d_state: The state size per channel: the width of ``B`` and ``C``.
        dt_rank: Rank of the step sizes' map; None: ``ceil(embed_dim / 16)``, Mamba's ``auto``.
        negative_eigenvalues: Each decay ``a`` mapped to ``2 a - 1`` in ``(-1, 1)`` (see the module
            docstring).
        options: :class:`~zoo.attention.modules.recurrent.RecurrentLayer`'s (``conv_size`` 4, with a
            bias, on ``x`` only); no position scheme.

    Parameters of its own: ``dt_down`` (``channels -> dt_rank``, no bias) and ``dt_proj``
    (``dt_rank -> channels``, its bias ``b_dt``); ``A_log`` ``(channels, d_state)``; ``D`` per channel;
    ``gate`` (``embed_dim -> channels``, no bias), ``z``. ``q_proj`` and ``k_proj`` (``C`` and ``B``)
    read the convolved ``x``, ``channels -> d_state``, without biases.
    """

    supports_rotary = False
    #: Mamba convolves ``x`` alone; ``B``, ``C`` and ``dt`` are read from it after
    conv_names: ClassVar[tuple[str, ...]] = ("v_conv",)
    fla_refusal = "flash-linear-attention runs Mamba-1 in a selective scan, not in the chunk kernels the zoo calls"

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        *,
        expand: float = 2.0,
        d_state: int = 16,
        dt_rank: int | None = None,
        negative_eigenvalues: bool = False,
        **options: Unpack[RecurrentOptions],
    ) -> None:
        if dt_rank is not None and (not isinstance(dt_rank, int) or dt_rank < 1):
            raise ValueError(f"Mamba1Attention: dt_rank must be a positive integer or None, got {dt_rank!r}.")
        self.require_positive(d_state=d_state)
        channels = int(embed_dim * expand)
        if channels < 1:
            raise ValueError(f"Mamba1Attention: expand ({expand}) leaves no channel of {embed_dim}; raise it.")
        rank = dt_rank or math.ceil(embed_dim / 16)
        super().__init__(
            embed_dim, channels, key_dim=d_state, value_dim=channels, qk_heads=1, conv_bias=True, **options
        )
        self.d_state, self.dt_rank, self.negative_eigenvalues = d_state, rank, negative_eigenvalues
        self.q_proj = nn.Linear(channels, d_state, bias=False)  # C, from the convolved x
        self.k_proj = nn.Linear(channels, d_state, bias=False)  # B, from the convolved x
        self.dt_down = nn.Linear(channels, rank, bias=False)
        self.dt_proj = nn.Linear(rank, channels)
        bias = step_bias(channels)  # softplus(b_dt) = dt, log-uniform
        with torch.no_grad():
            nn.init.uniform_(self.dt_proj.weight, -(rank**-0.5), rank**-0.5)
            self.dt_proj.bias.copy_(bias)
        self.A_log = nn.Parameter(torch.arange(1, d_state + 1, dtype=torch.float32).log().repeat(channels, 1))
        self.D = nn.Parameter(torch.ones(channels))
        self.gate = nn.Linear(embed_dim, channels, bias=False)

    def _project(
        self, x: Tensor, context: AttentionContext, cache: StateCache | None
    ) -> tuple[Tensor, Tensor, Tensor, Tensor, tuple[Tensor, ...]]:
        """``C`` and ``B`` ``(B, 1, T, d_state)`` and ``x`` per channel ``(B, channels, T, 1)``, all from
        the convolved and activated ``x`` (continuing the cache's window); the layer's input; the
        convolution's window after ``x``."""
        (inner,), windows = self.convolved_projections(x, None if cache is None else cache.extra, context, ["silu"])
        c, b = self.q_proj(inner).unsqueeze(1), self.k_proj(inner).unsqueeze(1)
        return c, b, self.split_heads(inner), x, windows or ()

    def prepare(self, queries: Tensor, keys: Tensor, values: Tensor, layer_input: Tensor) -> ScannedRecurrence:
        dtype = values.dtype
        inner = values.squeeze(-1).transpose(1, 2)  # (B, T, channels)
        low = F.linear(inner, self.dt_down.weight.to(dtype))
        dt = F.softplus(F.linear(low, self.dt_proj.weight.to(dtype), self.dt_proj.bias.to(dtype)))
        dt = dt.transpose(1, 2).unsqueeze(-1)  # (B, channels, T, 1)
        log_decay = -dt * self.A_log.to(dtype).exp().unsqueeze(1)  # (B, channels, T, d_state)
        skip = self.D.to(dtype)[:, None, None] * values
        negative = None
        if self.negative_eigenvalues:
            log_decay, negative = positive_and_negative(log_decay)
        return ScannedRecurrence(queries, keys, values * dt, log_decay, skip=skip, negative_decay=negative)

    def finish(self, output: Tensor, layer_input: Tensor) -> Tensor:
        return output * F.silu(self.split_heads(self.gate(layer_input)).to(output.dtype))

    def extra_repr(self) -> str:
        signed = ", negative_eigenvalues=True" if self.negative_eigenvalues else ""
        return f"{super().extra_repr()}, d_state={self.d_state}, dt_rank={self.dt_rank}{signed}"
