"""Masks and the masked softmax: the only place in the zoo where attention masks are built.

Conventions (those of :func:`torch.nn.functional.scaled_dot_product_attention`):

* A mask is boolean and ``True`` means *attend*. It broadcasts against scores of shape
  ``(*batch, Lq, Lk)``.
* ``valid_lens`` counts the leading keys each query may see: shape ``batch`` (one length per
  sequence) or ``(*batch, Lq)`` (one per query), as in the reference notes.
* Causal masks align bottom-right: with ``Lq < Lk`` (decoding with cached keys) query ``i``
  is the ``Lk - Lq + i``-th position and sees every key up to it.
* Softmax runs in float32 at least, masked scores are filled once, and a row with no valid key
  gets all-zero weights: never NaN, never a uniform average over padding.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = [
    "causal_mask",
    "check_attn_mask",
    "key_column",
    "lengths_to_mask",
    "mask_at",
    "masked_softmax",
    "merge_masks",
    "validate_valid_lens",
    "with_causal",
]


def lengths_to_mask(lengths: Tensor, size: int) -> Tensor:
    """Boolean mask of shape ``(*lengths.shape, size)``, True for positions ``< lengths``."""
    positions = torch.arange(size, device=lengths.device)
    return positions < lengths.unsqueeze(-1)


def causal_mask(num_queries: int, num_keys: int, device: torch.device | None = None) -> Tensor:
    """Boolean ``(Lq, Lk)`` mask letting query ``i`` see keys ``j <= i + Lk - Lq``."""
    rows = torch.arange(num_queries, device=device).unsqueeze(-1)
    cols = torch.arange(num_keys, device=device)
    return cols <= rows + (num_keys - num_queries)


def validate_valid_lens(valid_lens: Tensor, batch_shape: torch.Size, num_queries: int, num_keys: int) -> Tensor:
    """Check ``valid_lens`` against the inputs and return it as an integer tensor.

    Raises:
        ValueError: wrong shape, a non-integral value, or a length outside ``[0, num_keys]``.
    """
    if not isinstance(valid_lens, Tensor):
        raise TypeError(f"valid_lens must be a tensor, got {type(valid_lens).__name__}.")
    per_sequence, per_query = tuple(batch_shape), (*batch_shape, num_queries)
    if tuple(valid_lens.shape) not in (per_sequence, per_query):
        raise ValueError(
            f"valid_lens has shape {tuple(valid_lens.shape)}; expected {per_sequence} (one length "
            f"per sequence) or {per_query} (one per query) for these queries."
        )
    if valid_lens.is_floating_point():
        if not torch.equal(valid_lens, valid_lens.round()):
            raise ValueError("valid_lens must hold whole numbers of keys; got fractional values.")
        valid_lens = valid_lens.long()
    elif valid_lens.dtype == torch.bool or valid_lens.is_complex():
        raise ValueError(f"valid_lens must be an integer tensor, got dtype {valid_lens.dtype}.")
    if valid_lens.numel() and (int(valid_lens.min()) < 0 or int(valid_lens.max()) > num_keys):
        raise ValueError(
            f"valid_lens must lie in [0, {num_keys}] (the number of keys); got values from "
            f"{int(valid_lens.min())} to {int(valid_lens.max())}."
        )
    return valid_lens


def merge_masks(
    batch_shape: torch.Size,
    num_queries: int,
    num_keys: int,
    *,
    valid_lens: Tensor | None = None,
    attn_mask: Tensor | None = None,
    is_causal: bool = False,
    device: torch.device | None = None,
) -> Tensor | None:
    """Combine ``valid_lens``, a boolean ``attn_mask`` and causality into one boolean mask.

    Returns ``None`` when nothing is masked, else a mask broadcastable to
    ``(*batch_shape, Lq, Lk)`` (True = attend). Inputs are assumed validated.
    """
    mask: Tensor | None = None
    if valid_lens is not None:
        keep = lengths_to_mask(valid_lens, num_keys)
        # (*batch, Lk) -> (*batch, 1, Lk) for per-sequence lengths; per-query is already (*batch, Lq, Lk)
        mask = keep.unsqueeze(-2) if valid_lens.dim() == len(batch_shape) else keep
    if attn_mask is not None:
        mask = attn_mask if mask is None else mask & attn_mask
    return with_causal(mask, num_queries, num_keys, device) if is_causal else mask


def check_attn_mask(attn_mask: Tensor, target: tuple[int, ...], owner: str) -> None:
    """Raise ``ValueError`` unless ``attn_mask`` is boolean and broadcasts to ``target``."""
    if not isinstance(attn_mask, Tensor) or attn_mask.dtype != torch.bool:
        dtype = attn_mask.dtype if isinstance(attn_mask, Tensor) else type(attn_mask).__name__
        raise ValueError(
            f"{owner}: attn_mask must be a boolean tensor with True = attend, got {dtype}. "
            f"Convert an additive float mask with `mask == 0`."
        )
    try:
        broadcast = torch.broadcast_shapes(attn_mask.shape, target)
    except RuntimeError:
        broadcast = None
    if broadcast != torch.Size(target):
        raise ValueError(f"{owner}: attn_mask of shape {tuple(attn_mask.shape)} does not broadcast to {target}.")


def key_column(mask: Tensor) -> Tensor | None:
    """``mask`` as a column ``(..., Lk, 1)`` when it is the same for every query (a padding mask
    ``(..., 1, Lk)``, a ``(Lk,)`` one, or one flag), else None: for variants that weigh the keys of
    a sequence without forming its ``(Lq, Lk)`` weights (``average``, random ``synthesizer``)."""
    if mask.dim() < 2:
        return mask.reshape(-1, 1)
    return mask.transpose(-1, -2) if mask.shape[-2] == 1 else None


def with_causal(mask: Tensor | None, num_queries: int, num_keys: int, device: torch.device | None = None) -> Tensor:
    """``mask`` (broadcastable to ``(*batch, Lq, Lk)``, or None) and the bottom-right causal mask."""
    causal = causal_mask(num_queries, num_keys, device=device)
    return causal if mask is None else mask & causal


def mask_at(mask: Tensor, query_index: Tensor, key_index: Tensor) -> Tensor:
    """The entries of ``mask`` at (query, key) index pairs, without expanding it to ``(Lq, Lk)``.

    Variants that never form the full score matrix (sliding windows, blocks) read a merged mask
    only where they score. ``mask`` is boolean and broadcastable to ``(*batch, Lq, Lk)``. An
    axis of size 1 (a padding mask has no query axis) is read once, at index 0, and the result
    keeps a size-1 axis there, so it stays as small as the mask.

    Args:
        mask: Boolean mask (a 0-d or 1-d one broadcasts like a ``(1, Lk)`` one).
        query_index: Integer query indices in ``[0, Lq)``, broadcastable against ``key_index``.
        key_index: Integer key indices in ``[0, Lk)``.

    Returns:
        A mask of shape ``(*mask_batch, *index_shape)``, broadcastable to
        ``(*mask_batch, *broadcast(query_index, key_index).shape)``.
    """
    while mask.dim() < 2:
        mask = mask.unsqueeze(0)
    rows = query_index if mask.shape[-2] > 1 else query_index.new_zeros([1] * query_index.dim())
    cols = key_index if mask.shape[-1] > 1 else key_index.new_zeros([1] * key_index.dim())
    return mask[..., rows, cols]


def masked_softmax(scores: Tensor, valid_lens: Tensor | None = None, *, mask: Tensor | None = None) -> Tensor:
    """Softmax over the last axis of ``scores`` that ignores masked keys.

    Args:
        scores: ``(*batch, Lq, Lk)`` attention scores.
        valid_lens: ``batch`` or ``(*batch, Lq)`` counts of leading keys to keep (as in the
            reference notes), or None.
        mask: boolean mask broadcastable to ``scores`` (True = keep), combined with
            ``valid_lens``.

    Returns:
        Weights of ``scores``' dtype whose rows sum to 1 over kept keys, are 0 on masked keys,
        and are all 0 for a row with no kept key.
    """
    if scores.dim() < 2:
        raise ValueError(f"scores must have shape (*batch, Lq, Lk); got {tuple(scores.shape)}.")
    if mask is None and valid_lens is None and scores.dtype in (torch.float32, torch.float64):
        return torch.softmax(scores, dim=-1)  # nothing hidden, no cast: a decoded token's common case
    if mask is not None and mask.dtype != torch.bool:
        raise TypeError(f"mask must be boolean (True = attend), got dtype {mask.dtype}.")
    batch_shape, (num_queries, num_keys) = scores.shape[:-2], scores.shape[-2:]
    if valid_lens is not None:
        valid_lens = validate_valid_lens(valid_lens, batch_shape, num_queries, num_keys)
    keep = merge_masks(batch_shape, num_queries, num_keys, valid_lens=valid_lens, attn_mask=mask, device=scores.device)
    input_dtype = scores.dtype
    compute_dtype = torch.promote_types(input_dtype, torch.float32)
    scores = scores.to(compute_dtype)
    if keep is None:
        return torch.softmax(scores, dim=-1).to(input_dtype)
    # A finite fill keeps gradients finite; rows with no kept key become exactly zero below.
    filled = scores.masked_fill(~keep, torch.finfo(compute_dtype).min)
    weights = torch.softmax(filled, dim=-1)
    weights = weights * keep.any(dim=-1, keepdim=True)
    return weights.to(input_dtype)
