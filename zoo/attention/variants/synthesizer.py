"""Synthesizer attention (Tay et al., 2021): attention weights synthesized without query-key dot products.

What it computes: a softmax over logits that no key helps to form, applied to the values as usual.
Two variants, chosen by ``mode``:

* ``"random"``: the logits are a learned ``(max_len, max_len)`` matrix per head, the same for
  every input. A sequence of ``L`` keys uses its top-left ``(L, L)`` block (query ``i`` at position
  ``Lk - Lq + i``, bottom-right, as everywhere in the zoo). With ``fixed=True`` the matrix is drawn
  once and never trained (the paper's "fixed random" synthesizer): a buffer saved in checkpoints.
* ``"dense"``: each query position's logits come from a two-layer MLP of that query alone,
  ``relu(q W1 + b1) W2 + b2`` (``d -> d -> max_len`` per head), of which the first ``Lk``
  columns are used.

What it drops: content-based key matching. ``random`` reads neither queries nor keys: its mixing
is a learned function of positions only, shared by every input. ``dense`` reads each query but
never a key, so which key a query weighs is decided by the key's position, not its content.
Keys are ignored entirely (any feature size is accepted). The paper found both competitive with
dot-product attention on some tasks and weaker where token-to-token matching matters.

What it keeps: padding masks and causality act on the logits (masked keys get zero weight), so it
runs in encoders and decoders; a positional bias (``alibi``, ``t5``) is added to the logits. A
rotary scheme is refused (there is no dot product for it to rotate). The logits are indexed by
positions within one sequence, so it takes self-attention only (``supports_cross_attention =
False``): a causal call may take fewer queries than keys, as in cached decoding. It declares
``reads_keys = False`` (and, with ``random``, ``reads_queries = False``), so a multi-head layer
over it builds no key (nor query) projection that would go without a gradient.

Cost: ``O(L^2)`` time per head like dot-product attention. ``dense`` forms the ``(Lq, Lk)``
weights of every sequence, holds ``d (d + max_len)`` parameters per head and costs
``O(L d max_len)`` more. ``random`` holds ``max_len^2`` parameters per head, and since its logits
are the same for every input it forms its weights once per head, not once per sequence: with a
padding mask (a key mask, the same for every query) the softmax over the kept keys is
``P (m * V) / (P m)`` for the full softmax ``P`` and the mask ``m``, one ``(Lq, Lk)`` matrix per head
applied to every sequence's values, so a batch of ``B`` costs ``O(H L^2)`` memory rather than
``O(B H L^2)``. The weights are formed per sequence, as ``dense`` does, when they are asked for
(``need_weights``), under attention dropout in training, for a mask that differs per query and
sequence, or when a row's logits spread over more than ``MAX_SHARED_SPREAD`` (a kept key's share
of ``P`` could then fall below float32's range). Inputs longer than ``max_len`` are refused.
"""

from __future__ import annotations

import difflib
import math
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from zoo.attention.build.factory import register_attention
from zoo.attention.contract.base import Attention, AttentionOutput
from zoo.attention.contract.context import AttentionContext
from zoo.attention.contract.masking import causal_mask, key_column, masked_softmax
from zoo.errors import ConfigurationError

__all__ = ["SynthesizerAttention"]

MODES = ("dense", "random")
#: widest spread of one row's logits (max - min) for which the shared weights are used: a kept
#: key's share of the full softmax is then at least exp(-60) / Lk, well inside float32
MAX_SHARED_SPREAD = 60.0


