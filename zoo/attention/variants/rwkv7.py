"""RWKV-7 "Goose" (Peng et al., 2025, "RWKV-7 Goose with Expressive Dynamic State Evolution"): the
time-mixing layer, a generalized delta rule with a decay per channel and an in-context learning rate.

Each token is first mixed with the one before it (the token shift), with a learned share per
channel for each of six inputs: ``x^c_t = x_t + mu_c * (x_{t-1} - x_t)`` for ``c`` in r, w, k, v,
a, g. Then, per head (``dk = dv`` the head size)::

    r_t = x^r_t W_r,    k_t = x^k_t W_k,    v_t = x^v_t W_v
    w_t = exp(-exp(-0.5) sigmoid(d_t)),      d_t = b_w + tanh(x^w_t W_w1) W_w2      (decay per channel)
    a_t = sigmoid(b_a + x^a_t W_a1 W_a2)                                            (in-context learning rate)
    g_t = sigmoid(x^g_t W_g1) W_g2                                                  (output gate)
    kappa_t = normalize(k_t * xi),           k~_t = k_t * (1 + (a_t - 1) * alpha)
    wkv_t = wkv_{t-1} (Diag(w_t) - kappa_t^T (a_t * kappa_t)) + v_t^T k~_t
    p_t = GroupNorm(r_t wkv_t^T) + ((r_t * rho * k~_t) summed over the head) v_t
    o_t = (g_t * p_t) W_o

``wkv`` is ``(dv, dk)`` in the paper; the kernels keep its transpose ``S = wkv^T`` with row vectors,
``S_t = (Diag(w_t) - (a_t * kappa_t)^T kappa_t) S_{t-1} + k~_t^T v_t`` and ``r_t S_t`` read out: a
diagonal plus rank-one transition (:mod:`zoo.attention.kernels.dplr`, ``a = -(a_t * kappa_t)``,
``b = kappa_t``). The state's old value for ``kappa`` is removed at the rate ``a``, the rest decays by
``w``, and ``v`` is written at the key ``k~`` (the "replacement key": ``alpha`` sets how much ``a``
also scales the written key).

What follows the paper and BlinkDL's code (``RWKV-v7/train_temp/src/model.py``, and its numpy
reference ``rwkv_v7_numpy.py``): the formulas above; the low-rank sizes
(``max(32, round(2.5 sqrt(C) / 32) * 32)`` for ``w`` and ``a``, ``5 sqrt(C)`` for ``g``); the per-head
GroupNorm with its ``eps`` of ``1e-5 * head size`` (64e-5 for heads of 64); no biases in the
projections when the stack has none (the Shakespeare recipe's ``bias: false``); the initialization
(mixing shares, ``b_w``, ``b_a``, ``xi = 0.71 - ...``, ``alpha = 1.02``, ``rho = -0.04``, the first
low-rank maps at zero and the second orthogonal at 0.1). Where the zoo differs: that
initialization depends on the layer's depth, which a zoo layer does not know; it takes a middle
layer's (both of the code's ratios 0.5). The value residual (``v`` mixed with the first layer's
values, from the second layer on) needs the first layer's values, which the zoo's stacks do not
pass between layers: it is left out. The channel-mixing (FFN) half of an RWKV block is the zoo's
block's FFN. No rotary positions (RWKV has none: the shift and the decays give order). The token
shift, the low-rank maps and the GroupNorm are :mod:`zoo.attention.modules.rwkv`'s, which RWKV-6 shares.

Decoding keeps the ``(B, H, dk, dv)`` state and the last token's input (the shift's window) in a
:class:`~zoo.attention.contract.cache.StateCache`; a padded token enters the shift as zeros, as it enters a
short convolution in the other families, so left-padded prompts stay exact. The chunkwise form is
the zoo's own (exact to rounding); on CUDA with the ``fla`` extra it runs in fla's DPLR kernel
(``chunk_dplr_delta_rule``, which fla's ``chunk_rwkv7`` calls; :mod:`~zoo.attention.kernels.fla`).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn
from typing_extensions import Unpack

from zoo.attention.build.factory import register_attention_layer
from zoo.attention.contract.cache import StateCache
from zoo.attention.contract.context import AttentionContext
from zoo.attention.kernels.l2_norm import l2_normalize
from zoo.attention.modules.recurrence import LowRankRecurrence, RecurrenceForms
from zoo.attention.modules.recurrent import RecurrentLayer, RecurrentOptions
from zoo.attention.modules.rwkv import LowRankMap, head_group_norm, refuse_convolution, shift_pair

__all__ = ["LowRankMap", "RWKV7Attention"]

#: the inputs the token shift mixes, in the order of ``RWKV7Attention.mix``'s rows
_MIXED = ("r", "w", "k", "v", "a", "g")
#: the middle layer's depth ratios, which the initialization takes (see the module docstring)
_DEPTH = 0.5


def _lora_rank(width: int, factor: float) -> int:
    """BlinkDL's suggested low-rank size: ``max(32, round(factor * sqrt(width) / 32) * 32)``."""
    return max(32, int(round(factor * width**0.5 / 32) * 32))


