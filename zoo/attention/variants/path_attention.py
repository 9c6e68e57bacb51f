"""PaTH attention (Yang, Shen, Wen, Tan, Mishra, Ren, Panda and Kim, 2025, "PaTH Attention: Position
Encoding via Accumulating Householder Transformations", arXiv 2505.16381): softmax attention
whose positions are products of data-dependent Householder-like maps, in place of rotary angles.

Per head, every position ``s`` writes a unit vector ``w_s`` and a strength ``beta_s`` in ``(0, 2)``
from the layer's input, ``H_s = I - beta_s w_s w_s^T``, and

    o_i = sum_{j <= i} softmax_j(q_i^T H_i H_{i-1} ... H_{j+1} k_j / sqrt(d) + D_ij) v_j

where RoPE's fixed rotation by ``i - j`` becomes a product of maps the data chooses (``beta > 1``
gives negative eigenvalues, reflections, which the paper's state-tracking results need). With
``forget_gate`` the layer is the paper's PaTH-FoX: ``D_ij = sum_{j < l <= i} log f_l`` is the
Forgetting Transformer's decay, read from :class:`~zoo.attention.variants.forgetting.ForgettingAttention`
(this layer is that one with the Householder scores), else ``D = 0``. The scores' three forms,
all equal, are :mod:`zoo.attention.kernels.householder`'s: the full forward runs the blockwise one
(``chunk_size``; None: the naive loop over positions), decoding the recurrent one. The scores
are formed whole, ``(B, H, L, L)``, up to :data:`~zoo.attention.modules.row_blocks.ROW_BLOCK_ELEMENTS`
of them; past it (8 heads at 4k tokens) the blockwise form's per-chunk terms are formed once and
the scores a block of about 1,024 queries at a time (whole chunks), each block under activation
checkpointing, as the ``sigmoid`` layer runs long inputs: memory for one block's grid, at the
price of one more forward of its scores, where fla's Triton kernel keeps them to tiles as flash
attention does.

As flash-linear-attention's ``fla/layers/path_attn.py``: ``w_s`` comes from a low-rank
projection (``embed_dim -> w_rank -> kv heads * d``, no biases; ``w_rank`` None: one full
projection, as fla uses under grouped key/value heads), a short causal depthwise convolution of
``w_conv_size`` taps with SiLU (no bias), then an L2 norm per head; ``beta_s = 2 sigmoid(.)`` from
its own projection with a bias, one per key/value head; queries, keys and values are the
``softmax`` layer's (QK-norm, the output gate, sinks and ``conv_size`` on them as options; off by
default, as in fla's). Departures: fla multiplies the forget gate's decay by ``1 / sqrt(d)`` with
the scores (``(q . k + D) / sqrt(d)``); here ``D`` enters unscaled, as in the Forgetting
Transformer the gate comes from, so PaTH-FoX with every ``H`` the identity is ``forgetting``
exactly. fla's projections have no biases; here they follow the stack's ``bias``.

Causal only, and no rotary or bias positions (PaTH is the position encoding; the paper uses none
beside it). A padded position's map is the identity (``beta = 0``) and its ``w`` input enters the
convolution as zero, so it moves no visible key; the maps are shared by every query, so a mask
must hide a position from every query alike (``supports_query_mask = False``). Decoding keeps a
:class:`PathCache`: the keys already carried through the last position (each new position
applies its ``H`` to every cached key, as the paper decodes), the values, the log forget gates
with the gate, and the ``w`` convolution's last inputs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from typing_extensions import Unpack

from zoo.attention.build.factory import register_attention_layer
from zoo.attention.contract.base import AttentionOutput
from zoo.attention.contract.cache import ConvolvedCache, LayerCache
from zoo.attention.contract.context import AttentionContext
from zoo.attention.contract.masking import masked_softmax
from zoo.attention.kernels.chunking import QUERY_CHUNK
from zoo.attention.kernels.explicit_softmax import sink_weights
from zoo.attention.kernels.householder import (
    PathChunks,
    path_chunks,
    path_keys_at_end,
    path_recurrent,
    path_score_rows,
    path_scores,
)
from zoo.attention.kernels.short_conv import causal_conv1d, short_convolutions
from zoo.attention.modules import row_blocks
from zoo.attention.modules.row_blocks import checkpointed_blocks, rows_of
from zoo.attention.variants.forgetting import ForgettingAttention
from zoo.attention.variants.softmax_options import SoftmaxOptions

__all__ = ["PathAttention", "PathCache"]


@dataclass(frozen=True)
class PathCache:
    """The keys ``(B, num_kv_heads, L, d)`` carried through the last position seen, the values
    ``(B, num_kv_heads, L, d)``, the log forget gates ``(B, H, L)`` (None without the gate) and
    the ``w`` convolution's last inputs ``(B, w_conv_size - 1, num_kv_heads * d)`` (None without it)."""

    keys: Tensor
    values: Tensor
    log_forget: Tensor | None
    w_window: Tensor | None

    @property
    def length(self) -> int:
        return self.keys.shape[-2]

    @property
    def nbytes(self) -> int:
        return sum(t.nbytes for t in (self.keys, self.values, self.log_forget, self.w_window) if t is not None)

    def select(self, index: Tensor) -> PathCache:
        return PathCache(*(None if t is None else t.index_select(0, index) for t in self._fields()))

    def _fields(self) -> tuple[Tensor | None, ...]:
        return self.keys, self.values, self.log_forget, self.w_window


