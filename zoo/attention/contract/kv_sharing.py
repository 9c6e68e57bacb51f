"""Keys and values one layer computes and later layers read (cross-layer KV sharing): the
per-forward store that carries them, and the cache a reading layer keeps instead of its own.

Gemma 4's small models (E2B, E4B: ``num_kv_shared_layers`` in transformers' ``Gemma4TextConfig``)
and Brandon et al. (2024, "Reducing Transformer Key-Value Cache Size with Cross-Layer Attention")
let a layer ``i`` attend with its own queries over the keys and values of an earlier layer
``s(i)``, its *source*:

    o_i = softmax(scale * q_i K_s^T + mask) V_s,   q_i = rot(norm_q(x_i W_q^i)),

``K_s`` and ``V_s`` exactly as layer ``s`` attended over them (after its key and value norms, its
rotation and its value scale). The reading layer has no key or value projection and keeps no cache:
per layer it saves ``2 * num_kv_heads * head_dim`` weights per model feature (``k_proj`` and
``v_proj``; one with ``values="keys"``) and, when decoding, ``2 * num_kv_heads * head_dim`` numbers
per position (a window layer's: per position of its window).

How the tensors travel: the model puts a :class:`KeyValueStore` on the forward's
:class:`~zoo.attention.contract.context.AttentionContext`, naming the layers that are read; each of
those layers, when it has attended, hands on what it attended over (``put``: the keys and values,
the positions they sit at when a window cache holds a subset, and how many positions it has seen);
the reading layers, later in the same forward, ``get`` them. When decoding, what a source attended
over is its cache extended by the new positions, so a reader reads the source's cache and writes
nothing: its own cache is a :class:`SharedCache`, which counts positions and holds no tensor.
transformers' Gemma 4 passes the same tensors between its layers in ``shared_kv_states``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from torch import Tensor, nn

from zoo.errors import ConfigurationError

__all__ = ["KeyValueStore", "SharedCache", "SharedKeyValues", "read_sources"]


@dataclass(frozen=True)
class SharedKeyValues:
    """What a source layer attended over: ``keys`` and ``values`` ``(B, num_kv_heads, n, d)`` at
    ``positions`` (``(n,)``; None: ``0 .. n - 1``), after ``length`` positions seen in all."""

    keys: Tensor
    values: Tensor
    positions: Tensor | None
    length: int


@dataclass(frozen=True)
class KeyValueStore:
    """One forward's keys and values of the layers that later layers read (``sources``, by their
    ``layer_index``), filled as the forward runs; build a new one for each forward."""

    sources: frozenset[int]
    held: dict[int, SharedKeyValues] = field(default_factory=dict, repr=False)

    def put(self, layer_index: int | None, keys: Tensor, values: Tensor, positions: Tensor | None, length: int) -> None:
        """Keep what layer ``layer_index`` attended over, if a later layer reads it."""
        if layer_index in self.sources:
            self.held[layer_index] = SharedKeyValues(keys, values, positions, length)

    def get(self, source: int, reader: str) -> SharedKeyValues:
        """What layer ``source`` attended over in this forward; a ``ConfigurationError`` naming
        ``reader`` when it has not run, or is not one of ``sources``."""
        if source not in self.held:
            raise ConfigurationError(
                f"{reader} reads the keys and values of layer index {source}, which this forward has not computed "
                f"(sources {sorted(self.sources)}); run the layers in order, in a model whose store names {source}."
            )
        return self.held[source]


@dataclass(frozen=True)
class SharedCache:
    """A reading layer's cache: how many positions it has seen, and which layer's cache holds its
    keys and values (``source``); no tensor, so ``nbytes`` is 0."""

    length: int
    source: int

    @property
    def nbytes(self) -> int:
        return 0

    def select(self, index: Tensor) -> SharedCache:
        return self


def read_sources(layers: Iterable[nn.Module]) -> frozenset[int]:
    """The layer indices whose keys and values some of ``layers`` read (their ``kv_source``): what a
    model's :class:`KeyValueStore` keeps; empty when no layer reads another's."""
    return frozenset(source for layer in layers if (source := getattr(layer, "kv_source", None)) is not None)
