"""DeltaNet (Schlag et al., 2021; Yang et al., 2024) and Gated DeltaNet (Yang et al., 2024): the
delta rule, which corrects the state's value for a key instead of only adding to it.

In the papers' orientation (a ``(dv, dk)`` state, column vectors, ``o_t = S_t q_t``)::

    DeltaNet:        S_t = S_{t-1} (I - b_t k_t k_t^T) + b_t v_t k_t^T
    Gated DeltaNet:  S_t = a_t S_{t-1} (I - b_t k_t k_t^T) + b_t v_t k_t^T

The state's old value for ``k_t`` (``S_{t-1} k_t``) moves a fraction ``b_t`` of the way to ``v_t``
(and, gated, the whole state first decays by ``a_t``). The kernels keep the transposed state,
``(dk, dv)`` with row vectors (:mod:`zoo.attention.kernels.delta_rule`).

What the variants read, as in the papers and flash-linear-attention:

* queries and keys through SiLU, then L2-normalized per head (the rule assumes ``|k_t| = 1``, and
  ``I - b_t k_t k_t^T`` then has eigenvalues in ``[1 - b_t, 1]``: the state never grows); the
  queries then scaled by ``dk ** -0.5``; values through SiLU (flash-linear-attention applies it
  after its short convolution, or without one);
* the write strength ``b_t = sigmoid(x_t w_b)`` per head, from the layer's input (with
  ``negative_eigenvalues``, ``2 sigmoid(x_t w_b)``: below);
* Gated DeltaNet's decay ``a_t = exp(-softplus(x_t w_a + dt_bias) A)`` per head, Mamba-2's
  (:class:`~zoo.attention.modules.gating.StepDecay`, ``A`` starting uniform in ``(0, 16)``).

Outputs: each head's RMSNorm (DeltaNet), times a swish gate ``silu(x W_g)`` of the layer's input
(Gated DeltaNet), before the layer's output projection.

Widths and the convolution, as flash-linear-attention's ``DeltaNet`` and ``GatedDeltaNet`` set
them: a short causal convolution (kernel 4) on queries, keys and values before their SiLU, on by
default (``conv_size=0``: none; the model's positions then tell neighbouring tokens apart); keys
and values the block's width (``expand_v``: Gated DeltaNet's paper doubles the values).

``num_key_heads`` (None by default: one query and key head per value head, the state dict as
before) gives fewer query and key heads than value heads, each shared by ``num_heads /
num_key_heads`` consecutive value heads, as Qwen3-Next's and Qwen3.5's gated delta nets have
(``linear_num_key_heads`` 16 to ``linear_num_value_heads`` 32; flash-linear-attention's
``num_v_heads``): the key width (``embed_dim`` unless ``expand_k`` says otherwise) is cut into
``num_key_heads`` wider heads, and the queries and keys are repeated per group where the
delta-rule kernels are called, as those models' reference code repeats them (the delta rule has
no shared-key shortcut to take).

``expand_k`` (1 by default, the state dict as before) sets the query and key width in multiples of
``embed_dim``: Qwen3.5's keys are half its hidden size (16 key heads of 128 beside 4096), where
Qwen3-Next's are as wide (16 of 128 beside 2048); flash-linear-attention states it as ``num_heads *
head_dim``.

``negative_eigenvalues`` (off by default, so stored models compute what they did) is Grazzi et
al.'s extension (2025, "Unlocking State-Tracking in Linear RNNs Through Negative Eigenvalues"):
``b_t = 2 sigmoid(x_t w_b)`` in ``(0, 2)``, so that ``I - b_t k_t k_t^T`` has the eigenvalue
``1 - b_t`` in ``(-1, 1)``: a reflection, with which one layer can track parity, which
eigenvalues in ``[0, 1]`` cannot (:class:`~zoo.attention.modules.gating.WriteStrength`;
flash-linear-attention's ``allow_neg_eigval``). The kernels take any ``b_t``, and the state still
never grows (``|1 - b_t| < 1``); fla's kernels run it too.

Where the zoo's parity cells differ from the paper's (``docs/results/state_tracking.md``): a
2-layer stack of width 64 trained at lengths 3-40 is exact to 64, and at 256 one seed of three
reads 0.996 and the others 0.76-0.78, where Grazzi et al. report near 1. The counting heads of the
seeds that fail learn ``b_t`` of 1.95-1.99 for the flipping symbol, not 2, so the count fades as
``(b_t - 1)^n`` over ``n`` flips, and the training lengths never penalise that. Computing ``b_t``
in bfloat16, as fla does under autocast (it rounds to exactly 2 past a logit of about 6.2),
changes nothing measurable: again one seed of three.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from typing_extensions import Unpack

from zoo.attention.build.factory import register_attention_layer
from zoo.attention.kernels.l2_norm import l2_normalize
from zoo.attention.modules.gating import HeadNorm, StepDecay, WriteStrength
from zoo.attention.modules.recurrent import Recurrence, RecurrentLayer, RecurrentOptions

__all__ = ["DeltaNetAttention", "DeltaNetOptions", "GatedDeltaNetAttention"]


class DeltaNetOptions(RecurrentOptions, total=False):
    """DeltaNet's arguments beside every family's, which Gated DeltaNet takes as they are."""

    expand_v: float
    expand_k: float
    negative_eigenvalues: bool
    num_key_heads: int | None
    qk_norm_eps: float | None


@register_attention_layer("deltanet", aliases=("delta_net",))
class DeltaNetAttention(RecurrentLayer):
    """DeltaNet (see the module docstring).

    Args:
        embed_dim: The block's width: what ``b_t`` is projected from.
        num_heads: Heads (value heads, each with its own state).
        expand_v: The value width, in multiples of ``embed_dim``.
        expand_k: The query and key width, in multiples of ``embed_dim``.
        negative_eigenvalues: ``b_t`` in ``(0, 2)`` (Grazzi et al.) rather than ``(0, 1)``.
        num_key_heads: Query and key heads, each shared by ``num_heads / num_key_heads`` value heads
            (see the module docstring); None: ``num_heads``.
        qk_norm_eps: None: queries and keys L2-normalized as ``F.normalize`` does (``x / max(|x|,
            1e-12)``); a number: ``x / sqrt(|x|^2 + qk_norm_eps)``, as flash-linear-attention's and
            transformers' ``l2norm`` (1e-6), which the weight maps of Qwen3-Next's, Qwen3.5's and
            OLMo hybrid's layers set.
        options: :class:`~zoo.attention.modules.recurrent.RecurrentLayer`'s (``conv_size`` 4; the parallel
            form solves a ``(T, T)`` triangular system, so ``auto`` keeps it to ``chunk_size`` steps).

    Parameters of its own: ``beta`` (``embed_dim -> num_heads``, no bias), the write strengths;
    ``norm``, the per-head RMSNorm's scale.
    """

    #: SiLU on queries, keys and values, as flash-linear-attention's DeltaNet
    silu = "always"

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        *,
        expand_v: float = 1.0,
        expand_k: float = 1.0,
        negative_eigenvalues: bool = False,
        num_key_heads: int | None = None,
        qk_norm_eps: float | None = None,
        **options: Unpack[RecurrentOptions],
    ) -> None:
        super().__init__(
            embed_dim, num_heads, key_dim=int(embed_dim * expand_k), value_dim=int(embed_dim * expand_v),
            qk_heads=num_key_heads, **options,
        )  # fmt: skip
        if qk_norm_eps is not None and not qk_norm_eps > 0:
            raise ValueError(
                f"{type(self).__name__}: qk_norm_eps must be a positive number or None, got {qk_norm_eps!r}."
            )
        self.qk_norm_eps = qk_norm_eps
        self.beta = WriteStrength(embed_dim, num_heads, negative_eigenvalues)
        self.norm = HeadNorm(self.head_dim)

    def l2_normalize(self, x: Tensor, scale: float = 1.0) -> Tensor:
        """``scale * x`` over its L2 norm, last dimension, as ``qk_norm_eps`` says."""
        if self.qk_norm_eps is None:
            return l2_normalize(x, scale)
        return l2_normalize(x, scale, self.qk_norm_eps, added=True)

    def log_decay(self, layer_input: Tensor, dtype: torch.dtype) -> Tensor | None:
        """``log a_t`` ``(B, H, T)``; None: DeltaNet does not decay."""
        return None

    def prepare(self, queries: Tensor, keys: Tensor, values: Tensor, layer_input: Tensor) -> Recurrence:
        q, k = self.l2_normalize(queries, self.key_head_dim**-0.5), self.l2_normalize(keys)
        if self.qk_heads != self.num_heads:  # grouped value heads: each key head repeated over its group
            groups = self.num_heads // self.qk_heads
            q, k = q.repeat_interleave(groups, dim=-3), k.repeat_interleave(groups, dim=-3)
        beta = self.beta.strengths(layer_input, queries.dtype).transpose(-1, -2)  # (B, H, T)
        return Recurrence(q, k, values, self.log_decay(layer_input, queries.dtype), beta)

    def finish(self, output: Tensor, layer_input: Tensor) -> Tensor:
        return self.norm(output)


@register_attention_layer("gated_deltanet", aliases=("gated_delta_net",))
class GatedDeltaNetAttention(DeltaNetAttention):
    """Gated DeltaNet: DeltaNet with Mamba-2's decay and a swish output gate (see the module docstring).

    Args as :class:`DeltaNetAttention`'s.

    Parameters of its own, beside DeltaNet's: ``decay`` (a projection ``embed_dim -> num_heads``
    and, per head, ``A_log`` and ``dt_bias``); ``gate`` (``embed_dim -> value width``, no bias),
    the swish output gate.
    """

    def __init__(self, embed_dim: int, num_heads: int, **options: Unpack[DeltaNetOptions]) -> None:
        super().__init__(embed_dim, num_heads, **options)
        self.decay = StepDecay(embed_dim, num_heads, a_range=(0.0, 16.0))
        self.gate = nn.Linear(embed_dim, self.v_proj.out_features, bias=False)

    def log_decay(self, layer_input: Tensor, dtype: torch.dtype) -> Tensor:
        return self.decay(layer_input, dtype)[1]

    def finish(self, output: Tensor, layer_input: Tensor) -> Tensor:
        return self.norm(output, self.split_heads(self.gate(layer_input)))
