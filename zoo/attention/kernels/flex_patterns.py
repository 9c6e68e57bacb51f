"""The masks and score functions FlexAttention runs, written on positions as the zoo's variants define them.

:class:`FlexMask` is a mask as a ``mask_mod`` and a hashable description (``key``) that names it,
data included, so that :func:`~zoo.attention.kernels.flex.block_mask_for` can reuse its block
mask; ``a & b`` and ``a | b`` combine two. The masks: :func:`causal`, :func:`key_padding`,
:func:`sliding_window` (``local``), :func:`longformer`, :func:`fixed_sparse` (``sparse``),
:func:`bigbird`, :func:`documents`. The score functions (biases): :func:`alibi_bias`,
:func:`bucketed_bias` over :func:`relative_distances`, and :func:`chain_scores`.

Key ``j`` sits at position ``j``, query ``i`` of ``Lq`` at ``p = i + Lk - Lq``: the kernel
(:mod:`zoo.attention.kernels.flex`, whose docstring states what each matches exactly) shifts the
query index before calling them. Nothing here runs the kernel; :func:`flex_module` is PyTorch's
``torch.nn.attention.flex_attention``, or a one-line error where it is missing.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

try:
    from torch.nn.attention import flex_attention as _flex
except ImportError:  # PyTorch before 2.5
    _flex = None

__all__ = [
    "FlexMask",
    "MaskMod",
    "ScoreMod",
    "alibi_bias",
    "bigbird",
    "bucketed_bias",
    "causal",
    "chain_scores",
    "documents",
    "fixed_sparse",
    "flex_available",
    "flex_module",
    "key_padding",
    "longformer",
    "relative_distances",
    "sliding_window",
]

MaskMod = Callable[[Tensor, Tensor, Tensor, Tensor], Tensor]
"""``(batch, head, query position, key position)`` -> True where the pair is kept."""

ScoreMod = Callable[[Tensor, Tensor, Tensor, Tensor, Tensor], Tensor]
"""``(score, batch, head, query position, key position)`` -> the score to use."""


@dataclass(frozen=True)
class FlexMask:
    """A mask on positions: ``mask_mod`` and a hashable description ``key`` that names it.

    Two masks with equal keys are the same mask (equality and hashing read the key alone), which
    is what lets :func:`block_mask_for` reuse a block mask: a key holds every number the mask
    reads, and a fingerprint of every tensor it reads (:func:`_fingerprint`), never a tensor's
    identity alone.

    Attributes:
        key: What the mask is, e.g. ``("sliding_window", 63, 0)``.
        mask_mod: ``(b, h, query position, key position)`` -> kept (see the module docstring).
        per_batch: The mask differs between sequences of a batch (padding, documents).
    """

    key: Hashable
    mask_mod: MaskMod = field(compare=False)
    per_batch: bool = field(default=False, compare=False)

    def __and__(self, other: FlexMask) -> FlexMask:
        """The pairs both keep."""
        return FlexMask(("and", self.key, other.key), flex_module().and_masks(self.mask_mod, other.mask_mod),
                        self.per_batch or other.per_batch)  # fmt: skip

    def __or__(self, other: FlexMask) -> FlexMask:
        """The pairs either keeps."""
        return FlexMask(("or", self.key, other.key), flex_module().or_masks(self.mask_mod, other.mask_mod),
                        self.per_batch or other.per_batch)  # fmt: skip


# -- masks ------------------------------------------------------------------------------------------


def causal() -> FlexMask:
    """Keys at or before the query: ``j <= p``."""

    def mask_mod(b: Tensor, h: Tensor, p: Tensor, j: Tensor) -> Tensor:
        return j <= p

    return FlexMask(("causal",), mask_mod)


def key_padding(lengths: Tensor) -> FlexMask:
    """The first ``lengths[b]`` keys of sequence ``b``: ``j < lengths[b]`` (``valid_lens`` of shape
    ``(B,)``, on the inputs' device)."""

    def mask_mod(b: Tensor, h: Tensor, p: Tensor, j: Tensor) -> Tensor:
        return j < lengths[b]

    return FlexMask(("key_padding", _fingerprint(lengths)), mask_mod, per_batch=True)


def sliding_window(window: int, *, is_causal: bool) -> FlexMask:
    """``local``'s window: causal, ``0 <= p - j < window``; otherwise ``|p - j| <= window // 2``."""
    before, after = _reach(window, is_causal)

    def mask_mod(b: Tensor, h: Tensor, p: Tensor, j: Tensor) -> Tensor:
        distance = p - j
        return (distance <= before) & (distance >= -after)

    return FlexMask(("sliding_window", before, after), mask_mod)


def longformer(window: int, global_positions: Tensor, *, is_causal: bool) -> FlexMask:
    """``longformer``'s pattern: ``local``'s window, the keys at ``global_positions`` (a long
    tensor, on the inputs' device) seen by every query, the queries there seeing every key;
    causal: never a key after the query."""
    before, after = _reach(window, is_causal)
    size = int(global_positions.max()) + 1 if global_positions.numel() else 1
    is_global = torch.zeros(size, dtype=torch.bool, device=global_positions.device)
    is_global[global_positions] = True

    def is_global_at(position: Tensor) -> Tensor:
        return is_global[position.clamp(0, size - 1)] & (position >= 0) & (position < size)

    def mask_mod(b: Tensor, h: Tensor, p: Tensor, j: Tensor) -> Tensor:
        distance = p - j
        kept = ((distance <= before) & (distance >= -after)) | is_global_at(j) | is_global_at(p)
        return kept & (j <= p) if is_causal else kept

    return FlexMask(("longformer", before, after, _fingerprint(is_global), is_causal), mask_mod)


def fixed_sparse(block_size: int, summary: int, *, is_causal: bool) -> FlexMask:
    """The Sparse Transformer's fixed pattern (``sparse``): keys in the query's block of
    ``block_size`` positions, and the last ``summary`` positions of every block; causal: never a
    key after the query."""

    def mask_mod(b: Tensor, h: Tensor, p: Tensor, j: Tensor) -> Tensor:
        kept = (p // block_size == j // block_size) | (j % block_size >= block_size - summary)
        return kept & (j <= p) if is_causal else kept

    return FlexMask(("fixed_sparse", block_size, summary, is_causal), mask_mod)


def bigbird(block_size: int, random_blocks: Tensor) -> FlexMask:
    """``bigbird``'s pattern over blocks of ``block_size`` positions (non-causal).

    Query block ``a`` sees key block ``c`` when ``|a - c| <= 1`` (the window), ``c`` is the
    first or the last block (global keys), ``a`` is the first or the last block (global queries),
    or ``c`` is one of ``random_blocks[a]``: the variant's draw, ``(num_blocks, r)`` (its
    ``random_blocks(num_blocks, device)``), read through a ``(num_blocks, num_blocks)`` table.
    """
    num_blocks = random_blocks.shape[0]
    blocks = torch.arange(num_blocks, device=random_blocks.device)
    table = (blocks.unsqueeze(-1) - blocks).abs() <= 1
    table[:, [0, -1]] = True
    table[[0, -1], :] = True
    table.scatter_(1, random_blocks.long(), True)

    def mask_mod(b: Tensor, h: Tensor, p: Tensor, j: Tensor) -> Tensor:
        return table[p // block_size, j // block_size]

    return FlexMask(("bigbird", block_size, _fingerprint(table)), mask_mod)


def documents(document_ids: Tensor) -> FlexMask:
    """Pairs within one document: ``ids[b, p] == ids[b, j]``, with ``document_ids`` ``(B, Lk)``
    one id per key position (packed sequences; on the inputs' device)."""

    def mask_mod(b: Tensor, h: Tensor, p: Tensor, j: Tensor) -> Tensor:
        return document_ids[b, p] == document_ids[b, j]

    return FlexMask(("documents", _fingerprint(document_ids)), mask_mod, per_batch=True)


def _reach(window: int, is_causal: bool) -> tuple[int, int]:
    """Keys a window reaches before and after its query, as ``local`` defines it."""
    return (window - 1, 0) if is_causal else (window // 2, window // 2)


def _fingerprint(tensor: Tensor) -> tuple[Hashable, ...]:
    """A tensor's shape, dtype and a digest of its values: equal for equal contents."""
    data = tensor.detach().to("cpu", torch.int64 if not tensor.is_floating_point() else torch.float64)
    digest = hashlib.blake2b(data.contiguous().numpy().tobytes(), digest_size=16).hexdigest()
    return (tuple(tensor.shape), str(tensor.dtype), digest)


# -- biases -----------------------------------------------------------------------------------------


def alibi_bias(slopes: Tensor, *, is_causal: bool) -> ScoreMod:
    """``alibi``: ``score - slopes[h] * |p - j|``, or ``- slopes[h] * (p - j)`` for a causal scheme
    (its ``causal``); ``slopes`` ``(H,)``, on the inputs' device."""

    def score_mod(score: Tensor, b: Tensor, h: Tensor, p: Tensor, j: Tensor) -> Tensor:
        distance = p - j
        return score - slopes[h] * (distance if is_causal else distance.abs())

    return score_mod


def relative_distances(length: int, device: torch.device | str | None = None) -> Tensor:
    """The distances ``key - query`` a grid of at most ``length`` queries and keys holds,
    ``-(length - 1), ..., length - 1``: what a bucket function maps for :func:`bucketed_bias`."""
    return torch.arange(-(length - 1), length, device=device)


def bucketed_bias(table: Tensor, buckets: Tensor) -> ScoreMod:
    """``score + table[h, buckets[j - p]]``: a learned bias per head and bucket of distance.

    Args:
        table: ``(H, num_buckets)``, or ``(1, num_buckets)`` shared by every head (``t5``'s
            ``bias``; ``local``'s ``relative_bias``). Gradients reach it on CUDA.
        buckets: Long ``(2 * length - 1,)``, the bucket of each distance of
            :func:`relative_distances` ``(length)``, ``length >= max(Lq, Lk)``: for ``t5``,
            ``t5_bucket(relative_distances(length), ...)``; for ``local``'s relative bias, the
            column of the distance ``p - j``, ``(window // 2 - distances).clamp(0, columns - 1)``.

    Any bias scheme that reads the distance ``key - query`` alone (``alibi``, ``t5``: a
    ``PositionBias``) goes through here without knowing its kind: its table over the distances,
    ``scheme(zeros(1), relative_distances(length))`` ``(H, 2 * length - 1)``, with the buckets
    ``arange(2 * length - 1)``; gradients then reach the scheme's parameters through the table.
    """
    middle = (buckets.shape[0] - 1) // 2  # the index of distance 0
    shared = table.shape[0] == 1

    def score_mod(score: Tensor, b: Tensor, h: Tensor, p: Tensor, j: Tensor) -> Tensor:
        bucket = buckets[j - p + middle]
        return score + (table[0, bucket] if shared else table[h, bucket])

    return score_mod


def chain_scores(*score_mods: ScoreMod) -> ScoreMod:
    """Each score function applied in turn (several biases added)."""

    def score_mod(score: Tensor, b: Tensor, h: Tensor, p: Tensor, j: Tensor) -> Tensor:
        for modify in score_mods:
            score = modify(score, b, h, p, j)
        return score

    return score_mod


def flex_available() -> bool:
    """Whether this PyTorch has ``torch.nn.attention.flex_attention`` (2.5 on)."""
    return _flex is not None


def flex_module() -> Any:
    """``torch.nn.attention.flex_attention``, or a one-line error where PyTorch lacks it."""
    if _flex is None:
        raise RuntimeError(
            f"FlexAttention needs torch.nn.attention.flex_attention (PyTorch 2.5 or later); this is {torch.__version__}."
        )
    return _flex
