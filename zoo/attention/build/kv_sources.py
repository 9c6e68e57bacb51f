"""An attention entry's ``kv_source``: which earlier layer's keys and values a layer reads, resolved
and checked once, when a stack's specs are made (:func:`~zoo.attention.build.spec.layer_specs`).

``kv_source`` is a layer index from 0 (the stack's ``layer_index``, transformers' ``layer_idx``) or
``previous``: the last earlier layer that computes its own keys and values and has the same window
(Gemma 4's rule, ``kv_sharing_modes`` in transformers' ``Gemma4TextConfig``: a reading layer takes
the keys and values of the last earlier layer of its type, sliding or full). Gemma 4 E2B's last 20
of 35 layers read that way: ``{name: qk_norm, window: 512, kv_source: previous}`` on those layers.

The source must come earlier, compute its own keys and values (no chains), be a layer that hands
them on (``supports_kv_sharing``: the ``softmax`` layer and its recipes), and compute them in the
shape and reach the reader attends with: the same ``head_dim``, ``v_head_dim``, ``window`` and
``sink_tokens`` (a window cache holds only what its window reaches) and the same position scheme.
Each refusal is one line naming the layer and the fix. What sharing computes and saves:
:mod:`zoo.attention.contract.kv_sharing`.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any, Protocol

from torch import nn

from zoo.attention.build.factory import ATTENTION_REGISTRY
from zoo.errors import DataError
from zoo.positions import PositionScheme

__all__ = ["PREVIOUS", "LayerChoice", "resolve_kv_sources"]

#: ``kv_source`` that picks the last earlier layer of the same window
PREVIOUS = "previous"

#: the arguments a reader and its source must agree on: the keys' and values' shape and reach
SHAPE = ("head_dim", "v_head_dim", "window", "sink_tokens")


class LayerChoice(Protocol):
    """What is read of a layer's :class:`~zoo.attention.build.spec.AttentionSpec` (which imports this module)."""

    name: str
    kwargs: Mapping[str, Any]
    num_kv_heads: int | None
    position: PositionScheme | None

    @property
    def variant(self) -> type[nn.Module]: ...


def resolve_kv_sources(
    specs: list[LayerChoice], requested: list[object], *, allowed: bool, role: str, stack: str
) -> list[int | None]:
    """The layer index each layer reads keys and values from (None: it computes its own), from its
    ``requested`` ``kv_source`` and ``specs`` (one per layer), checked; ``allowed``: whether the
    stack (``role``) runs a store of shared keys and values (the GPT's). Raises
    :class:`~zoo.errors.DataError` in one line naming the layer."""
    resolved: list[int | None] = [None] * len(specs)
    for index, choice in enumerate(requested):
        if choice is None:
            continue
        where = f"{stack} {index + 1}"
        spec = specs[index]
        if not allowed:
            raise DataError(
                f"{where}: kv_source: {role} does not pass keys and values between layers (the GPT's stack does); "
                "drop kv_source."
            )
        _require_sharing(spec, where, "read another layer's keys and values")
        source = _source(specs, requested, index, choice, where)
        _require_sharing(specs[source], f"{where}: its kv_source, {stack} {source + 1},", "hand on its keys and values")
        _require_same_shape(spec, specs[source], where, f"{stack} {source + 1}")
        resolved[index] = source
    return resolved


def _source(specs: list[LayerChoice], requested: list[object], index: int, choice: object, where: str) -> int:
    """The layer index ``choice`` names for layer ``index``: checked, or resolved from ``previous``."""
    if choice == PREVIOUS:
        window = _argument(specs[index], "window")
        earlier = [j for j in range(index) if requested[j] is None and _argument(specs[j], "window") == window]
        if not earlier:
            raise DataError(
                f"{where}: kv_source: previous finds no earlier layer with window {window} that computes its own keys "
                "and values; give one such layer before it, or kv_source as a layer index."
            )
        return earlier[-1]
    if isinstance(choice, bool) or not isinstance(choice, int) or not 0 <= choice < index:
        raise DataError(
            f"{where}: kv_source must be an earlier layer's index, 0 to {index - 1} (counted from 0), or "
            f"'{PREVIOUS}'; got {choice!r}."
        )
    if requested[choice] is not None:
        raise DataError(
            f"{where}: kv_source {choice} reads another layer's keys and values itself; point kv_source at the "
            "layer that computes them (or use previous)."
        )
    return choice


def _require_sharing(spec: LayerChoice, where: str, does: str) -> None:
    if not getattr(spec.variant, "supports_kv_sharing", False):
        names = [
            entry.name for entry in ATTENTION_REGISTRY.entries() if getattr(entry.obj, "supports_kv_sharing", False)
        ]
        raise DataError(
            f"{where}: {spec.name!r} cannot {does} (kv_source); layers that can: {', '.join(names)}. Use one of "
            "them or drop kv_source."
        )


def _require_same_shape(reader: LayerChoice, source: LayerChoice, where: str, named: str) -> None:
    """The reader's and the source's keys and values agree in shape, reach and rotation."""
    mine = {name: _argument(reader, name) for name in SHAPE}
    theirs = {name: _argument(source, name) for name in SHAPE}
    for both in (mine, theirs):
        if both["window"] is None:
            both.pop("sink_tokens")  # without a window, no first positions are kept apart
    mine |= {"num_kv_heads": reader.num_kv_heads, "position": repr(reader.position)}  # the same options: equal
    theirs |= {"num_kv_heads": source.num_kv_heads, "position": repr(source.position)}
    if differ := [
        f"{name} {mine[name]!r} here, {theirs.get(name)!r} there" for name in mine if mine[name] != theirs.get(name)
    ]:
        raise DataError(
            f"{where}: its kv_source, {named}, computes keys and values of another shape or reach "
            f"({', '.join(differ)}); give both the same head_dim, v_head_dim, window, sink_tokens and positions."
        )


def _argument(spec: LayerChoice, name: str) -> object:
    """An argument of ``spec``'s layer: the entry's, else its constructor's default (None if none)."""
    if name in spec.kwargs:
        return spec.kwargs[name]
    parameter = inspect.signature(spec.variant).parameters.get(name)
    return None if parameter is None or parameter.default is inspect.Parameter.empty else parameter.default
