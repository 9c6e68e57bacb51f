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
* a softmax layer with short convolutions (``conv_size``) keeps its keys and values and each
  convolution's last inputs (:class:`ConvolvedCache`);
* multi-head latent attention (``mla``) keeps one compressed latent and one shared rotary key per
  position (:class:`LatentCache`): it grows with the context, but by a fraction of a multi-head
  layer's keys and values.

Each knows how many positions it has seen (``length``: where the next position's rotary angle
and bias start) and pick rows for beam search (``select``). A stack's caches are a list, one per
layer, each of its layer's kind, so hybrid stacks decode with no special case.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, TypeVar

import torch
from torch import Tensor

__all__ = ["ConvolvedCache", "KeyValueCache", "LatentCache", "LayerCache", "StateCache", "WindowCache"]


class LayerCache(Protocol):
    """The interface a decoder relies on: the positions seen, the bytes held, and rows picked
    for beam search."""

    @property
    def length(self) -> int: ...

    @property
    def nbytes(self) -> int: ...

    def select(self, index: Tensor) -> LayerCache: ...


CacheT = TypeVar("CacheT", bound=LayerCache)


@dataclass(frozen=True)
class KeyValueCache:
    """Projected keys and values of the positions seen so far, ``(B, num_kv_heads, L, d)`` each."""

    keys: Tensor
    values: Tensor

    @property
    def length(self) -> int:
        return self.keys.shape[-2]

    @property
    def nbytes(self) -> int:
        return self.keys.nbytes + self.values.nbytes

    def extend(self, keys: Tensor, values: Tensor) -> KeyValueCache:
        """This cache followed by new positions' keys and values."""
        return KeyValueCache(torch.cat([self.keys, keys], dim=-2), torch.cat([self.values, values], dim=-2))

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

    @property
    def length(self) -> int:
        return self.latent.shape[-2]

    @property
    def nbytes(self) -> int:
        return self.latent.nbytes + self.rope_key.nbytes

    def extend(self, latent: Tensor, rope_key: Tensor) -> LatentCache:
        """This cache followed by new positions' latents and rotary keys."""
        return LatentCache(torch.cat([self.latent, latent], dim=-2), torch.cat([self.rope_key, rope_key], dim=-2))

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
        new positions attend over (:meth:`trimmed` keeps what later ones can reach)."""
        return WindowCache(
            torch.cat([self.keys, keys], dim=-2),
            torch.cat([self.values, values], dim=-2),
            self.length + keys.shape[-2],
            self.sink_tokens,
            self.window,
        )

    def trimmed(self) -> WindowCache:
        """The first positions and the last ``window - 1``: all that the next query can see."""
        first = min(self.sink_tokens, self.length)
        recent = min(self.length - first, self.window - 1, self.keys.shape[-2] - first)
        if first + recent == self.keys.shape[-2]:
            return self
        held = self.keys.shape[-2]

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
