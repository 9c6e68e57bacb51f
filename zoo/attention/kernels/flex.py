"""FlexAttention for the zoo's mask-defined attentions: one fused kernel from a mask and a score function.

PyTorch's :func:`~torch.nn.attention.flex_attention.flex_attention` computes
``softmax(score_mod(q k^T * scale) + mask) v`` where ``mask_mod(b, h, q_idx, kv_idx)`` says which
pairs are kept and ``score_mod(score, b, h, q_idx, kv_idx)`` changes a kept score (a bias). A
*block mask* (:func:`~torch.nn.attention.flex_attention.create_block_mask`) records which
``128 x 128`` tiles hold any kept pair, so the compiled kernel skips the empty ones: a sliding
window costs ``O(L * window)``, not ``O(L^2)``.

The zoo's masks and biases in that form, exactly as the variants define them, are written in
:mod:`zoo.attention.kernels.flex_patterns` and importable from here; this module runs the kernel:

* :class:`FlexMask`: a mask as a ``mask_mod`` and a hashable description (``key``) that names
  it, data included; ``a & b`` and ``a | b`` combine two (``and_masks``, ``or_masks``).
* Masks: :func:`causal`, :func:`key_padding` (``valid_lens`` of shape ``(B,)``),
  :func:`sliding_window` (``local``), :func:`longformer`, :func:`fixed_sparse` (``sparse``),
  :func:`bigbird`, :func:`documents` (one id per position: no pair across two documents).
* Biases: :func:`alibi_bias` (``alibi``'s slopes), :func:`bucketed_bias` (a table indexed by a
  bucket of the distance ``key - query``: ``t5``, and ``local``'s learned ``relative_bias``),
  :func:`relative_distances` (the distances to bucket), :func:`chain_scores` (several at once).
* :func:`block_mask_for`: the block mask of a :class:`FlexMask` for one shape, built once per
  (description, batch, ``Lq``, ``Lk``, device) and then taken from a bounded LRU cache
  (:func:`block_mask_cache_info`, :func:`clear_block_masks`); :func:`build_block_mask` builds one
  uncached (a mask that reads a call's data);
* :func:`flex_attend`: the attention ``(B, H, Lq, d)`` -> ``(B, H, Lq, dv)``, compiled on CUDA
  (``torch.compile(flex_attention)``, built once, on first use), eager on the CPU;
* :func:`flex_supported`: whether flex runs for a device, dtype and need of gradients.

Positions. Every mask and bias here is written on *positions*, as the zoo defines them: key
``j`` sits at ``j``, query ``i`` of ``Lq`` at ``p = i + Lk - Lq`` (bottom-right, as the zoo's
causal masks and bias grids align; ``p = i`` for ``Lq == Lk``). :func:`block_mask_for` and
:func:`flex_attend` shift the query index by ``Lk - Lq`` before calling a mask or a bias, so a
cached decoding step (``Lq < Lk``) sees what the zoo's variants give it.

Exactness (what the tests hold, in float32 to 1e-5 against the variants' own forward):

* the masks are those of ``local`` (window ``|p - j| <= window // 2``; causal
  ``0 <= p - j < window``), ``longformer`` (that window, global keys seen by every query,
  global queries seeing every key; causal: never a later key), ``sparse`` (same block of
  ``block_size`` or one of the last ``summary`` positions of a block; causal: never a later
  key), ``bigbird`` (window, first and last block, random blocks: a ``(nb, nb)`` table of key
  blocks per query block; non-causal, and only where the variant uses its pattern: at least
  ``5 + num_random_blocks`` blocks, below which it computes full attention), causal and key
  padding masks, and document masks;
* the biases are ``alibi``'s (``-slope_h |p - j|``, or ``-slope_h (p - j)`` for a causal scheme)
  and a bucket table's, ``table[h, bucket(j - p)]`` (``t5``; ``local``'s relative bias);
* a query with no visible key gets a zero output, as in the zoo (flex gives 0 for a fully masked
  row: checked for the eager path on the CPU; ``tests/cuda/test_flex_cuda.py`` checks the
  compiled one);
* there is no dropout: flex has none, so a variant training with dropout keeps its own path.

Devices and dtypes (:func:`flex_supported`). CUDA: float16, bfloat16, float32, forward and
backward, compiled (gradients also reach a bias table the score function reads, such as a
``t5`` table: ``tests/cuda/test_flex_cuda.py`` holds bfloat16 against the variants in float32).
CPU: eager ``flex_attention`` in float32, float64 and bfloat16, forward only
(PyTorch raises on a CPU input that requires gradients), with the ``(B, H, Lq, Lk)`` scores
materialized: a reference and a test bench, not a fast path. Needs
``torch.nn.attention.flex_attention`` (PyTorch 2.5 on; tested with 2.13 on the CPU, written for
the GPU machine's 2.11); without it :func:`flex_supported` says False.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from zoo.attention.kernels.flex_patterns import (
    FlexMask,
    MaskMod,
    ScoreMod,
    alibi_bias,
    bigbird,
    bucketed_bias,
    causal,
    chain_scores,
    documents,
    fixed_sparse,
    flex_available,
    flex_module,
    key_padding,
    longformer,
    relative_distances,
    sliding_window,
)

if TYPE_CHECKING:
    from torch.nn.attention.flex_attention import BlockMask

__all__ = [
    "BLOCK_MASK_CACHE_SIZE",
    "FlexMask",
    "MaskMod",
    "ScoreMod",
    "alibi_bias",
    "bigbird",
    "block_mask_cache_info",
    "block_mask_for",
    "bucketed_bias",
    "causal",
    "chain_scores",
    "clear_block_masks",
    "documents",
    "fixed_sparse",
    "flex_attend",
    "flex_supported",
    "key_padding",
    "longformer",
    "relative_distances",
    "sliding_window",
]

BLOCK_MASK_CACHE_SIZE = 32
"""Block masks kept by :func:`block_mask_for` (least recently used dropped first): a model's
layers share one per shape, so a few dozen cover a run's shapes with room to spare."""

