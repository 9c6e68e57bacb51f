"""What the linear-attention recurrences share: padding masks, chunk layout, decay matrices, state passing.

Every kernel keeps a state ``S`` of shape ``(*batch, dk, dv)`` and reads it as ``o_t = q_t S_t``.
A chunk of ``c`` steps is summarized by cumulative log decays *local to the chunk* (``b_i``, the
sum of the chunk's log decays up to and including step ``i``), so their magnitude stays bounded
by the chunk, whatever the sequence length; only their differences ``b_i - b_j <= 0`` (``j <= i``)
are ever exponentiated.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = [
    "QUERY_CHUNK",
    "causal_decay",
    "chunk_length",
    "from_chunks",
    "initial_or_zeros",
    "to_chunks",
    "zero_padding",
]

#: Queries whose ``(Lq, Lk)`` scores a layer holds at a time in inference (no gradient, no weights
#: asked for), where all at once a 16k prompt's would not fit: MSA's index scores and DeepSeek-V4's
#: attention scores, 8 GiB each at 16k tokens and 8 heads.
QUERY_CHUNK = 1024


def zero_padding(mask: Tensor | None, q: Tensor, *others: Tensor) -> tuple[Tensor, ...]:
    """Zero every input at the padded steps, where ``mask`` is False.

    Args:
        mask: ``(*batch, T)``, or broadcastable to it with as many dimensions (``(B, 1, T)``).
        q: Queries ``(*batch, T, dk)``.
        others: ``(*batch, T)`` or ``(*batch, T, d)`` each.

    Zero keys, betas and log decays make a padded step an identity step of every recurrence here;
    a zero query gives it a zero output. ``torch.where`` (not a product) keeps non-finite padding
    out of the result.
    """
    if mask is None:
        return (q, *others)
    if mask.dim() != q.dim() - 1:
        raise ValueError(f"mask must have the {q.dim() - 1} dimensions of (*batch, T), got shape {tuple(mask.shape)}")
    zero = q.new_zeros(())
    return tuple(torch.where(mask if x.dim() == mask.dim() else mask.unsqueeze(-1), x, zero) for x in (q, *others))


def chunk_length(chunk_size: int | None, length: int) -> int:
    """Steps per chunk: ``chunk_size``, or the whole ``length`` for None (the parallel form).

    Raises:
        ValueError: ``chunk_size`` is not a positive integer.
    """
    if chunk_size is None:
        return max(length, 1)
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be a positive integer, got {chunk_size}")
    return chunk_size


def to_chunks(x: Tensor, chunk_size: int) -> Tensor:
    """``(*batch, T, d)`` -> ``(*batch, N, chunk_size, d)``, zero-padded at the end.

    The zero steps appended to the last chunk are identity steps (zero key, beta and log decay), so
    they change no state; their outputs are cut off by :func:`from_chunks`.
    """
    padding = -x.shape[-2] % chunk_size
    if padding:  # F.pad copies even when it pads nothing
        x = F.pad(x, (0, 0, 0, padding))
    return x.unflatten(-2, (-1, chunk_size))


def from_chunks(x: Tensor, length: int) -> Tensor:
    """``(*batch, N, c, d)`` -> ``(*batch, length, d)``: undo :func:`to_chunks`."""
    return x.flatten(-3, -2)[..., :length, :]


def causal_decay(cum_log_decay: Tensor) -> Tensor:
    """Cumulative log decays ``(..., c)`` -> ``(..., c, c)``: ``exp(b_i - b_j)`` for ``j <= i``, else 0.

    The mask is applied to the exponent (``-inf`` above the diagonal) before ``exp``, so the
    positive differences above the diagonal never overflow and carry no gradient.
    """
    c = cum_log_decay.shape[-1]
    causal = torch.ones(c, c, dtype=torch.bool, device=cum_log_decay.device).tril()
    diff = cum_log_decay.unsqueeze(-1) - cum_log_decay.unsqueeze(-2)
    return torch.where(causal, diff, diff.new_tensor(float("-inf"))).exp()


def initial_or_zeros(initial_state: Tensor | None, k: Tensor, v: Tensor) -> Tensor:
    """The given ``(*batch, dk, dv)`` state, or zeros shaped from ``k`` and ``v`` (their batch
    shapes broadcast)."""
    if initial_state is not None:
        return initial_state
    return k.new_zeros(*torch.broadcast_shapes(k.shape[:-2], v.shape[:-2]), k.shape[-1], v.shape[-1])
