"""What a self-attention layer keeps between decoding steps, behind one interface.

A decoder feeds its new positions to its layer's ``attend_cached`` (:class:`~zoo.attention.contract.layer.AttentionLayer`)
with the layer's cache and gets the output and the cache extended by them. What the cache holds
is the layer's business:

* a multi-head layer keeps the projected keys and values of every position
  (:class:`KeyValueCache`, ``(B, num_kv_heads, L, d)`` each, already rotated by a rotary scheme),
  so its size grows with the context;
* a recurrent layer (retention, gated linear attention, the DeltaNets, Mamba-2, KDA, RWKV-7)
  keeps a fixed-size state (:class:`StateCache`), whatever the context's length;
* a sliding-window layer keeps the keys and values of the first positions and of the last
  window (:class:`WindowCache`, StreamingLLM's rolling cache), a fixed size too;
* a sparse pattern's layer keeps the positions its later queries can still read, with their
  positions (:class:`PatternCache`: the fixed Sparse Transformer's current block and every
  block's summaries, ``l + c L / l`` of ``L``);
* a softmax layer with short convolutions (``conv_size``) keeps its keys and values and each
  convolution's last inputs (:class:`ConvolvedCache`);
* multi-head latent attention (``mla``) keeps one compressed latent and one shared rotary key per
  position (:class:`LatentCache`): it grows with the context, but by a fraction of a multi-head
  layer's keys and values.

The caches that grow with the context append a decoded token's rows in place, into room kept
after the rows in use (:func:`append_rows`), where ``torch.cat`` would copy the whole cache every
token (16 MB a layer for one token after 16k keys of Gemma 3's two key/value heads).

Each knows how many positions it has seen (``length``: where the next position's rotary angle
and bias start) and pick rows for beam search (``select``). A stack's caches are a list, one per
layer, each of its layer's kind, so hybrid stacks decode with no special case.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, TypeVar

import torch
from torch import Tensor

__all__ = [
    "ConvolvedCache",
    "GrowingRows",
    "KeyValueCache",
    "LatentCache",
    "LayerCache",
    "PatternCache",
    "StateCache",
    "WindowCache",
    "append_pair",
    "append_rows",
]

#: The least room, in positions, kept after a growing cache's rows; the room is otherwise an eighth
#: of them, so a cache holds at most about 12% more than it uses and copies itself every
#: ``L / 8`` tokens, not every token.
LEAST_ROOM = 256


class LayerCache(Protocol):
    """The interface a decoder relies on: the positions seen, the bytes held, and rows picked
    for beam search."""

    @property
    def length(self) -> int: ...

    @property
    def nbytes(self) -> int: ...

    def select(self, index: Tensor) -> LayerCache: ...


CacheT = TypeVar("CacheT", bound=LayerCache)


@dataclass(eq=False)
class GrowingRows:
    """A buffer ``(..., capacity, d)`` whose first ``written`` rows along dim -2 are in use: the
    storage behind a growing cache's tensor, shared by the caches that view it."""

    buffer: Tensor
    written: int