RECOMPILE_LIMIT = 64
"""Recompilations allowed to the compiled flex call and block-mask builder while they run: each
mask or bias function (a variant) and each new dtype compiles once, and PyTorch's default of 8
per function would silently send the ninth to the eager path, which materializes the scores."""

_CUDA_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
_CPU_DTYPES = (torch.float32, torch.float64, torch.bfloat16)
_EAGER_WARNING = "flex_attention called without torch.compile"


# -- block masks and the kernel ---------------------------------------------------------------------


def flex_supported(device: torch.device | str, dtype: torch.dtype, *, requires_grad: bool = False) -> bool:
    """Whether :func:`flex_attend` runs on ``device`` in ``dtype`` (with gradients if
    ``requires_grad``): CUDA in float16, bfloat16 and float32; the CPU (eager, forward only) in
    float32, float64 and bfloat16; nowhere without ``torch.nn.attention.flex_attention``."""
    if not flex_available():
        return False
    kind = torch.device(device).type
    if kind == "cuda":
        return dtype in _CUDA_DTYPES
    return kind == "cpu" and dtype in _CPU_DTYPES and not requires_grad


def block_mask_for(
    mask: FlexMask, batch: int, num_queries: int, num_keys: int, device: torch.device | str
) -> BlockMask:
    """The block mask of ``mask`` for ``batch`` sequences of ``num_queries`` queries over
    ``num_keys`` keys on ``device``, from the cache when the same description met the same shape
    before (one head axis, shared: the zoo's masks are the same for every head).

    The query index is shifted to the query's position (``+ Lk - Lq``) before ``mask.mask_mod``
    reads it. On CUDA the builder is compiled, so the ``(B, Lq, Lk)`` mask is never formed.
    """
    return _cached_block_mask(mask, batch if mask.per_batch else None, num_queries, num_keys, torch.device(device))


@functools.lru_cache(maxsize=BLOCK_MASK_CACHE_SIZE)
def _cached_block_mask(
    mask: FlexMask, batch: int | None, num_queries: int, num_keys: int, device: torch.device
) -> BlockMask:
    """:func:`block_mask_for`'s work, cached by the mask's description and the shape."""
    return build_block_mask(mask, batch, num_queries, num_keys, device)


def build_block_mask(
    mask: FlexMask, batch: int | None, num_queries: int, num_keys: int, device: torch.device | str
) -> BlockMask:
    """The block mask of ``mask`` for one shape, built now (:func:`block_mask_for` caches it
    across calls; a mask that reads a call's data, such as its padding, is built once a forward
    and kept with that forward instead). ``batch`` None: one mask for every sequence."""
    device = torch.device(device)
    mask_mod = _mask_at_query_positions(mask.mask_mod, num_keys - num_queries)
    if device.type == "cuda":
        with torch._dynamo.config.patch(recompile_limit=RECOMPILE_LIMIT):
            return _compiled("create_block_mask")(mask_mod, batch, None, num_queries, num_keys, device=device)
    return flex_module().create_block_mask(mask_mod, batch, None, num_queries, num_keys, device=device)


