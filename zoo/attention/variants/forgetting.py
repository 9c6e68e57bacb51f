"""The Forgetting Transformer (Lin et al., 2025, "Forgetting Transformer: Softmax Attention with a
Forget Gate"): softmax attention whose logits decay with a forget gate computed from the input.

Per head, a forget gate ``f_t = sigmoid(w_f . x_t + b_f)`` in ``(0, 1)`` at every position, from
the layer's input ``x_t``, and the decay between a key at ``j`` and a query at ``i >= j`` the
product of the gates after the key:

    o_i = sum_{j <= i} exp(q_i . k_j / sqrt(d) + D_ij) v_j / sum_{j <= i} exp(q_i . k_j / sqrt(d) + D_ij)
    D_ij = sum_{l = j + 1}^{i} log f_l

so a head forgets at a rate the data sets, as a gated linear recurrence does, and with every gate
at 1 it is softmax attention. The decay is a bias on the logits, as ALiBi's is, but learned and
data-dependent; the paper trains without positional encoding (``--model.position none``). Here
``D_ij = c_i - c_j`` from one cumulative sum ``c`` of the log gates in float32, as in the
reference code, when a mask hides the same positions from every query (padding; none); under a
mask that differs per query, a sum along each query's row of the gates it sees. ``D`` reaches
the softmax as an additive ``(B, H, L, L)`` term (the fused kernel takes it as a float mask):
quadratic memory, where the reference's Triton kernel forms ``D`` block by block.

The layer is the ``softmax`` layer (:mod:`zoo.attention.variants.softmax`) with the gate added,
so it takes the same options: ``qk_norm`` and ``gate`` give two of the parts of the paper's
"Pro" block (QK-norm, an output gate); its output norm is left out, and the default is the
paper's basic FoX (the LLaMA block). The Pro block's data-dependent shift of keys and values
(each a learned, gated mix of a token's projection and its predecessor's) is not built; the
softmax layer's ``conv_size`` (a short causal depthwise convolution on queries, keys and
values, off by default) is the zoo's way of giving a token its neighbours, as the recurrent
families have it, and is what recall needs first (``docs/results/recall.md``, the previous-token
head). ``sinks`` work too; a sliding window does not (the gate is the layer's forgetting). The
gate's projection has a bias, as the reference's; its initial values are PyTorch's defaults (the
reference draws the weight from ``N(0, 0.02^2)`` with a zero bias: gates near 0.5 either way). Gates
near 0.5 start the layer as a local one: a key ``n`` positions back is ``0.69 n`` lower in the
logits, so at first nothing beyond a few tokens is read. ``forget_bias`` ``b`` starts the bias there
instead, gates near ``sigmoid(b)`` (5: 0.993, a key 100 back lowered by 0.67), as LSTMs start their
forget gates open (Gers et al., 2000) and Mamba its decays slow: the layer starts near softmax
attention and learns what to forget (``docs/results/recall.md``, MQAR (256, 16) with the short
convolution: on MQAR at 256 tokens the default stays on the plateau).

Causal only (``supports_bidirectional`` is False): the decay runs from the past to the present.
A position hidden from a query by a mask is neither read nor forgets for it: its gate leaves
the query's sums (the reference zeroes the gates before a left-padded row's first token, the
same for left padding), so a padded token changes nothing a real one computes. Decoding keeps
the keys, the values and the log gates (in float32 at least) of every position seen (:class:`ForgetCache`),
and with a convolution its windows beside them (a :class:`~zoo.attention.contract.cache.ConvolvedCache`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from typing_extensions import Unpack

from zoo.attention.build.factory import register_attention_layer
from zoo.attention.contract.base import AttentionOutput
from zoo.attention.contract.cache import ConvolvedCache, LayerCache
from zoo.attention.contract.context import AttentionContext
from zoo.attention.contract.masking import key_column
from zoo.attention.kernels.chunking import QUERY_CHUNK
from zoo.attention.modules import row_blocks
from zoo.attention.modules.row_blocks import checkpointed_blocks, rows_of
from zoo.attention.variants.softmax import SoftmaxAttention
from zoo.attention.variants.softmax_options import SoftmaxOptions

__all__ = ["ForgetCache", "ForgettingAttention"]


@dataclass(frozen=True)
class ForgetCache:
    """The keys and values of every position seen, ``(B, num_kv_heads, L, d)`` each, rotated as
    a :class:`~zoo.attention.contract.cache.KeyValueCache`'s, and the log forget gates ``(B, H, L)``
    (float32 at least) at their positions."""

    keys: Tensor
    values: Tensor
    log_forget: Tensor

    @property
    def length(self) -> int:
        return self.keys.shape[-2]

    @property
    def nbytes(self) -> int:
        return self.keys.nbytes + self.values.nbytes + self.log_forget.nbytes

    def extend(self, keys: Tensor, values: Tensor, log_forget: Tensor) -> ForgetCache:
        """This cache followed by new positions'."""
        return ForgetCache(
            torch.cat([self.keys, keys], dim=-2),
            torch.cat([self.values, values], dim=-2),
            torch.cat([self.log_forget, log_forget], dim=-1),
        )

    def select(self, index: Tensor) -> ForgetCache:
        return ForgetCache(*(t.index_select(0, index) for t in (self.keys, self.values, self.log_forget)))


