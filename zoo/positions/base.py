"""The positional-scheme contract and its registry.

A :class:`PositionScheme` tells a model where each token sits. Its :attr:`~PositionScheme.kind`
says where it acts, and so what it needs from the rest of the model:

* ``"absolute"`` (``sinusoidal``, ``learned``, ``none``): ``forward(x, offset=0)`` adds a vector
  per position to the embeddings ``(B, L, D)``; positions start at ``offset`` (cached decoding).
  Any attention variant takes it.
* ``"rotary"`` (``rope``): ``forward(x, positions)`` rotates per-head queries or keys
  ``(B, H, L, d)`` after projection, before any cache, at the integer ``positions`` ``(L,)``.
  The layer does it, so a variant only has to score rotated vectors
  (:attr:`zoo.Attention.supports_rotary`).
* ``"bias"`` (``alibi``, ``t5``): ``forward(query_positions, key_positions)`` with integer
  positions that broadcast (``(Lq, 1)`` and ``(1, Lk)`` for a full grid) returns a float bias
  with a leading head axis, ``(H, Lq, Lk)``, added to the scores. A variant that scores only
  some pairs (``local``'s blocks) evaluates it at those pairs only. The variant must add it
  (:attr:`zoo.Attention.supports_position_bias`). A scheme that depends on ``key - query``
  alone says so (:attr:`PositionScheme.relative`), and its full grid costs one row of distances.

A scheme is built per stack (encoder, decoder) and shared by its self-attention layers;
cross-attention never gets positions. :func:`create_position` fills in the sizes a scheme's
constructor asks for (``d_model``, ``num_heads``, ``head_dim``, ``causal``, ``max_len``).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, ClassVar, Literal, TypeVar

from torch import Tensor, nn

from zoo.registry import Registry

__all__ = [
    "POSITION_REGISTRY",
    "PositionKind",
    "PositionScheme",
    "create_position",
    "get_position",
    "list_positions",
    "register_position",
]

PositionKind = Literal["absolute", "rotary", "bias"]
SchemeT = TypeVar("SchemeT", bound=type["PositionScheme"])


class PositionScheme(nn.Module):
    """Base class of positional schemes; subclasses set :attr:`kind` and implement ``forward``."""

    #: where the scheme acts: on embeddings, on per-head queries and keys, or on the scores
    kind: ClassVar[PositionKind] = "absolute"
    #: a bias scheme whose bias depends on ``key - query`` alone (``alibi``, ``t5``): its full grid
    #: is then read off one row of ``Lq + Lk - 1`` distances (:func:`~zoo.attention.kernels.position_bias.position_bias_grid`)
    relative: ClassVar[bool] = False

    def embed(self, x: Tensor, offset: int = 0) -> Tensor:
        """Embeddings ``(B, L, D)`` at positions ``offset ..``: an absolute scheme adds its
        vectors; the other kinds act inside attention and leave them as they are."""
        return self(x, offset) if self.kind == "absolute" else x

    @property
    def for_attention(self) -> PositionScheme | None:
        """What self-attention layers get: this scheme, or None for an absolute one."""
        return None if self.kind == "absolute" else self

    def for_head_dim(self, head_dim: int) -> PositionScheme:
        """This scheme for a layer whose heads have ``head_dim`` features: itself, unless it
        sizes per-head vectors (a rotary scheme builds one of that size)."""
        return self


POSITION_REGISTRY: Registry[type[PositionScheme]] = Registry(
    "position", base=PositionScheme, entry_point_group="zoo.positions"
)


def register_position(
    name: str | None = None, *, aliases: tuple[str, ...] | list[str] = (), override: bool = False
) -> Callable[[SchemeT], SchemeT]:
    """Class decorator registering a :class:`PositionScheme` subclass by name."""
    return POSITION_REGISTRY.register(name, aliases=aliases, override=override)  # type: ignore[return-value]


def list_positions(pattern: str | None = None) -> list[str]:
    """Registered positional scheme names, naturally sorted, filtered by a wildcard."""
    return POSITION_REGISTRY.list(pattern)


def get_position(name: str) -> type[PositionScheme]:
    """The scheme class registered under ``name`` or an alias."""
    return POSITION_REGISTRY.get(name)


def create_position(
    name: str,
    /,
    *,
    d_model: int,
    num_heads: int,
    causal: bool = False,
    max_len: int = 4096,
    **kwargs: Any,
) -> PositionScheme:
    """Build the scheme ``name`` for a stack of ``num_heads`` heads over ``d_model`` features.

    Each constructor gets those of ``d_model``, ``num_heads``, ``head_dim`` (``d_model //
    num_heads``), ``causal`` (the stack's self-attention is causal) and ``max_len`` that it
    names, unless ``kwargs`` sets them; unknown keywords fail with suggestions.
    """
    cls = POSITION_REGISTRY.get(name)
    params = inspect.signature(cls).parameters
    sizes = {
        "d_model": d_model,
        "num_heads": num_heads,
        "head_dim": d_model // num_heads,
        "causal": causal,
        "max_len": max_len,
    }
    for key, value in sizes.items():
        if key in params and key not in kwargs:
            kwargs[key] = value
    return POSITION_REGISTRY.create(name, **kwargs)