@register_attention("synthesizer")
class SynthesizerAttention(Attention):
    """Softmax over synthesized logits: learned per position (``random``) or an MLP of each query (``dense``).

    See the module docstring for what it approximates and what it costs.

    Args:
        query_size: Feature size ``d`` of the queries, the MLP's input in ``dense`` mode (a layer
            passes its head size).
        max_len: Longest sequence the logits cover; longer inputs are refused.
        mode: ``"random"`` (learned position-to-position logits) or ``"dense"`` (an MLP of each query).
        fixed: With ``mode="random"``, draw the logits once and never train them.
        num_heads: Heads with their own logits (or MLP); a multi-head layer passes its own.
        dropout: Dropout on the attention weights during training.
    """

    family = "softmax"
    cost = "L²"

    requires_equal_qk_dims: ClassVar[bool] = False
    supports_cross_attention: ClassVar[bool] = False
    supports_rotary: ClassVar[bool] = False
    supports_position_bias: ClassVar[bool] = True  # attend() adds it to the logits, shared or not
    reads_keys = False  # which key a query weighs follows from positions alone

    def __init__(
        self,
        query_size: int = 64,
        max_len: int = 512,
        mode: str = "random",
        fixed: bool = False,
        num_heads: int = 1,
        dropout: float = 0.0,
    ) -> None:
        super().__init__(dropout)
        self.require_positive(query_size=query_size, max_len=max_len, num_heads=num_heads)
        if mode not in MODES:
            close = difflib.get_close_matches(str(mode), MODES, n=1)
            hint = f"Did you mean {close[0]!r}? " if close else ""
            raise ValueError(f"SynthesizerAttention: unknown mode {mode!r}. {hint}Choose one of {', '.join(MODES)}.")
        if fixed and mode != "random":
            raise ValueError("SynthesizerAttention: fixed=True applies to mode='random' only; drop it for 'dense'.")
        self.query_size, self.max_len, self.mode, self.fixed, self.num_heads = (
            query_size,
            max_len,
            mode,
            fixed,
            num_heads,
        )
        self.reads_queries = mode == "dense"
        if mode == "random":
            logits = torch.randn(num_heads, max_len, max_len)
            if fixed:
                self.register_buffer("logits", logits)
            else:
                self.logits = nn.Parameter(logits)
        else:
            bound = 1.0 / math.sqrt(query_size)  # nn.Linear's initialization, fan-in d for both layers

            def uniform(*shape: int) -> nn.Parameter:
                return nn.Parameter(torch.empty(*shape).uniform_(-bound, bound))

            self.hidden_weight, self.hidden_bias = (
                uniform(num_heads, query_size, query_size),
                uniform(num_heads, 1, query_size),
            )
            self.logit_weight, self.logit_bias = uniform(num_heads, query_size, max_len), uniform(num_heads, 1, max_len)

    def check_layout(self, queries: Tensor, keys: Tensor, is_causal: bool) -> None:
        """One sequence, no longer than ``max_len``, queries of ``query_size`` (dense), heads at dimension -3."""
        self.check_one_sequence(queries, keys, is_causal, "synthesized attention")
        if keys.shape[-2] > self.max_len:
            raise ConfigurationError(  # a setting, not a bug: one line at the command line
                f"SynthesizerAttention: {keys.shape[-2]} keys exceed max_len={self.max_len}, the length its "
                f"logits were built for. Build it with max_len >= {keys.shape[-2]}, or cut the input."
            )
        if self.mode == "dense" and queries.shape[-1] != self.query_size:
            raise ValueError(
                f"SynthesizerAttention: queries have {queries.shape[-1]} features but its MLP takes "
                f"query_size={self.query_size}. Build it with query_size={queries.shape[-1]}."
            )
        if self.num_heads > 1 and (queries.dim() < 4 or queries.shape[-3] != self.num_heads):
            raise ValueError(
                f"SynthesizerAttention: its logits are learned for {self.num_heads} heads, so queries need "
                f"them at dimension -3, as (batch, heads, length, d); got shape {tuple(queries.shape)}. "
                "Use the layer's own head count, or num_heads=1 to share one set across heads."
            )

    def score(self, queries: Tensor, keys: Tensor) -> Tensor:
        """The synthesized logits ``(*batch, Lq, Lk)``; ``keys`` only give their number."""
        num_queries, num_keys = queries.shape[-2], keys.shape[-2]
        if self.mode == "dense":
            hidden = F.relu(torch.matmul(queries, self.hidden_weight) + self.hidden_bias)
            logits = torch.matmul(hidden, self.logit_weight[..., :num_keys]) + self.logit_bias[..., :num_keys]
            return logits.to(queries.dtype)
        return self.random_logits(num_queries, num_keys).to(queries.dtype).expand(*queries.shape[:-1], num_keys)

    def attend(self, queries: Tensor, keys: Tensor, values: Tensor, context: AttentionContext) -> AttentionOutput:
        """The shared weights of ``random`` where they apply (see the module docstring), else the
        base class's softmax over each sequence's logits."""
        mask, is_causal = context.mask, context.is_causal
        keep = None if mask is None else key_column(mask)  # (..., Lk, 1) for a key mask
        per_sequence_mask = mask is not None and keep is None and any(n > 1 for n in mask.shape[:-2])
        if self.mode == "dense" or context.need_weights or per_sequence_mask or self.active_dropout:
            return super().attend(queries, keys, values, context)
        num_queries, num_keys = queries.shape[-2], keys.shape[-2]
        logits = self.random_logits(num_queries, num_keys).to(queries.dtype)  # (heads, Lq, Lk)
        bias = context.bias_grid(num_queries, num_keys, queries.device)
        if bias is not None:
            logits = logits + bias.to(logits.dtype)
        spread = logits.detach().amax(-1) - logits.detach().amin(-1)
        if float(spread.max()) > MAX_SHARED_SPREAD:
            return super().attend(queries, keys, values, context)
        static = causal_mask(num_queries, num_keys, queries.device) if is_causal else None
        if mask is not None and keep is None:  # one (Lq, Lk) mask for every sequence
            shared_mask = mask.reshape(mask.shape[-2:])
            static = shared_mask if static is None else static & shared_mask
        shared = masked_softmax(logits, mask=static).to(values.dtype)  # (heads or 1, Lq, Lk)
        if keep is None:
            return AttentionOutput(_apply_per_head(shared, values), None)
        keep = keep.to(values.dtype)
        kept = values * keep
        mixed = _apply_per_head(shared, torch.cat([kept, keep.expand(*kept.shape[:-1], 1)], -1))
        numerator, total = mixed[..., :-1], mixed[..., -1:]  # P (m * V) and P m
        return AttentionOutput(numerator / total.masked_fill(total == 0, 1.0), None)

    def random_logits(self, num_queries: int, num_keys: int) -> Tensor:
        """``random``'s logits ``(num_heads, Lq, Lk)``: rows ``Lk - Lq`` to ``Lk`` of the learned
        matrix; rows before the first (a causal call with more queries than keys) are zeros, and
        fully masked by causality."""
        first = num_keys - num_queries
        logits = self.logits[:, max(first, 0) : num_keys, :num_keys]
        return F.pad(logits, (0, 0, max(-first, 0), 0))

    def extra_repr(self) -> str:
        fixed = ", fixed=True" if self.fixed else ""
        return f"mode={self.mode!r}, max_len={self.max_len}, query_size={self.query_size}, num_heads={self.num_heads}{fixed}"


def _apply_per_head(weights: Tensor, inputs: Tensor) -> Tensor:
    """``weights @ inputs`` for weights ``(heads, Lq, Lk)`` shared by every sequence (``heads`` at
    dimension -3 of ``inputs`` ``(*batch, Lk, e)``, or 1). ``einsum`` makes it one product per head
    over every sequence's columns; ``torch.matmul``'s broadcasting would copy the weights per
    sequence, the ``(B, H, Lq, Lk)`` tensor this path exists to avoid."""
    if weights.shape[0] == 1:
        return torch.einsum("qk,...kd->...qd", weights[0], inputs)
    return torch.einsum("hqk,...hkd->...hqd", weights, inputs)