@register_attention_layer("forgetting", aliases=("fox", "forgetting_transformer"))
class ForgettingAttention(SoftmaxAttention):
    """Softmax attention with a forget gate per head and position (see the module docstring).

    Args:
        embed_dim, num_heads: The stack's width and heads (it fills them).
        forget_bias: The gates' initial bias (see the module docstring); None: PyTorch's default.
        options: ``qk_norm``, ``gate``, ``sinks`` and ``conv_size`` as the ``softmax`` layer's; ``num_kv_heads``,
            ``dropout``, ``position`` and ``bias``, the stack's (it fills them). Not its
            ``window``: the gate is the layer's forgetting.

    Parameters besides the ``softmax`` layer's: ``forget_proj`` (``embed_dim -> num_heads``, with
    a bias), the gates' logits.
    """

    family = "softmax"
    cost = "L²"

    supports_bidirectional = False

    def __init__(
        self, embed_dim: int, num_heads: int, *, forget_bias: float | None = None, **options: Unpack[SoftmaxOptions]
    ) -> None:
        super().__init__(embed_dim, num_heads, **options)
        self.forget_proj = nn.Linear(embed_dim, num_heads)
        if forget_bias is not None:
            nn.init.constant_(self.forget_proj.bias, forget_bias)

    def log_forget(self, x: Tensor) -> Tensor:
        """``log f`` ``(B, H, L)`` at the positions of ``x``, in float32 at least."""
        logits = self.forget_proj(x)
        return F.logsigmoid(logits.to(torch.promote_types(logits.dtype, torch.float32))).transpose(1, 2)

    def decay(self, log_forget: Tensor, context: AttentionContext, first: int) -> Tensor:
        """``D`` ``(B, H, Lq, Lk)``: for query ``i`` (at ``first + i``) and key ``j``, the sum of
        ``log f`` over the positions after ``j`` that the query sees (itself included)."""
        num_keys = log_forget.shape[-1]
        padding = None if context.mask is None else key_column(context.mask)
        if context.mask is None or padding is not None:  # the same positions for every query: one cumulative sum
            gates = log_forget if padding is None else log_forget * padding.squeeze(-1).to(log_forget.dtype)
            cumulative = gates.cumsum(-1)
            return cumulative[..., first:, None] - cumulative[..., None, :]  # hidden (later) pairs are masked
        query_positions = torch.arange(first, num_keys, device=log_forget.device)
        seen = self._visible(context, query_positions, torch.arange(num_keys, device=log_forget.device))
        gates = log_forget[..., None, :].expand(*log_forget.shape[:-1], len(query_positions), num_keys)
        gates = gates if seen is None else gates.masked_fill(~seen, 0.0)
        suffix = gates.flip(-1).cumsum(-1).flip(-1)  # over positions l >= j
        return torch.cat([suffix[..., 1:], torch.zeros_like(suffix[..., :1])], -1)  # over l > j

    def attend(self, x: Tensor, context: AttentionContext) -> AttentionOutput:
        """``x`` ``(B, L, embed_dim)`` over itself, causally, the decay on the logits; past
        :data:`~zoo.attention.modules.row_blocks.ROW_BLOCK_ELEMENTS` logits a block of
        :data:`~zoo.attention.kernels.chunking.QUERY_CHUNK` queries at a time over the keys up to
        its last, under activation checkpointing: one block's ``(B, H, Lq, Lk)`` decay in memory."""
        q, k, v, _ = self._projected(x, context, None, context.offset)
        log_forget = self.log_forget(x)
        length = x.shape[1]
        whole = x.shape[0] * self.num_heads * length**2 <= row_blocks.ROW_BLOCK_ELEMENTS
        if whole or context.need_weights or context.kv_store is not None:  # a store is written once, whole
            logits = self.decay(log_forget, context, first=0)
            return self.attend_positions(x, k, v, context, first=0, logits=logits, projected_queries=q)

        def run(start: int, end: int) -> Tensor:
            block = rows_of(context, start, end)
            logits = self.decay(log_forget[..., :end], block, first=start)
            return self.attend_positions(
                x[:, start:end], k[..., :end, :], v[..., :end, :], block, first=start, logits=logits,
                projected_queries=None if q is None else q[:, start:end],
            ).output  # fmt: skip

        return AttentionOutput(torch.cat(checkpointed_blocks(run, length, QUERY_CHUNK), dim=1), None)

    def attend_cached(
        self, x: Tensor, cache: LayerCache | None, context: AttentionContext | None = None
    ) -> tuple[Tensor, LayerCache]:
        """New positions after a :class:`ForgetCache` of the earlier ones (in a
        :class:`~zoo.attention.contract.cache.ConvolvedCache` with the convolutions' windows when the layer
        convolves)."""
        held, windows = self.unwrap_cache(cache, ForgetCache)
        context = AttentionContext(is_causal=True) if context is None else context
        seen = 0 if held is None else held.length
        q, k, v, windows = self._projected(x, context, windows, seen)
        log_forget = self.log_forget(x)
        held = ForgetCache(k, v, log_forget) if held is None else held.extend(k, v, log_forget)
        logits = self.decay(held.log_forget, context, first=seen)
        output, _ = self.attend_positions(
            x, held.keys, held.values, context, first=seen, logits=logits, projected_queries=q
        )
        return output, ConvolvedCache.wrap(held, windows)
