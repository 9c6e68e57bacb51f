"""Models saved before the recurrent families were attention layers, rebuilt as they were.

Until format 2 (checkpoint record and Hub folder alike), retention, GLA, DeltaNet, Gated DeltaNet
and Mamba-2 were per-head scoring attentions inside a multi-head layer: no short convolution, the
multi-head layer's query, key and value widths, and Mamba-2's ``B`` and ``C`` per head. Their
hyperparameters name them as today (``attention: gla``), so rebuilding them as they are named
would build today's layout and refuse the weights. :func:`migrate_attention` gives each recurrent
entry of a format-1 model the arguments that rebuild its old layout
(:meth:`~zoo.attention.modules.recurrent.RecurrentLayer.legacy_layout`), and the layers rename the old
state-dict keys as they load them (:meth:`~zoo.attention.modules.recurrent.RecurrentLayer.legacy_state_dict`).
The migrated hyperparameters are what such a model carries from then on, so exporting it again
writes a folder of today's format that rebuilds the same model.
"""

from __future__ import annotations

from typing import Any

from zoo.attention.build.factory import ATTENTION_REGISTRY
from zoo.attention.modules.recurrent import RecurrentLayer

__all__ = ["LAYERS_FORMAT", "migrate_attention"]

#: The first checkpoint and folder format whose recurrent families are layers.
LAYERS_FORMAT = 2
#: GPT's and the encoder-decoder's defaults, for a model that saved none (every zoo model saves them)
_DEFAULT_WIDTH, _DEFAULT_HEADS = 384, 6


def migrate_attention(hyperparameters: dict[str, Any], saved_format: int) -> dict[str, Any]:
    """``hyperparameters`` of a model saved in ``saved_format``, its recurrent entries given their
    old layout where that format predates :data:`LAYERS_FORMAT`; as they are otherwise."""
    attention = hyperparameters.get("attention")
    if saved_format >= LAYERS_FORMAT or attention is None:
        return hyperparameters
    width = hyperparameters.get("d_model", _DEFAULT_WIDTH)
    heads = hyperparameters.get("num_heads", _DEFAULT_HEADS)
    migrated = dict(hyperparameters)
    if isinstance(attention, str):
        layout = _layout(attention, width, heads)
        if layout:
            migrated["attention_kwargs"] = {**layout, **(hyperparameters.get("attention_kwargs") or {})}
        return migrated
    migrated["attention"] = [_entry(entry, width, heads) for entry in attention]
    return migrated


def _entry(entry: str | dict[str, Any], width: int, heads: int) -> str | dict[str, Any]:
    """One list entry with its old layout, if it names a recurrent family (its own arguments win)."""
    name = entry if isinstance(entry, str) else entry.get("name")
    layout = _layout(name, width, heads) if isinstance(name, str) else {}
    if not layout:
        return entry
    return {"name": name, **layout} if isinstance(entry, str) else {"name": name, **layout, **entry}


def _layout(name: str, width: int, heads: int) -> dict[str, Any]:
    """The old layout's arguments of a recurrent family named ``name``; none for another name."""
    if name not in ATTENTION_REGISTRY:
        return {}
    cls = ATTENTION_REGISTRY.get(name)
    return cls.legacy_layout(width, heads) if issubclass(cls, RecurrentLayer) else {}