def block_mask_cache_info() -> Any:
    """The block-mask cache's statistics: ``hits``, ``misses``, ``maxsize``, ``currsize``."""
    return _cached_block_mask.cache_info()


def clear_block_masks() -> None:
    """Empty the block-mask cache (and its statistics)."""
    _cached_block_mask.cache_clear()


def flex_attend(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    mask: FlexMask | None = None,
    score_mod: ScoreMod | None = None,
    block_mask: BlockMask | None = None,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> Tensor:
    """``softmax(score_mod(q k^T * scale))`` over the pairs ``mask`` keeps, times ``v``.

    Args:
        q: Queries ``(B, H, Lq, d)``.
        k: Keys ``(B, Hkv, Lk, d)``; ``Hkv < H`` (dividing it) with ``enable_gqa``.
        v: Values ``(B, Hkv, Lk, dv)``.
        mask: The pairs kept, on positions; its block mask comes from :func:`block_mask_for`.
            None: every pair (a query with no kept key gets a zero output).
        score_mod: A bias on positions (:func:`alibi_bias`, :func:`bucketed_bias`), or None.
        block_mask: A block mask from :func:`block_mask_for`, in place of ``mask``.
        scale: Multiplier of the dot products; None: ``1 / sqrt(d)``.
        enable_gqa: Keys and values hold fewer heads, each shared by ``H / Hkv`` query heads.

    Returns:
        ``(B, H, Lq, dv)`` in the queries' dtype: compiled on CUDA, eager on the CPU.
    """
    if mask is not None and block_mask is not None:
        raise ValueError("flex_attend: give a mask or a block mask built from one, not both.")
    num_queries, num_keys = q.shape[-2], k.shape[-2]
    if mask is not None:
        block_mask = block_mask_for(mask, q.shape[0], num_queries, num_keys, q.device)
    if score_mod is not None:
        score_mod = _score_at_query_positions(score_mod, num_keys - num_queries)
    options = {"score_mod": score_mod, "block_mask": block_mask, "scale": scale, "enable_gqa": enable_gqa}
    if q.device.type == "cuda":
        with torch._dynamo.config.patch(recompile_limit=RECOMPILE_LIMIT):
            return _compiled("flex_attention")(q, k, v, **options)
    with warnings.catch_warnings():  # the eager path is this module's choice off CUDA, not an oversight
        warnings.filterwarnings("ignore", message=_EAGER_WARNING)
        return flex_module().flex_attention(q, k, v, **options)


def _mask_at_query_positions(mask_mod: MaskMod, offset: int) -> MaskMod:
    """A mask on positions, called with query indices: ``p = i + offset``. (flex tells a mask
    from a score function by its count of positional parameters, so each has its own wrapper.)"""
    if offset == 0:
        return mask_mod

    def shifted(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        return mask_mod(b, h, q_idx + offset, kv_idx)

    return shifted


def _score_at_query_positions(score_mod: ScoreMod, offset: int) -> ScoreMod:
    """A score function on positions, called with query indices: ``p = i + offset``."""
    if offset == 0:
        return score_mod

    def shifted(score: Tensor, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        return score_mod(score, b, h, q_idx + offset, kv_idx)

    return shifted


@functools.cache
def _compiled(name: str) -> Callable[..., Any]:
    """``torch.compile`` of ``flex_attention`` or ``create_block_mask``, built on first use, with
    static shapes (``dynamic=False``, as attention-gym compiles it).

    With PyTorch's automatic dynamic shapes, the second length or window a function met turned
    the integers its mask and score functions close over (a window, the query offset ``Lk - Lq``)
    into symbolic ones, which Inductor's flex lowering of PyTorch 2.11 cannot take
    (``'ShapeAsConstantBuffer' object has no attribute 'dtype'``, PyTorch's issues #157833 and
    #182606; seen on an H200 for ``longformer`` after ``local``, a window's backward and ALiBi
    with cached queries: ``benchmarks/results/gpu/issue71/cuda_failures_call2.txt``) and, in the backward, a symbolic query length left the
    log-sum-exp's alignment unproven (``LSE is not correctly aligned``: T5's table). Static shapes
    compile once per shape and closure instead, within :data:`RECOMPILE_LIMIT`."""
    return torch.compile(getattr(flex_module(), name), dynamic=False)