@register_attention_layer("rwkv7", aliases=("rwkv", "rwkv_7"))
class RWKV7Attention(RecurrentLayer):
    """RWKV-7's time mixing (see the module docstring).

    Args:
        embed_dim: The block's width ``C``: keys, values and receptance are as wide.
        num_heads: Heads (RWKV-7 fixes their size at 64; here the stack's heads share ``C``).
        decay_rank, icl_rank, gate_rank: Ranks of the maps to ``w``, ``a`` and ``g``; None: BlinkDL's
            suggestion for ``C`` (see the module docstring).
        options: :class:`~zoo.attention.modules.recurrent.RecurrentLayer`'s ``mode``, ``chunk_size`` and
            ``bias``; no convolution (``conv_size`` 0: the token shift mixes neighbours instead) and
            no position scheme.

    Parameters: ``q_proj``, ``k_proj``, ``v_proj``, ``out_proj`` (``W_r``, ``W_k``, ``W_v``, ``W_o``);
    ``mix`` ``(6, C)`` (the shift's shares ``mu``, rows r, w, k, v, a, g); ``decay``, ``icl``, ``gate``
    (:class:`LowRankMap`); ``key_scale`` (``xi``), ``key_mix`` (``alpha``), ``bonus`` (``rho``,
    ``(H, dk)``); ``norm_weight``, ``norm_bias`` (the GroupNorm's, ``(H, dv)``).
    """

    supports_rotary = False

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        *,
        decay_rank: int | None = None,
        icl_rank: int | None = None,
        gate_rank: int | None = None,
        **options: Unpack[RecurrentOptions],
    ) -> None:
        refuse_convolution("RWKV7Attention", options)
        super().__init__(embed_dim, num_heads, key_dim=embed_dim, value_dim=embed_dim, conv_size=0, **options)
        width, size = embed_dim, self.head_dim
        ranks = {"decay_rank": decay_rank, "icl_rank": icl_rank, "gate_rank": gate_rank}
        for label, rank in ranks.items():
            if rank is not None and (not isinstance(rank, int) or rank < 1):
                raise ValueError(f"RWKV7Attention: {label} must be a positive integer or None, got {rank!r}.")
        position = torch.arange(width, dtype=torch.float32)
        linear = position / max(width - 1, 1) - 0.5
        zigzag = ((position % size) - (size - 1) / 2) / max((size - 1) / 2, 1)
        zigzag = zigzag * zigzag.abs()
        decay_base = -6 + 6 * (position / max(width - 1, 1)) ** (1 + _DEPTH**0.3)
        powers = torch.tensor([0.2, 0.9, 0.7, 0.7, 0.9, 0.2]) * _DEPTH  # the shares of r, w, k, v, a, g
        self.mix = nn.Parameter(1.0 - (position / width).unsqueeze(0) ** powers.unsqueeze(1))
        self.decay = LowRankMap(
            width, decay_rank or _lora_rank(width, 2.5), torch.tanh, decay_base + 0.5 + 2.5 * zigzag
        )
        self.icl = LowRankMap(width, icl_rank or _lora_rank(width, 2.5), None, -0.19 + 0.3 * zigzag + 0.4 * linear)
        self.gate = LowRankMap(width, gate_rank or _lora_rank(width, 5.0), torch.sigmoid, None)
        self.key_scale = nn.Parameter(0.71 - 0.1 * linear)
        self.key_mix = nn.Parameter(torch.full((width,), 1.02))
        self.bonus = nn.Parameter(torch.full((num_heads, size), -0.04))
        self.norm_weight = nn.Parameter(torch.ones(num_heads, size))
        self.norm_bias = nn.Parameter(torch.zeros(num_heads, size))
        self.norm_eps = 1e-5 * size

    def _project(
        self, x: Tensor, context: AttentionContext, cache: StateCache | None
    ) -> tuple[Tensor, Tensor, Tensor, Tensor, tuple[Tensor, ...]]:
        """Receptance, keys and values per head from the shifted inputs (the token before the first
        is the cache's window: the last token it saw, zeros without one); the layer's input as the
        pair ``(x_t, x_{t-1})`` ``(B, T, 2, C)`` (padded tokens as zeros); and the shift's window,
        the last token's input ``(B, 1, C)``."""
        pair, window = shift_pair(x, context.key_padding, None if cache is None else cache.extra[0])
        r, k, v = (
            self.split_heads(projection(self._mixed(pair, name)))
            for projection, name in ((self.q_proj, "r"), (self.k_proj, "k"), (self.v_proj, "v"))
        )
        return r, k, v, pair, (window,)

    def _mixed(self, pair: Tensor, name: str) -> Tensor:
        """``x_t + mu * (x_{t-1} - x_t)`` for the input ``name`` (one of r, w, k, v, a, g)."""
        x, before = pair.unbind(-2)
        return x + (before - x) * self.mix[_MIXED.index(name)].to(x.dtype)

    def prepare(self, queries: Tensor, keys: Tensor, values: Tensor, layer_input: Tensor) -> LowRankRecurrence:
        dtype = queries.dtype
        heads = lambda x: self.split_heads(x.to(dtype))  # noqa: E731  (B, T, C) -> (B, H, T, dk)
        per_head = lambda p: p.to(dtype).view(self.num_heads, 1, -1)  # noqa: E731  (C,) -> (H, 1, dk)
        log_decay = -math.exp(-0.5) * heads(self.decay(self._mixed(layer_input, "w"))).sigmoid()
        rate = heads(self.icl(self._mixed(layer_input, "a"))).sigmoid()
        kappa = l2_normalize(keys * per_head(self.key_scale))
        written = keys * (1 + (rate - 1) * per_head(self.key_mix))
        return LowRankRecurrence(queries, written, values, -(rate * kappa), kappa, log_decay)

    def _output(self, output: Tensor, recurrence: RecurrenceForms, steps: Tensor | None, layer_input: Tensor) -> Tensor:
        """The paper's ``p_t``: each head's GroupNorm of the read-out plus the bonus
        ``(r_t * rho * k~_t) v_t`` (none at a padded token), times the gate, projected back."""
        assert isinstance(recurrence, LowRankRecurrence)
        dtype = output.dtype
        normed = head_group_norm(output, self.norm_weight, self.norm_bias, self.norm_eps)
        bonus = (recurrence.q * self.bonus.to(dtype)[:, None] * recurrence.k).sum(-1, keepdim=True) * recurrence.v
        if steps is not None:
            bonus = torch.where(steps.unsqueeze(-1), bonus, bonus.new_zeros(()))
        merged = (normed + bonus).transpose(1, 2).flatten(-2)
        gated = merged * self.gate(self._mixed(layer_input, "g")).to(dtype)
        return self.out_proj(gated.to(layer_input.dtype))

    def extra_repr(self) -> str:
        return (
            f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, mode={self.mode!r}, chunk_size={self.chunk_size}"
        )
