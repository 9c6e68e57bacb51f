"""Gated Slot Attention (Zhang et al., 2024, "Gated Slot Attention for Efficient Linear-Time Sequence
Modeling", arXiv 2409.07146): a bounded memory of ``m`` slots per head, written by a forget gate and
read through a softmax over the slots.

Per head, with row vectors::

    q_t, k_t = SiLU(x_t W_q), SiLU(x_t W_k),      v_t = SiLU(x_t W_v)
    alpha_t = sigmoid(x_t W_f) ** (1 / tau)        (the forget gate per slot, tau = 8; s_t = 1 - alpha_t)
    K~_t = K~_{t-1} Diag(alpha_t) + k_t^T s_t,      V~_t = Diag(alpha_t) V~_{t-1} + s_t^T v_t
    o_t = softmax(q_t K~_t) V~_t
    y_t = RMSNorm(SiLU(o_t)) W_o                   (the norm over all heads' features at once)

The two gated linear-attention passes and the softmax between them are
:class:`~zoo.attention.modules.slot_recurrence.SlotRecurrence`, both on the zoo's decay kernels, in
the three forms of every recurrent family; the state of a head is ``m (dk + dv)`` numbers whatever
the length, the paper's point (GSA as a gated ABC: a softmax over a bounded memory).

What follows flash-linear-attention's layer (``fla/layers/gsa.py``; its recurrence
``fla/ops/gsa/naive.py``): the formulas above, with no scale on the queries (its ``scale=1``), the
gate ``logsigmoid(x W_f) / 8`` (``gate_logit_normalizer``), the swish feature map on queries and
keys and SiLU on values, queries, keys and values the block's width (``expand_k = expand_v = 1``),
the RMSNorm over the whole value width before the output projection, and 64 slots (the paper's
and fla's model configuration). Where the zoo differs: a short causal convolution (kernel 4) on
queries, keys and values is on by default, as for the zoo's GLA (associative recall depends on it;
fla's is off by default), and SiLU is applied once after it (fla applies the convolution's SiLU and
then the feature map's); ``conv_size=0`` gives fla's default layer. No grouped keys and values
(fla's ``num_kv_heads``) and no output gate (fla's ``use_output_gate``, off by default). fla's
``chunk_gsa`` kernels are not wired in: the zoo's forms run on every device.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from typing_extensions import Unpack

from zoo.attention.build.factory import register_attention_layer
from zoo.attention.modules.recurrent import RecurrentLayer, RecurrentOptions
from zoo.attention.modules.slot_recurrence import SlotRecurrence

__all__ = ["GatedSlotAttention"]


@register_attention_layer("gsa", aliases=("gated_slot_attention",))
class GatedSlotAttention(RecurrentLayer):
    """Gated Slot Attention (see the module docstring).

    Args:
        embed_dim: The block's width: queries, keys and values are as wide.
        num_heads: Heads, each with its own slots.
        num_slots: Memory slots per head ``m``.
        gate_normalizer: What the forget gate's log-sigmoid is divided by (``tau``, fla's 8).
        norm_eps: Added to the output RMSNorm's mean square.
        options: :class:`~zoo.attention.modules.recurrent.RecurrentLayer`'s (``conv_size`` 4).

    Parameters of its own: ``forget_gate`` (``embed_dim -> num_heads * num_slots``, no bias);
    ``norm``, the output RMSNorm's scale over the value width.
    """

    #: SiLU on queries, keys and values, with or without a convolution (the swish feature map)
    silu = "always"
    fla_refusal = "flash-linear-attention's Gated Slot Attention kernels are not wired into the zoo"

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        *,
        num_slots: int = 64,
        gate_normalizer: float = 8.0,
        norm_eps: float = 1e-5,
        **options: Unpack[RecurrentOptions],
    ) -> None:
        super().__init__(embed_dim, num_heads, key_dim=embed_dim, value_dim=embed_dim, **options)
        self.require_positive(num_slots=num_slots)
        if gate_normalizer <= 0:
            raise ValueError(f"GatedSlotAttention: gate_normalizer must be positive, got {gate_normalizer}.")
        if norm_eps <= 0:
            raise ValueError(f"GatedSlotAttention: norm_eps must be positive, got {norm_eps}.")
        self.num_slots, self.gate_normalizer, self.norm_eps = num_slots, gate_normalizer, norm_eps
        self.forget_gate = nn.Linear(embed_dim, num_heads * num_slots, bias=False)
        self.norm = nn.Parameter(torch.ones(embed_dim))

    def prepare(self, queries: Tensor, keys: Tensor, values: Tensor, layer_input: Tensor) -> SlotRecurrence:
        logits = self.split_heads(self.forget_gate(layer_input)).to(queries.dtype)  # (B, H, T, m)
        return SlotRecurrence(queries, keys, values, F.logsigmoid(logits) / self.gate_normalizer)

    def finish(self, output: Tensor, layer_input: Tensor) -> Tensor:
        """``RMSNorm(SiLU(o))`` over every head's features at once, per head again."""
        merged = F.silu(output).transpose(1, 2).flatten(-2)  # (B, T, value width)
        normed = F.rms_norm(merged, (merged.shape[-1],), self.norm.to(merged.dtype), self.norm_eps)
        return self.split_heads(normed)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, num_slots={self.num_slots}"
