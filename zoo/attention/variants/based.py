"""Based (Arora, Eyuboglu, Zhang, Timalsina, Alberti, Zinsley, Zou, Rudra and Ré, 2024, "Simple
linear attention language models balance the recall-throughput tradeoff", arXiv:2402.18668):
linear attention with a second-order Taylor feature map, plus a small sliding window of softmax
attention, in one layer.

The Taylor part, per head, with queries and keys of a small feature size ``d`` (16)::

    phi(x) = [1, x / d ** (1/4), vec(x x^T) / (sqrt(2) sqrt(d))]        (1 + d + d^2 features)
    phi(q) . phi(k) = 1 + s + s^2 / 2,        s = q . k / sqrt(d)       (exp(s) to second order)
    S_t = S_{t-1} + phi(k_t)^T v_t,    z_t = z_{t-1} + phi(k_t),    o_t = phi(q_t) S_t / (phi(q_t) . z_t)

``1 + s + s^2 / 2 = ((1 + s)^2 + 1) / 2 >= 1/2``, so every weight is positive and the denominator
never vanishes at a real token. The recurrence is the decay kernels' with no decay
(:mod:`zoo.attention.kernels.decay`, a log decay of 0): the values carry one more feature, 1, whose
read-out is the denominator ``phi(q_t) . z_t``, so the three forms and decoding from a fixed state
are the kernels' and the normalization is one division after them.

The window part: softmax attention of each query over the last ``window`` positions (64, the
paper's), itself included, with its own query, key, value and output maps (heads of
``embed_dim / num_heads``, scaled by ``head_dim ** -0.5``), on the zoo's sliding-window kernel
(:func:`~zoo.attention.kernels.window.window_blocks`, ``O(T * window)``). Decoding keeps the last
``window - 1`` keys and values (zeros, marked unseen, before the first position), so the layer's
cache stays a fixed size, the Taylor state beside them in one
:class:`~zoo.attention.contract.cache.StateCache`.

The layer's output is the sum of the two parts, each through its own output projection:
``y = o_taylor W_o + o_window W_o'``.

What is built, and why. In the paper and Zoology (``zoology/mixers/based.py`` and its configs) Based
is a hybrid of layers: Taylor linear attention layers, sliding-window attention layers and short
gated convolutions, stacked. flash-linear-attention's ``fla/layers/based.py`` is the linear
attention layer alone (``fla/ops/based/naive.py`` its reference). The zoo's ``based`` is one layer
holding both, Taylor features plus a sliding window, the two mixers side by side on the same input
(in parallel, not one after the other); a stack can still build the paper's hybrid from
``based`` with ``window=0`` (the Taylor part alone, fla's layer) between ``softmax`` layers with a
``window`` and ``conv_size``. Followed from the reference code: the feature map's scalings (Zoology's
``TaylorExp``; fla keeps the ``d (d + 1) / 2`` distinct products of ``x x^T``, with the same dot
products), the feature size 16, no biases in the projections when the stack has none, no short
convolution in the linear part (``conv_size`` adds one, without an activation). Departures: no
``eps`` in the denominator (fla adds ``1e-6``, Zoology ``1e-12``: it is at least 1/2 here, and a
padded step, which reads nothing, is divided by 1); the stack's rotary scheme, if any, rotates the
window's queries and keys only (the Taylor part has no positions, as in Based). No weights
(``need_weights``): the two parts read different values through different projections, so no one
``(T, T)`` matrix gives the output.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn
from typing_extensions import Unpack

from zoo.attention.build.factory import register_attention_layer
from zoo.attention.contract.base import AttentionOutput
from zoo.attention.contract.cache import LayerCache, StateCache
from zoo.attention.contract.context import AttentionContext
from zoo.attention.kernels.sdpa import masked_sdpa
from zoo.attention.kernels.window import window_blocks
from zoo.attention.modules.recurrence import Recurrence
from zoo.attention.modules.recurrent import RecurrentLayer, RecurrentOptions
from zoo.attention.modules.rotation import rotate_heads

__all__ = ["BasedAttention", "taylor_features"]

#: what the window part keeps in the cache after the Taylor part's windows: keys, values, and
#: whether each of those positions was a real token
WINDOW_HELD = 3


def taylor_features(x: Tensor) -> Tensor:
    """``phi(x)`` ``(..., 1 + d + d^2)`` of ``x`` ``(..., d)``: ``phi(q) . phi(k) = 1 + s + s^2 / 2``
    with ``s = q . k / sqrt(d)`` (see the module docstring)."""
    size = x.shape[-1]
    squares = (x.unsqueeze(-1) * x.unsqueeze(-2)).flatten(-2) / math.sqrt(2 * size)
    return torch.cat([x.new_ones(*x.shape[:-1], 1), x / size**0.25, squares], dim=-1)


@register_attention_layer("based", aliases=("based_attention",))
class BasedAttention(RecurrentLayer):
    """Based: Taylor linear attention plus a sliding window (see the module docstring).

    Args:
        embed_dim: The block's width.
        num_heads: Heads of both parts; the values' head size is ``embed_dim / num_heads``.
        feature_dim: The Taylor part's query and key size per head ``d`` (the paper's 16).
        window: Positions each query sees in the window part, itself included; 0: no window part
            (fla's linear attention layer alone).
        options: :class:`~zoo.attention.modules.recurrent.RecurrentLayer`'s (``conv_size`` 0 here);
            a rotary ``position`` rotates the window part's queries and keys.

    Parameters: ``q_proj``, ``k_proj`` (``embed_dim -> num_heads * feature_dim``), ``v_proj``,
    ``out_proj``, the Taylor part's; ``window_proj`` (``embed_dim -> 3 embed_dim``: queries, keys,
    values) and ``window_out``, the window part's.
    """

    family = "kernelized"
    supports_weights = False

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        *,
        feature_dim: int = 16,
        window: int = 64,
        **options: Unpack[RecurrentOptions],
    ) -> None:
        self.require_positive(feature_dim=feature_dim)
        if not isinstance(window, int) or window < 0:
            raise ValueError(f"BasedAttention: window must be a non-negative integer (0: none), got {window!r}.")
        options.setdefault("conv_size", 0)  # Based's linear attention has none
        position = options.pop("position", None)
        super().__init__(
            embed_dim, num_heads, key_dim=num_heads * feature_dim, value_dim=embed_dim, position=position, **options
        )
        self.feature_dim, self.window = feature_dim, window
        self.rotary = None  # the Taylor part has no positions; the window's queries and keys are rotated
        self.window_rotary = None if position is None else position.for_head_dim(self.head_dim)
        bias = options.get("bias", True)
        self.window_proj = nn.Linear(embed_dim, 3 * embed_dim, bias=bias) if window else None
        self.window_out = nn.Linear(embed_dim, embed_dim, bias=bias) if window else None

    def prepare(self, queries: Tensor, keys: Tensor, values: Tensor, layer_input: Tensor) -> Recurrence:
        counted = torch.cat([values, values.new_ones(*values.shape[:-1], 1)], dim=-1)  # the last: phi(q) . z
        no_decay = values.new_zeros(1, 1, 1)
        return Recurrence(taylor_features(queries), taylor_features(keys), counted, no_decay)

    def finish(self, output: Tensor, layer_input: Tensor) -> Tensor:
        numerator, denominator = output[..., :-1], output[..., -1:]
        return numerator / torch.where(denominator == 0, 1.0, denominator)  # 0 at a padded step only

    def attend(self, x: Tensor, context: AttentionContext) -> AttentionOutput:
        """The Taylor part from a zero state plus the window part from the sequence's start."""
        output = super().attend(x, context).output
        if self.window_proj is not None:
            output = output + self._window_part(x, context, None, 0)[0]
        return AttentionOutput(output, None)

    def attend_cached(
        self, x: Tensor, cache: LayerCache | None, context: AttentionContext | None = None
    ) -> tuple[Tensor, LayerCache]:
        """New positions after ``cache``: the Taylor part continues its state, the window part the
        keys and values of the last ``window - 1`` positions, both held in one ``StateCache``."""
        if cache is not None and not isinstance(cache, StateCache):
            raise TypeError(f"{type(self).__name__} continues a StateCache; got a {type(cache).__name__}.")
        held, taylor = None, cache
        if cache is not None and self.window_proj is not None:
            split = len(cache.extra) - WINDOW_HELD
            held, taylor = cache.extra[split:], StateCache(cache.state, cache.length, cache.extra[:split])
        output, taylor_cache = super().attend_cached(x, taylor, context)
        assert isinstance(taylor_cache, StateCache)
        if self.window_proj is None:
            return output, taylor_cache
        context = AttentionContext(is_causal=True) if context is None else context
        if context.mask is not None:
            context = context.replace(mask=context.mask[..., -x.shape[1] :])
        offset = 0 if cache is None else cache.length
        window_output, held = self._window_part(x, context, held, offset)
        extra = taylor_cache.extra + held
        return output + window_output, StateCache(taylor_cache.state, taylor_cache.length, extra)

    def _window_part(
        self, x: Tensor, context: AttentionContext, held: tuple[Tensor, ...] | None, offset: int
    ) -> tuple[Tensor, tuple[Tensor, ...]]:
        """The window part's output ``(B, T, embed_dim)`` for ``x`` at positions ``offset ..`` after
        the ``held`` keys, values and real-token marks of the ``window - 1`` positions before it
        (None: a sequence's start), and those after it. A padded query reads nothing."""
        assert self.window_proj is not None and self.window_out is not None
        batch, steps, _ = x.shape
        q, k, v = (self.split_heads(t) for t in self.window_proj(x).chunk(3, dim=-1))  # (B, H, T, hd)
        q = rotate_heads(self.window_rotary, q, offset, context)
        k = rotate_heads(self.window_rotary, k, offset, context)
        padding = context.key_padding
        real = x.new_ones(batch, steps, dtype=torch.bool) if padding is None else padding.all(dim=1)
        before = self.window - 1
        if held is None:
            held = (k.new_zeros(batch, self.num_heads, before, self.head_dim),) * 2 + (real.new_zeros(batch, before),)
        keys, values = torch.cat([held[0], k], dim=-2), torch.cat([held[1], v], dim=-2)
        seen = torch.cat([held[2], real], dim=-1)  # (B, window - 1 + T)
        mask = seen[:, None, None, :]
        scale = self.head_dim**-0.5
        output = window_blocks(
            q, keys, values, window=self.window, sink_tokens=0, is_causal=True, first=before, mask=mask, scale=scale
        )
        if output is None:  # the window spans most of the keys: one dense call
            gap = before + torch.arange(steps, device=x.device)[:, None] - torch.arange(keys.shape[-2], device=x.device)
            output = masked_sdpa(q, keys, values, mask & (gap >= 0) & (gap < self.window), scale=scale)
        output = torch.where(real[:, None, :, None], output, output.new_zeros(()))
        kept = keys.shape[-2] - before
        return self.window_out(output.transpose(1, 2).flatten(-2)), (
            keys[..., kept:, :],
            values[..., kept:, :],
            seen[:, kept:],
        )

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, feature_dim={self.feature_dim}, window={self.window}"