@register_attention_layer("path_attention", aliases=("path", "path_attn"))
class PathAttention(ForgettingAttention):
    """Softmax attention over Householder-carried keys, PaTH-FoX with ``forget_gate`` (see the
    module docstring).

    Args:
        embed_dim, num_heads: The stack's width and heads (it fills them).
        forget_gate: The Forgetting Transformer's gate on the logits (PaTH-FoX).
        forget_bias: With the gate: its initial bias (``forgetting``'s); None: PyTorch's default.
        w_rank: Width of the low-rank projection to ``w``; None: one full projection.
        w_conv_size: Taps of the short convolution on ``w`` (fla's 3); 0 for none (and no SiLU).
        chunk_size: Chunk of the blockwise scores in the full forward; None: the naive form.
        options: ``qk_norm``, ``gate``, ``sinks``, ``conv_size``, ``num_kv_heads``, ``dropout``
            and ``bias`` as the ``softmax`` layer's.

    Parameters besides the ``softmax`` layer's: ``w_proj`` (a ``nn.Sequential`` of two linear maps,
    or one), ``w_conv`` (depthwise ``nn.Conv1d``), ``beta_proj`` (``embed_dim -> num_kv_heads``),
    and with the gate ``forget_proj`` (``embed_dim -> num_heads``).
    """

    family = "softmax"
    cost = "L²"

    supports_rotary = False
    supports_position_bias = False
    supports_query_mask = False

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        *,
        forget_gate: bool = False,
        forget_bias: float | None = None,
        w_rank: int | None = 32,
        w_conv_size: int = 3,
        chunk_size: int | None = 64,
        **options: Unpack[SoftmaxOptions],
    ) -> None:
        name = type(self).__name__
        if forget_bias is not None and not forget_gate:
            raise ValueError(f"{name}: forget_bias={forget_bias} needs forget_gate=True; set it or drop forget_bias.")
        if w_rank is not None and (not isinstance(w_rank, int) or w_rank < 1):
            raise ValueError(f"{name}: w_rank must be a positive integer or None (a full projection); got {w_rank!r}.")
        if chunk_size is not None and (not isinstance(chunk_size, int) or chunk_size < 1):
            raise ValueError(f"{name}: chunk_size must be a positive integer or None (naive form); got {chunk_size!r}.")
        super().__init__(embed_dim, num_heads, forget_bias=forget_bias, **options)
        if not forget_gate:
            self.forget_proj = None  # type: ignore[assignment]
        kv_dim = self.num_kv_heads * self.head_dim
        self.w_proj: nn.Module = (
            nn.Linear(embed_dim, kv_dim, bias=False)
            if w_rank is None
            else nn.Sequential(nn.Linear(embed_dim, w_rank, bias=False), nn.Linear(w_rank, kv_dim, bias=False))
        )
        (self.w_conv,) = short_convolutions(name, w_conv_size, [kv_dim])
        self.beta_proj = nn.Linear(embed_dim, self.num_kv_heads)
        self.chunk_size = chunk_size

    def householders(
        self, x: Tensor, context: AttentionContext, window: Tensor | None
    ) -> tuple[Tensor, Tensor, Tensor | None]:
        """``w`` ``(B, num_kv_heads, T, d)`` (unit rows) and ``beta`` ``(B, num_kv_heads, T)`` (zero
        at padded positions), in float32 at least, of ``x`` ``(B, T, embed_dim)``, and the ``w``
        convolution's window after ``x`` (continuing ``window``; None without the convolution)."""
        padding = context.key_padding
        real = None if padding is None else padding[..., -x.shape[1] :].all(dim=1).to(x.dtype)  # (B, T)
        projected = self.w_proj(x)
        if self.w_conv is not None:
            masked = projected if real is None else projected * real[..., None]
            projected, window = causal_conv1d(masked, self.w_conv.weight, None, window, activation="silu")
        compute = torch.promote_types(x.dtype, torch.float32)  # a zero w normalizes to zero, not 0 / 0
        w = F.normalize(self._split_heads(projected).to(compute), dim=-1)
        beta = 2 * torch.sigmoid(self.beta_proj(x).to(compute))
        beta = beta if real is None else beta * real[..., None]
        return w, beta.transpose(1, 2), window

    def attend(self, x: Tensor, context: AttentionContext) -> AttentionOutput:
        """``x`` ``(B, L, embed_dim)`` over itself, causally: the blockwise (or naive) scores, a block
        of queries at a time past :data:`~zoo.attention.modules.row_blocks.ROW_BLOCK_ELEMENTS`."""
        return self._whole(x, context, cached=False)[0]

    def _whole(
        self, x: Tensor, context: AttentionContext, *, cached: bool
    ) -> tuple[AttentionOutput, LayerCache | None]:
        """:meth:`attend`'s output and, with ``cached`` and a ``chunk_size``, the :class:`PathCache`
        after ``x`` (every key carried through its last position by the chunks' products), so that a
        prompt is encoded by the blockwise form, not a step a position; None otherwise."""
        projected, k, v, windows = self._projected(x, context, None, 0)
        q = self._queries(x, 0, context) if projected is None else self._query_heads(projected, 0, context)
        w, beta, w_window = self.householders(x, context, None)
        groups = self.num_heads // self.num_kv_heads
        repeated = [t.repeat_interleave(groups, dim=1) for t in (k, w, beta)]
        log_forget = None if self.forget_proj is None else self.log_forget(x)
        if self.chunk_size is None:
            heads, weights = self._heads(path_scores(q, *repeated), v, context, first=0, log_forget=log_forget)
            return self._output(x, heads, weights if context.need_weights else None), None
        chunks = path_chunks(q, *repeated, self.chunk_size)
        if context.need_weights or q.shape[0] * self.num_heads * chunks.length**2 <= row_blocks.ROW_BLOCK_ELEMENTS:
            scores = path_score_rows(chunks, 0, chunks.num_chunks)[..., : chunks.length, : chunks.length]
            heads, weights = self._heads(scores, v, context, first=0, log_forget=log_forget)
        else:
            heads, weights = self._row_blocks(chunks, v, context, log_forget), None
        output = self._output(x, heads, weights if context.need_weights else None)
        if not cached:
            return output, None
        keys = path_keys_at_end(chunks)[:, ::groups]  # the key heads: each repeated ``groups`` times
        return output, ConvolvedCache.wrap(PathCache(keys, v, log_forget, w_window), windows)

    def _row_blocks(
        self, chunks: PathChunks, v: Tensor, context: AttentionContext, log_forget: Tensor | None
    ) -> Tensor:
        """The heads ``(B, H, L, d)`` a block of about :data:`~zoo.attention.kernels.chunking.QUERY_CHUNK`
        queries (whole chunks) at a time, each block's rows of scores over the keys up to its last
        query, under activation checkpointing when gradients are on (its grid recomputed in the
        backward pass, not kept): the same computation as the whole grid's, in a block's memory."""
        size = chunks.chunk_size

        def run(start: int, end: int) -> Tensor:
            first, last = start // size, -(-end // size)
            scores = path_score_rows(chunks, first, last)[..., : end - start, :end]
            forget = None if log_forget is None else log_forget[..., :end]
            return self._heads(scores, v[..., :end, :], rows_of(context, start, end), first=start, log_forget=forget)[0]

        blocks = checkpointed_blocks(run, chunks.length, max(1, QUERY_CHUNK // size) * size)
        return torch.cat(blocks, dim=-2)

    def attend_cached(
        self, x: Tensor, cache: LayerCache | None, context: AttentionContext | None = None
    ) -> tuple[Tensor, LayerCache]:
        """New positions after a :class:`PathCache` of the earlier ones (in a
        :class:`~zoo.attention.contract.cache.ConvolvedCache` with the ``conv_size`` convolutions'
        windows when the layer has them): the recurrent form, or for a prompt with no cache before it
        the blockwise one, its keys then carried to its end (:func:`path_keys_at_end`)."""
        held, windows = self.unwrap_cache(cache, PathCache)
        context = AttentionContext(is_causal=True) if context is None else context
        if held is None and self.chunk_size is not None and x.shape[1] > 1:  # a prompt: the blockwise form
            output, encoded = self._whole(x, context, cached=True)
            return output.output, encoded  # type: ignore[return-value]  (a cache, with ``cached``)
        seen = 0 if held is None else held.length
        projected, k, v, windows = self._projected(x, context, windows, seen)
        q = self._queries(x, seen, context) if projected is None else self._query_heads(projected, seen, context)
        w, beta, w_window = self.householders(x, context, None if held is None else held.w_window)
        scores, keys = path_recurrent(q, k, w, beta, None if held is None else held.keys)
        values = v if held is None else torch.cat([held.values, v], dim=-2)
        log_forget = None if self.forget_proj is None else self.log_forget(x)
        if log_forget is not None and held is not None and held.log_forget is not None:
            log_forget = torch.cat([held.log_forget, log_forget], dim=-1)
        heads, _ = self._heads(scores, values, context, first=seen, log_forget=log_forget)
        cache = ConvolvedCache.wrap(PathCache(keys, values, log_forget, w_window), windows)
        return self._output(x, heads, None).output, cache

    def _heads(
        self, scores: Tensor, v: Tensor, context: AttentionContext, *, first: int, log_forget: Tensor | None
    ) -> tuple[Tensor, Tensor]:
        """Softmax of the queries at positions ``first ..`` over ``scores`` ``(B, H, Lq, Lk)``
        (scaled here, plus the decay with the gate) under causality and the context's mask, the
        sinks in the denominator: the weighted values ``v`` ``(B, num_kv_heads, Lk, d)`` per head
        ``(B, H, Lq, d)`` and the weights."""
        logits = scores / math.sqrt(self.head_dim)  # float32 at least
        if log_forget is not None:
            logits = logits + self.decay(log_forget, context, first).to(logits.dtype)
        num_queries, num_keys = scores.shape[-2:]
        device = scores.device
        mask = self._visible(
            context, torch.arange(first, first + num_queries, device=device), torch.arange(num_keys, device=device)
        )
        weights = masked_softmax(logits, mask=mask) if self.sinks is None else sink_weights(logits, mask, self.sinks)
        groups = self.num_heads // self.num_kv_heads
        read = F.dropout(weights, self.score_attention.active_dropout).to(v.dtype)
        return read @ v.repeat_interleave(groups, dim=1), weights

    def _output(self, x: Tensor, heads: Tensor, weights: Tensor | None) -> AttentionOutput:
        """The heads ``(B, H, Lq, d)`` of the positions of ``x``, gated and projected out."""
        if self.gate_proj is not None:
            gate = torch.sigmoid(self.gate_proj(x))
            heads = heads * (self._split_heads(gate) if self.gate == "elementwise" else gate.transpose(1, 2)[..., None])
        return AttentionOutput(self._merge(heads), weights)

    def extra_repr(self) -> str:
        options = [
            "forget_gate=True" if self.forget_proj is not None else "",
            "" if self.chunk_size is None else f"chunk_size={self.chunk_size}",
        ]
        return ", ".join(filter(None, [super().extra_repr(), *options]))
