"""RWKV-6 "Finch" (Peng et al., 2024, "Eagle and Finch: RWKV with Matrix-Valued States and Dynamic
Recurrence", arXiv 2404.05892): the time-mixing layer, linear attention whose state decays per
channel by a gate that depends on the data, read before the current token's write, with a bonus
for the current token.

The token shift depends on the data (the paper's ``ddlerp``): each of the five inputs r, w, k, v, g
mixes the token with the one before it by a share that a low-rank map computes from a first,
learned mix::

    lerp_c(a, b) = a + (b - a) * mu_c                 lora_c(x) = lambda_c + tanh(x A_c) B_c
    ddlerp_c(x_t, x_{t-1}) = x_t + (x_{t-1} - x_t) * lora_c(lerp_x(x_t, x_{t-1}))

Then, per head (``dk = dv`` the head size; the ``lambda`` of the mixes are the ``mu_c`` of RWKV-5)::

    r_t = ddlerp_r W_r,    k_t = ddlerp_k W_k,    v_t = ddlerp_v W_v,    g_t = ddlerp_g W_g
    d_t = lora_d(ddlerp_w),                     w_t = exp(-exp(d_t))          (decay per channel)
    wkv_t = Diag(u) k_t^T v_t + sum_{j < t} Diag(w_{j+1} ... w_{t-1}) k_j^T v_j
    o_t = (SiLU(g_t) * GroupNorm(r_t wkv_t)) W_o

that is ``o_t = r_t (S_{t-1} + Diag(u) k_t^T v_t)`` with ``S_t = Diag(w_t) S_{t-1} + k_t^T v_t``: the
state read before the token's write and decay, the token itself weighted by the bonus ``u`` per
head and channel. The recurrence runs on the decay kernels with its writes delayed by one step
(:mod:`zoo.attention.modules.bonus_recurrence`, which says how), in the three forms of every
recurrent family.

What follows the paper, BlinkDL's code (``RWKV-v6`` in ``RWKV-LM``) and flash-linear-attention's
layer (``fla/layers/rwkv6.py``; its recurrence ``fla/ops/rwkv6/recurrent_naive.py``): the formulas
above, with no scale on ``r``; the low-rank sizes (32 for the five mixes, 64 for the decay); the
GroupNorm per head with BlinkDL's ``eps`` of ``64e-5`` (``1e-5`` times his ``head_size_divisor``
squared); no biases in the projections when the stack has none; the initialization of the mixes,
the decay's ``lambda_d`` (``-6 + 5 (n / (C - 1)) ** (0.7 + 1.3 r)``) and the bonus (``r (1 - n /
(C - 1))`` plus a zigzag of 0.1), at a middle layer's depth ratios (``r = 0.5``: a zoo layer does not
know its depth, as :mod:`~zoo.attention.variants.rwkv7` explains). Where the zoo differs: keys are
the block's width, as in the paper and BlinkDL's code (fla halves them, ``expand_k = 0.5``); the
low-rank maps start as the zoo's RWKV-7 starts its own (:class:`~zoo.attention.modules.rwkv.LowRankMap`:
``A`` zero, ``B`` orthogonal with gain 0.1, where BlinkDL draws ``B`` uniform in ``+-0.01``: both start
each map at its ``lambda``); each mix has its own ``A`` (BlinkDL concatenates the five into one
matrix, the same map). The token shift, the low-rank maps and the GroupNorm are RWKV-7's
(:mod:`zoo.attention.modules.rwkv`). The channel-mixing half of an RWKV block is the zoo's block's
FFN; no rotary positions.

Decoding keeps the ``(B, H, dk, dv)`` state and the last token's input (the shift's window) in a
:class:`~zoo.attention.contract.cache.StateCache`; a padded token enters the shift as zeros and is an
identity step of the recurrence, so left-padded prompts stay exact. fla's ``chunk_rwkv6`` kernels
are not wired in: the zoo's forms run on every device.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from typing_extensions import Unpack

from zoo.attention.build.factory import register_attention_layer
from zoo.attention.contract.cache import StateCache
from zoo.attention.contract.context import AttentionContext
from zoo.attention.modules.bonus_recurrence import BonusRecurrence
from zoo.attention.modules.recurrent import RecurrentLayer, RecurrentOptions
from zoo.attention.modules.rwkv import LowRankMap, head_group_norm, refuse_convolution, shift_pair

__all__ = ["RWKV6Attention"]

#: the inputs the data-dependent token shift mixes, in the order of ``RWKV6Attention.mix``
_MIXED = ("r", "w", "k", "v", "g")
#: a middle layer's depth ratios (BlinkDL's ``ratio_0_to_1`` and ``ratio_1_to_almost0``)
_DEPTH = 0.5
#: BlinkDL's GroupNorm epsilon, ``1e-5 * head_size_divisor ** 2`` with his divisor of 8
_NORM_EPS = 64e-5


@register_attention_layer("rwkv6", aliases=("rwkv_6", "finch"))
class RWKV6Attention(RecurrentLayer):
    """RWKV-6's time mixing (see the module docstring).

    Args:
        embed_dim: The block's width ``C``: receptance, keys and values are as wide.
        num_heads: Heads (RWKV-6 fixes their size at 64; here the stack's heads share ``C``).
        mix_rank: Rank of each of the five mixes' low-rank maps (BlinkDL's 32).
        decay_rank: Rank of the decay's low-rank map (BlinkDL's 64).
        options: :class:`~zoo.attention.modules.recurrent.RecurrentLayer`'s ``mode``, ``chunk_size`` and
            ``bias``; no convolution (the token shift mixes neighbours instead) and no position scheme.

    Parameters: ``q_proj``, ``k_proj``, ``v_proj``, ``out_proj`` (``W_r``, ``W_k``, ``W_v``, ``W_o``);
    ``gate`` (``W_g``); ``shift_mix`` (``mu_x``, ``(C,)``); ``mix`` (five :class:`LowRankMap`, rows r, w,
    k, v, g, each's bias the ``lambda`` of its share); ``decay`` (``lora_d``); ``bonus`` (``u``,
    ``(H, dk)``); ``norm_weight``, ``norm_bias`` (the GroupNorm's, ``(H, dv)``).
    """

    supports_rotary = False
    fla_refusal = "flash-linear-attention's RWKV-6 kernels are not wired into the zoo"

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        *,
        mix_rank: int = 32,
        decay_rank: int = 64,
        **options: Unpack[RecurrentOptions],
    ) -> None:
        refuse_convolution("RWKV6Attention", options)
        super().__init__(embed_dim, num_heads, key_dim=embed_dim, value_dim=embed_dim, conv_size=0, **options)
        self.require_positive(mix_rank=mix_rank, decay_rank=decay_rank)
        width = embed_dim
        share = torch.arange(width, dtype=torch.float32) / width  # BlinkDL's ddd
        along = torch.arange(width, dtype=torch.float32) / max(width - 1, 1)  # n / (C - 1)
        mixes = {
            "r": 1 - share ** (0.5 * _DEPTH),
            "w": 1 - share**_DEPTH,
            "k": 1 - share**_DEPTH,
            "v": 1 - (share**_DEPTH + 0.3 * _DEPTH),
            "g": 1 - share ** (0.5 * _DEPTH),
        }
        self.shift_mix = nn.Parameter(1 - share**_DEPTH)
        self.mix = nn.ModuleList(LowRankMap(width, mix_rank, torch.tanh, mixes[name]) for name in _MIXED)
        self.decay = LowRankMap(width, decay_rank, torch.tanh, -6 + 5 * along ** (0.7 + 1.3 * _DEPTH))
        self.gate = nn.Linear(width, width, bias=False)
        zigzag = ((torch.arange(width) + 1) % 3 - 1) * 0.1
        self.bonus = nn.Parameter((_DEPTH * (1 - along) + zigzag).view(num_heads, self.head_dim))
        self.norm_weight = nn.Parameter(torch.ones(num_heads, self.head_dim))
        self.norm_bias = nn.Parameter(torch.zeros(num_heads, self.head_dim))

    def _project(
        self, x: Tensor, context: AttentionContext, cache: StateCache | None
    ) -> tuple[Tensor, Tensor, Tensor, Tensor, tuple[Tensor, ...]]:
        """Receptance, keys and values per head from their ``ddlerp`` of the shifted input (the token
        before the first is the cache's window); as the layer's input, the decay's and the gate's
        mixed inputs ``(B, T, 2, C)``; and the shift's window, the last token's input ``(B, 1, C)``."""
        pair, window = shift_pair(x, context.key_padding, None if cache is None else cache.extra[0])
        current, before = pair.unbind(-2)
        delta = before - current
        first = current + delta * self.shift_mix.to(x.dtype)
        mixed = {name: current + delta * lora(first) for name, lora in zip(_MIXED, self.mix)}
        r, k, v = (
            self.split_heads(projection(mixed[name]))
            for projection, name in ((self.q_proj, "r"), (self.k_proj, "k"), (self.v_proj, "v"))
        )
        return r, k, v, torch.stack([mixed["w"], mixed["g"]], dim=-2), (window,)

    def prepare(self, queries: Tensor, keys: Tensor, values: Tensor, layer_input: Tensor) -> BonusRecurrence:
        dtype = queries.dtype
        log_decay = -self.split_heads(self.decay(layer_input[..., 0, :]).to(dtype)).exp()
        return BonusRecurrence(queries, keys, values, log_decay, self.bonus.to(dtype).unsqueeze(-2))

    def finish(self, output: Tensor, layer_input: Tensor) -> Tensor:
        """Each head's GroupNorm of the read-out times ``SiLU(g_t)``."""
        gate = nn.functional.silu(self.split_heads(self.gate(layer_input[..., 1, :])).to(output.dtype))
        return head_group_norm(output, self.norm_weight, self.norm_bias, _NORM_EPS) * gate

    def extra_repr(self) -> str:
        return (
            f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, mode={self.mode!r}, chunk_size={self.chunk_size}"
        )
