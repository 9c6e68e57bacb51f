"""HGRN2 (Qin, Yang, Sun, Shen, Li, Sun and Zhong, 2024, "HGRN2: Gated Linear RNNs with State
Expansion", arXiv:2404.07904): a gated linear RNN whose forget gate also sets the input's weight,
expanded from a vector state to a matrix one.

Per head, with row vectors and a ``(dk, dv)`` state (``dk`` the expansion ratio)::

    f_t = lambda + (1 - lambda) * sigmoid(x_t W_f)          forget gate per key dimension, in (lambda, 1)
    S_t = Diag(f_t) S_{t-1} + (1 - f_t)^T i_t,              i_t = x_t W_i
    o_t = q_t S_t,                                          q_t = silu(x_t W_q) * dk ** -0.5
    y = RMSNorm(o) W_o

The key is tied to the forget gate (``k_t = 1 - f_t``: what the state forgets, the input fills), so
there is no key projection: ``k_proj`` here is HGRN2's ``W_f``, the forget gate's logits. The
recurrence is gated linear attention's, a decay per key dimension, and runs on the decay kernels
(:mod:`zoo.attention.kernels.decay`) in their three forms; ``log f_t`` is formed in log space,
``logaddexp(log lambda, log(1 - lambda) + logsigmoid(x_t W_f))``, so it never rounds to 0.

The reference code is flash-linear-attention's ``fla/layers/hgrn2.py``, which this follows: the
query's swish, the keys ``1 - f_t``, the scale ``dk ** -0.5`` (the GLA kernels' default it calls
them with), no output gate, one RMSNorm over the whole value width before the output projection,
no short convolution by default (``conv_size=4`` adds one on queries, forget logits and inputs,
without an activation, as fla's option does), no biases in the projections when the stack has none.

Where it departs: the lower bound ``lambda``. In the paper and fla it is learned per channel and
layer, a softmax over the layers of a parameter held by the model, cumulated so that it rises with
depth and is 0 in the first layer. A zoo layer does not know its depth nor sees the model's
parameters, so ``lambda`` is a fixed option here (``lower_bound``, 0 by default: the first layer's);
a stack gives each layer its own with a list of specs (rising with depth, as the paper's learns).
No position scheme: the gates give order, and the keys are gates, not projections to rotate.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from typing_extensions import Unpack

from zoo.attention.build.factory import register_attention_layer
from zoo.attention.modules.recurrent import Recurrence, RecurrentLayer, RecurrentOptions

__all__ = ["HGRN2Attention"]

#: the output norm's epsilon (fla's ``norm_eps``)
NORM_EPS = 1e-5


@register_attention_layer("hgrn2", aliases=("hgrn_2",))
class HGRN2Attention(RecurrentLayer):
    """HGRN2's token mixer (see the module docstring).

    Args:
        embed_dim: The block's width: the inputs ``i_t`` and the output are as wide.
        num_heads: Heads, each with its own ``(expand_ratio, embed_dim / num_heads)`` state.
        expand_ratio: The state's expansion, each head's key width ``dk`` (the forget gate's and
            the query's); None: the head size ``embed_dim / num_heads``.
        lower_bound: ``lambda`` in ``[0, 1)``, the forget gate's lower bound (see the module docstring).
        options: :class:`~zoo.attention.modules.recurrent.RecurrentLayer`'s (``conv_size`` 0 here,
            fla's); no position scheme.

    Parameters: ``q_proj``, ``k_proj`` (``W_f``), ``v_proj`` (``W_i``), ``out_proj``; ``norm_weight``,
    the output RMSNorm's scale over the whole width.
    """

    supports_rotary = False

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        *,
        expand_ratio: int | None = None,
        lower_bound: float = 0.0,
        **options: Unpack[RecurrentOptions],
    ) -> None:
        if expand_ratio is not None and (not isinstance(expand_ratio, int) or expand_ratio < 1):
            raise ValueError(f"HGRN2Attention: expand_ratio must be a positive integer or None, got {expand_ratio!r}.")
        if not 0.0 <= lower_bound < 1.0:
            raise ValueError(f"HGRN2Attention: lower_bound must be in [0, 1), got {lower_bound}.")
        options.setdefault("conv_size", 0)  # fla's HGRN2 has none by default
        key_dim = num_heads * (expand_ratio or max(embed_dim // num_heads, 1))
        super().__init__(embed_dim, num_heads, key_dim=key_dim, value_dim=embed_dim, **options)
        self.lower_bound = lower_bound
        self.norm_weight = nn.Parameter(torch.ones(embed_dim))

    def log_forget(self, logits: Tensor) -> Tensor:
        """``log f_t`` from the forget gate's logits: ``log(lambda + (1 - lambda) sigmoid(logits))``."""
        log_gate = F.logsigmoid(logits)
        if self.lower_bound == 0.0:
            return log_gate
        bound = torch.tensor(self.lower_bound, dtype=logits.dtype, device=logits.device)
        return torch.logaddexp(bound.log(), math.log1p(-self.lower_bound) + log_gate)

    def prepare(self, queries: Tensor, keys: Tensor, values: Tensor, layer_input: Tensor) -> Recurrence:
        log_forget = self.log_forget(keys)
        return Recurrence(F.silu(queries) * self.key_head_dim**-0.5, -torch.expm1(log_forget), values, log_forget)

    def finish(self, output: Tensor, layer_input: Tensor) -> Tensor:
        merged = output.transpose(1, 2).flatten(-2)  # (B, T, embed_dim): one norm over every head
        normed = F.rms_norm(merged, (merged.shape[-1],), self.norm_weight.to(output.dtype), NORM_EPS)
        return normed.unflatten(-1, (self.num_heads, -1)).transpose(1, 2)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, expand_ratio={self.key_head_dim}, lower_bound={self.lower_bound}"