def append_rows(held: Tensor, new: Tensor, rows: GrowingRows | None) -> tuple[Tensor, GrowingRows | None]:
    """``held`` ``(..., L, d)`` followed by ``new`` ``(..., n, d)`` along dim -2, and the buffer
    behind it. Where ``held`` is a view of ``rows`` that ends at its last written row (a cache's
    rows, or a sliding window's last ones) and there is room, ``new`` is written after it in place
    and the result is a view; else ``held`` and ``new`` are copied to the start of a new buffer with
    :data:`LEAST_ROOM` or ``(L + n) / 8`` rows of room. A cache extended twice from the same state
    (two continuations of one prompt) copies on the second: the first's rows are never overwritten.
    Under autograd it is ``torch.cat``: an in-place write would invalidate what the backward pass
    saved."""
    length, total = held.shape[-2], held.shape[-2] + new.shape[-2]
    same_layout = held.shape[:-2] == new.shape[:-2] and held.shape[-1] == new.shape[-1] and held.dtype == new.dtype
    if not same_layout or (torch.is_grad_enabled() and (held.requires_grad or new.requires_grad)):
        return torch.cat([held, new], dim=-2), None
    if rows is None or not _ends_at_last_row(held, rows) or rows.buffer.shape[-2] - rows.written < new.shape[-2]:
        buffer = held.new_empty(*held.shape[:-2], total + max(LEAST_ROOM, total // 8), held.shape[-1])
        buffer[..., :length, :] = held
        rows = GrowingRows(buffer, length)
    start, end = rows.written - length, rows.written + new.shape[-2]
    rows.buffer[..., rows.written : end, :] = new
    rows.written = end
    return rows.buffer[..., start:end, :], rows


def append_pair(
    held: tuple[Tensor, Tensor], new: tuple[Tensor, Tensor], rows: tuple[GrowingRows | None, GrowingRows | None]
) -> tuple[Tensor, Tensor, tuple[GrowingRows | None, GrowingRows | None]]:
    """:func:`append_rows` for a cache's two tensors (keys and values): both joined, and their buffers."""
    (first, first_rows), (second, second_rows) = (append_rows(*args) for args in zip(held, new, rows))
    return first, second, (first_rows, second_rows)


def _ends_at_last_row(held: Tensor, rows: GrowingRows) -> bool:
    """Whether ``held`` is rows ``.. written - 1`` of ``rows``' buffer, viewed as the buffer is laid out."""
    buffer = rows.buffer
    same_storage = held.untyped_storage().data_ptr() == buffer.untyped_storage().data_ptr()
    laid_out = held.stride() == buffer.stride() and held.shape[:-2] == buffer.shape[:-2]
    if not (same_storage and laid_out and held.shape[-1] == buffer.shape[-1]):
        return False
    rows_before = (held.storage_offset() - buffer.storage_offset()) // buffer.stride(-2)
    return rows_before + held.shape[-2] == rows.written


@dataclass(frozen=True)
class KeyValueCache:
    """Projected keys and values of the positions seen so far, ``(B, num_kv_heads, L, d)`` each,
    views of the buffers they grow in (``rows``; None until the first extension)."""

    keys: Tensor
    values: Tensor
    rows: tuple[GrowingRows | None, GrowingRows | None] = field(default=(None, None), repr=False)

    @property
    def length(self) -> int:
        return self.keys.shape[-2]

    @property
    def nbytes(self) -> int:
        return self.keys.nbytes + self.values.nbytes

    def extend(self, keys: Tensor, values: Tensor) -> KeyValueCache:
        """This cache followed by new positions' keys and values (:func:`append_rows`)."""
        return KeyValueCache(*append_pair((self.keys, self.values), (keys, values), self.rows))

    def select(self, index: Tensor) -> KeyValueCache:
        return KeyValueCache(self.keys.index_select(0, index), self.values.index_select(0, index))


@dataclass(frozen=True)
class StateCache:
    """A recurrent variant's state after ``length`` positions: its size does not grow with them.

    ``state`` is the variant's, batch first (``(B, H, dk, dv)`` for the linear-attention
    families); ``extra`` holds what else a variant carries between steps (a short convolution's
    window, say), batch first too.
    """

    state: Tensor
    length: int
    extra: tuple[Tensor, ...] = ()

    @property
    def nbytes(self) -> int:
        return self.state.nbytes + sum(t.nbytes for t in self.extra)

    def select(self, index: Tensor) -> StateCache:
        picked = tuple(t.index_select(0, index) for t in self.extra)
        return StateCache(self.state.index_select(0, index), self.length, picked)


@dataclass(frozen=True)
class LatentCache:
    """Multi-head latent attention's positions seen so far: each one's latent ``(B, L, r)`` (after
    its norm) and its rotary key ``(B, L, dr)`` (rotated at its position), shared by every head,
    from which the heads' keys and values are read (:mod:`zoo.attention.kernels.latent`)."""

    latent: Tensor
    rope_key: Tensor
    rows: tuple[GrowingRows | None, GrowingRows | None] = field(default=(None, None), repr=False)

    @property
    def length(self) -> int:
        return self.latent.shape[-2]

    @property
    def nbytes(self) -> int:
        return self.latent.nbytes + self.rope_key.nbytes

    def extend(self, latent: Tensor, rope_key: Tensor) -> LatentCache:
        """This cache followed by new positions' latents and rotary keys (:func:`append_rows`)."""
        return LatentCache(*append_pair((self.latent, self.rope_key), (latent, rope_key), self.rows))

    def select(self, index: Tensor) -> LatentCache:
        return LatentCache(self.latent.index_select(0, index), self.rope_key.index_select(0, index))


@dataclass(frozen=True)
class WindowCache:
    """The keys and values a sliding window can still reach: those of the first ``sink_tokens``
    positions and of the last ``window - 1`` (StreamingLLM's attention sinks and rolling cache,
    Xiao et al., 2023), ``(B, num_kv_heads, n, d)`` each with ``n <= sink_tokens + window - 1``,
    in the order of their positions; ``length`` counts every position seen. A query at position
    ``t`` sees the first positions and ``t - window + 1 .. t``, so the next one needs nothing
    older: the cache stops growing once it holds ``sink_tokens + window - 1`` positions.
    """

    keys: Tensor
    values: Tensor
    length: int
    sink_tokens: int
    window: int
    rows: tuple[GrowingRows | None, GrowingRows | None] = field(default=(None, None), repr=False)

    @property
    def nbytes(self) -> int:
        return self.keys.nbytes + self.values.nbytes

    @property
    def positions(self) -> Tensor:
        """The positions of the keys held, ``(n,)``: the first ones, then the last ones, in order."""
        first = min(self.sink_tokens, self.length)
        recent = self.keys.shape[-2] - first
        device = self.keys.device
        return torch.cat(
            [torch.arange(first, device=device), torch.arange(self.length - recent, self.length, device=device)]
        )

    def extend(self, keys: Tensor, values: Tensor) -> WindowCache:
        """This cache followed by new positions' keys and values, before it is trimmed: what the
        new positions attend over (:meth:`trimmed` keeps what later ones can reach). Without first
        positions a decoded token is written after the window in place (:func:`append_rows`)."""
        joined_keys, joined_values, rows = append_pair((self.keys, self.values), (keys, values), self.rows)
        return WindowCache(
            joined_keys, joined_values, self.length + keys.shape[-2], self.sink_tokens, self.window, rows
        )

    def trimmed(self) -> WindowCache:
        """The first positions and the last ``window - 1``: all that the next query can see."""
        first = min(self.sink_tokens, self.length)
        recent = min(self.length - first, self.window - 1, self.keys.shape[-2] - first)
        if first + recent == self.keys.shape[-2]:
            return self
        held = self.keys.shape[-2]

        if first == 0:  # the last rows: a view, in the buffer where the next token is written
            recent_rows = slice(held - recent, held)
            keys, values = self.keys[..., recent_rows, :], self.values[..., recent_rows, :]
            if held > 2 * recent:  # a prompt's: copied out, so that its keys are freed
                return WindowCache(keys.clone(), values.clone(), self.length, self.sink_tokens, self.window)
            return WindowCache(keys, values, self.length, self.sink_tokens, self.window, self.rows)

        def keep(t: Tensor) -> Tensor:
            return torch.cat([t[..., :first, :], t[..., held - recent :, :]], dim=-2)

        return WindowCache(keep(self.keys), keep(self.values), self.length, self.sink_tokens, self.window)

    def select(self, index: Tensor) -> WindowCache:
        return WindowCache(
            self.keys.index_select(0, index),
            self.values.index_select(0, index),
            self.length,
            self.sink_tokens,
            self.window,
        )


@dataclass(frozen=True)
class PatternCache:
    """The keys and values of the positions a sparse pattern's later queries can still read,
    ``(B, num_kv_heads, n, d)`` each, and those positions, ``(n,)`` in order; ``length`` counts
    every position seen. What is kept is the pattern's rule
    (:meth:`~zoo.attention.variants.patterns.SparsePatternAttention.causal_keeps`); the held keys
    are not contiguous, so a query reads them at their positions
    (:meth:`~zoo.attention.variants.patterns.SparsePatternAttention.attend_at`).
    """

    keys: Tensor
    values: Tensor
    positions: Tensor
    length: int

    @property
    def nbytes(self) -> int:
        return self.keys.nbytes + self.values.nbytes + self.positions.nbytes

    @property
    def contiguous(self) -> bool:
        """Whether every position seen is held: then a query reads the keys as a full cache's."""
        return self.positions.numel() == self.length

    def extend(self, keys: Tensor, values: Tensor) -> PatternCache:
        """This cache followed by new positions' keys and values, before :meth:`kept` drops what
        later queries cannot read."""
        new = torch.arange(self.length, self.length + keys.shape[-2], device=self.positions.device)
        return PatternCache(
            torch.cat([self.keys, keys], dim=-2),
            torch.cat([self.values, values], dim=-2),
            torch.cat([self.positions, new]),
            self.length + keys.shape[-2],
        )

    def kept(self, keep: Tensor) -> PatternCache:
        """The positions where ``keep`` ``(n,)`` is True."""
        if bool(keep.all()):
            return self
        index = keep.nonzero().squeeze(-1)
        return PatternCache(
            self.keys.index_select(-2, index), self.values.index_select(-2, index), self.positions[index], self.length
        )

    def select(self, index: Tensor) -> PatternCache:
        return PatternCache(
            self.keys.index_select(0, index), self.values.index_select(0, index), self.positions, self.length
        )


@dataclass(frozen=True)
class ConvolvedCache:
    """The cache of a softmax layer with short convolutions: what the layer keeps without them
    (``inner``: a :class:`KeyValueCache`, a :class:`WindowCache` with a window, the Forgetting
    Transformer's keys, values and gates) and each convolution's last ``K - 1`` projected inputs
    (queries', keys', values', ``(B, K - 1, width)`` each), which the next positions'
    convolutions continue from."""

    inner: LayerCache
    windows: tuple[Tensor, ...]

    @property
    def length(self) -> int:
        return self.inner.length

    @property
    def nbytes(self) -> int:
        return self.inner.nbytes + sum(window.nbytes for window in self.windows)

    def select(self, index: Tensor) -> ConvolvedCache:
        windows = tuple(window.index_select(0, index) for window in self.windows)
        return ConvolvedCache(self.inner.select(index), windows)

    @staticmethod
    def unwrap(
        cache: LayerCache | None, expected: type[CacheT], *, convolves: bool, owner: object
    ) -> tuple[CacheT | None, tuple[Tensor, ...] | None]:
        """A layer's ``cache`` as what it keeps without convolutions (an ``expected`` cache; None
        at a sequence's start) and the convolutions' windows (None when the layer has none); a
        ``TypeError`` naming ``owner``'s class for a cache that layer does not continue."""
        inner, windows = (cache.inner, cache.windows) if isinstance(cache, ConvolvedCache) else (cache, None)
        if cache is not None and (not isinstance(inner, expected) or (windows is None) == convolves):
            wanted = f"a {expected.__name__}" + (" in a ConvolvedCache" if convolves else "")
            raise TypeError(f"{type(owner).__name__} continues {wanted}; got a {type(cache).__name__}.")
        return inner, windows

    @staticmethod
    def wrap(held: LayerCache, windows: tuple[Tensor, ...] | None) -> LayerCache:
        """The cache a layer hands back: ``held``, in a :class:`ConvolvedCache` with the
        convolutions' ``windows`` when it has some."""
        return held if windows is None else ConvolvedCache(held, windows)
