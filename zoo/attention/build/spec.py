"""One layer's attention choice, handed unchanged from a model's arguments to the kernel.

An :class:`AttentionSpec` holds one layer's attention: a registered name (a scoring attention,
which a multi-head layer runs per head, or an attention layer, which the stack builds as it is)
and its arguments, the key/value heads of a multi-head layer, the rotary or bias position
scheme of its stack, and the dropout on the weights. Models build one per layer from their
arguments (:func:`layer_specs`), check each once against what the architecture needs
(:meth:`AttentionSpec.require`), and hand it to the blocks and layers, which take the spec, not
its fields. A new attention option is then written here once, not at every level of a model.

The spec is also the one place where positions meet attention: a rotary scheme needs a variant
that scores rotated queries and keys (``supports_rotary``), a bias scheme one that adds a bias
to its scores (``supports_position_bias``); an absolute scheme acts on the embeddings and needs
nothing (:data:`POSITION_CAPABILITY`).

**Hybrid stacks.** A model's ``attention`` is a name, or a list: one entry per layer, or a
pattern repeated over the layers (``["local", "linear"]`` over 4 layers gives local, linear,
local, linear), as Griffin, Samba and Jamba interleave local, full and recurrent layers; the
entries may mix scoring attentions and layers (``[gated_deltanet, gated_deltanet,
gated_deltanet, dot_product]``, Gated DeltaNet's hybrid). An entry
is a name or a mapping ``{"name": NAME, **arguments}``; ``attention_kwargs`` go with a single
name only, since the arguments of one variant rarely fit another.

**Shared keys and values.** An entry's ``kv_source`` (a layer index from 0, or ``previous``) makes
its layers attend over an earlier layer's keys and values instead of their own, as Gemma 4's last
layers do (:mod:`zoo.attention.build.kv_sources` resolves and checks it; GPT stacks only).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from torch import nn
from typing_extensions import Unpack

from zoo.arguments import check_kwargs
from zoo.attention.build.factory import ATTENTION_REGISTRY, AttentionNeeds, require_attention, scoring_arguments
from zoo.attention.build.kv_sources import resolve_kv_sources
from zoo.attention.contract.base import Attention, IncompatibleAttentionError
from zoo.attention.contract.layer import AttentionLayer
from zoo.positions import POSITION_REGISTRY, PositionScheme
from zoo.positions.rotary import RotaryEmbedding

__all__ = [
    "POSITION_CAPABILITY",
    "AttentionChoice",
    "AttentionEntry",
    "AttentionSpec",
    "layer_specs",
    "split_entry",
    "takes_position",
]

AttentionEntry = str | dict[str, Any]
"""One layer's attention as a model argument: a registered name, or ``{"name": NAME, **arguments}``."""

AttentionChoice = AttentionEntry | list[AttentionEntry]
"""A model's ``attention`` argument: one entry for every layer (a name, or a mapping with its
arguments: ``{name: softmax, conv_size: 4}``), or a list of entries (hybrid stacks)."""

#: the capability flag of :class:`~zoo.attention.contract.base.Attention` a position scheme of each kind needs
POSITION_CAPABILITY: Mapping[str, str] = MappingProxyType(
    {"rotary": "supports_rotary", "bias": "supports_position_bias"}
)


#: what an entry's ``position`` may change of its stack's rotary scheme
ROTATION_OPTIONS = ("base", "fraction", "partial")


def takes_position(variant: type[nn.Module], kind: str) -> bool:
    """Whether a registered attention class can take a position scheme of ``kind`` (absolute: always)."""
    flag = POSITION_CAPABILITY.get(kind)
    return flag is None or (issubclass(variant, (Attention, AttentionLayer)) and getattr(variant, flag))


#: what a stack fills in when it builds a layer by name, never an entry's argument: the first four
#: for every layer that takes them, the others (a multi-head layer's options, and the layer's depth)
#: for a layer whose constructor names them
STACK_ARGUMENTS = ("embed_dim", "num_heads", "position", "bias", "num_kv_heads", "dropout", "layer_index")


@dataclass(frozen=True)
class AttentionSpec:
    """A layer's attention: the name, its arguments, key/value heads, positions, dropout.

    Built once and checked when built: the name must be a registered scoring attention or an
    attention layer a stack builds by name, the arguments ones its constructor takes, and the
    position scheme one it can use; an error says which names would work. Blocks then take it as
    it is (:func:`zoo.attention.modules.multi_head.self_attention_layer` builds the layer).

    Args:
        name: Registered name (or alias): the scoring attention each head of a multi-head layer
            runs, or an attention layer.
        kwargs: Its constructor arguments (a layer's width, heads, positions and biases are the
            stack's).
        num_kv_heads: Key/value heads of a multi-head layer (grouped-query attention; 1 is
            multi-query); ``None``: as many as query heads. Layers that own their projections
            size their own heads, and ignore it, unless their constructor takes ``num_kv_heads``
            (the ``softmax`` layer's does).
        position: The rotary or bias scheme of the layer's stack, shared by its layers; ``None``
            for none or for an absolute scheme, which acts on the embeddings in the model.
        dropout: Dropout on the attention weights during training.
        layer_index: The layer's place in its stack, from 0 (:func:`layer_specs` sets it); a
            layer whose constructor takes ``layer_index`` gets it, for what depends on depth
            (differential attention's ``lambda_init``). ``None``: a spec of no stack.
        positioned: False where the entry said ``position: none``: this layer goes without the
            stack's rotary or bias scheme (a hybrid's linear layers beside rotated attention).
        rotation: The entry's own rotary options (``base``, ``fraction``, ``partial``) over the
            stack's rotary scheme, which ``position`` then holds (Gemma 4's global layers rotate a
            quarter of their features at another base); None: the stack's as it is.
    """

    name: str = "dot_product"
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    num_kv_heads: int | None = None
    position: PositionScheme | None = None
    dropout: float = 0.0
    layer_index: int | None = None
    positioned: bool = True
    rotation: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        variant = require_attention(self.name, role="a stack's attention", layers=True)
        if issubclass(variant, AttentionLayer) and (filled := sorted(set(self.kwargs) & set(STACK_ARGUMENTS))):
            raise ValueError(
                f"attention {self.name!r}: {', '.join(filled)} come from the model (its width, heads, position, bias, "
                "num_kv_heads and attention dropout options, and the layer's depth); give the layer's own arguments "
                "only."
            )
        check_kwargs(variant, dict(self.kwargs), what=f"attention {self.name!r}")
        if self.num_kv_heads is not None and (not isinstance(self.num_kv_heads, int) or self.num_kv_heads < 1):
            raise ValueError(f"num_kv_heads must be a positive integer or None; got {self.num_kv_heads!r}.")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"attention dropout must be in [0, 1); got {self.dropout}.")
        if self.position is not None:
            self._check_position(variant, self.position)

    @property
    def variant(self) -> type[nn.Module]:
        """The registered class: a scoring attention or an attention layer."""
        return ATTENTION_REGISTRY.get(self.name)

    @property
    def is_layer(self) -> bool:
        """Whether the name is an attention layer (built as it is) rather than a scoring attention."""
        return issubclass(self.variant, AttentionLayer)

    def _check_position(self, variant: type[nn.Module], position: PositionScheme) -> None:
        flag = POSITION_CAPABILITY.get(position.kind)
        if flag is None:
            raise ValueError(
                f"{type(position).__name__} is an absolute scheme: it acts on the embeddings, so the model applies it; "
                "an attention layer takes rotary and bias schemes only."
            )
        if not getattr(variant, flag):
            variants = [e.name for e in ATTENTION_REGISTRY.entries() if takes_position(e.obj, position.kind)]
            what = "rotated queries and keys" if position.kind == "rotary" else "a bias added to its scores"
            schemes = [e.name for e in POSITION_REGISTRY.entries() if takes_position(variant, e.obj.kind)]
            raise IncompatibleAttentionError(
                f"attention {self.name!r} cannot take the {position.kind} scheme {type(position).__name__}: it does "
                f"not take {what} ({flag} is False). Attention variants that do: {', '.join(variants) or 'none'}; "
                f"positions {self.name!r} takes: {', '.join(schemes)}."
            )

    def require(self, *, role: str = "this architecture", **needs: Unpack[AttentionNeeds]) -> AttentionSpec:
        """This spec, if its variant can do what ``role`` needs; else an
        :class:`~zoo.attention.contract.base.IncompatibleAttentionError` naming the names that can. A
        layer whose heads run a scoring attention it is given by name (its ``scores`` argument,
        as the ``softmax`` layer's) can do only what that attention can, so the name is checked
        too. A layer built from other entries (``parallel_hybrid``'s branches) can do what its parts
        can, whatever its class declares for its default parts: its ``require_parts(kwargs, role=...,
        **needs)`` classmethod checks them instead."""
        if (require_parts := getattr(self.variant, "require_parts", None)) is not None:
            require_parts(self.kwargs, role=role, **needs)
        else:
            require_attention(self.name, role=role, layers=True, **needs)
        scores = self.kwargs.get("scores")
        if isinstance(scores, str):
            require_attention(scores, role=f"{role}, as the scores of {self.name!r}", **needs)
        return self

    def at_layer(self, layer_index: int) -> AttentionSpec:
        """The same, checked choice at one layer of a stack: a copy, not validated again."""
        spec = copy.copy(self)
        object.__setattr__(spec, "layer_index", layer_index)
        return spec

    def with_position(self, position: PositionScheme | None) -> AttentionSpec:
        """The same choice with another stack's position scheme (checked as at construction)."""
        return replace(self, position=position)

    def build(self, head_dim: int, num_heads: int) -> Attention:
        """The scoring attention for ``num_heads`` heads of size ``head_dim`` (a multi-head layer's)."""
        arguments = scoring_arguments(
            self.variant, head_dim=head_dim, num_heads=num_heads, dropout=self.dropout, **dict(self.kwargs)
        )
        return self.variant(**arguments)  # name and arguments checked when the spec was built

    def describe(self) -> str:
        """``name`` or ``name(key=value, ...)``: how summaries show the choice."""
        shown = {**self.kwargs, **({} if self.positioned else {"position": "none"})}
        if self.rotation:
            shown["position"] = dict(self.rotation)
        arguments = ", ".join(f"{key}={value!r}" for key, value in shown.items())
        return f"{self.name}({arguments})" if arguments else self.name


def split_entry(entry: AttentionEntry, where: str) -> tuple[str, dict[str, Any]]:
    """An entry (a name, or a mapping of a name and its arguments) as the name and its arguments;
    a ``ValueError`` beginning with ``where`` for anything else."""
    if isinstance(entry, str):
        return entry, {}
    if isinstance(entry, Mapping) and isinstance(entry.get("name"), str):
        arguments = dict(entry)
        return arguments.pop("name"), arguments
    raise ValueError(
        f"{where}: an attention entry is a registered name or a mapping with a 'name' and that variant's "
        f"arguments, e.g. {{name: local, window: 64}}; got {entry!r}."
    )


def layer_specs(
    attention: AttentionChoice,
    attention_kwargs: Mapping[str, Any] | None,
    num_layers: int,
    *,
    num_kv_heads: int | None = None,
    position: PositionScheme | None = None,
    dropout: float = 0.0,
    causal: bool = False,
    padding: bool = False,
    decoding: bool = False,
    role: str = "this architecture",
    stack: str = "layer",
    kv_sharing: bool = False,
) -> list[AttentionSpec]:
    """One spec per layer of a stack of ``num_layers``, from a model's arguments, each checked
    once against what the stack needs: ``causal`` masking, or else attending both ways (an
    encoder), ``padding`` masks, and ``decoding`` from a cache (a decoder's self-attention).

    ``attention`` is one entry for every layer (a name, or a mapping of a name and its
    arguments, which ``attention_kwargs`` add to), or a list: one entry per layer, or a pattern
    whose length divides ``num_layers``, repeated. An entry's ``position: none`` leaves its layers
    without the stack's ``position`` (Qwen3-Next's and MiniMax-01's linear layers are not rotated
    beside their rotated softmax layers); the scheme itself is the stack's, shared, so an entry may
    only drop it or, for a rotary scheme, change its ``base``, ``fraction`` or ``partial``
    (``position: {fraction: 0.25, partial: proportional, base: 1000000}``: Gemma 4's global layers
    beside its sliding ones). An entry's ``kv_source`` makes its layers read an earlier
    layer's keys and values (:func:`~zoo.attention.build.kv_sources.resolve_kv_sources`), in a
    stack that passes them on (``kv_sharing``: the GPT's). An error names the layer (``stack`` and
    its number from 1, ``"encoder layer 2"``) and the fix.
    """
    if isinstance(attention, str):
        entries: list[AttentionEntry] = [{"name": attention, **(attention_kwargs or {})}]
    elif isinstance(attention, Mapping):
        entries = [{**attention, **(attention_kwargs or {})}]
    elif isinstance(attention, Sequence) and attention:
        if attention_kwargs:
            raise ValueError(
                "attention_kwargs go with a single attention name; with a list, give each entry its own arguments: "
                "[{name: local, window: 64}, dot_product]."
            )
        entries = list(attention)
    else:
        raise ValueError(
            "attention must be a registered name, a mapping such as {name: local, window: 64}, or a non-empty list "
            f"of entries; got {attention!r}."
        )
    period = len(entries)
    if num_layers % period:
        raise ValueError(
            f"a list of {period} attention entries neither gives one per {stack} nor repeats evenly over "
            f"{num_layers}; give {num_layers} entries or a pattern whose length divides {num_layers}."
        )
    specs, sources = [], []  # a pattern's entries are built and checked once, then placed at each of their layers
    for index, entry in enumerate(entries):
        where = _layers_of(index, period, num_layers, stack)
        name, arguments = split_entry(entry, where)
        choice = arguments.pop("position", "stack")
        sources.append(arguments.pop("kv_source", None))
        try:
            positioned, layer_position, rotation = _entry_position(choice, position, where)
            spec = AttentionSpec(
                name, arguments, num_kv_heads, layer_position, dropout, positioned=positioned, rotation=rotation
            )
        except (IncompatibleAttentionError, KeyError, TypeError, ValueError) as error:
            raise type(error)(f"{where}: {error}") from None
        needs: AttentionNeeds = {
            "causal": causal,
            "bidirectional": not causal,
            "padding": padding,
            "decoding": decoding,
        }
        specs.append(spec.require(role=f"{role}, {where}", **needs))
    placed = [specs[layer % period].at_layer(layer) for layer in range(num_layers)]
    if all(source is None for source in sources):
        return placed
    requested = [sources[layer % period] for layer in range(num_layers)]
    read = resolve_kv_sources(placed, requested, allowed=kv_sharing, role=role, stack=stack)
    return [
        spec if source is None else replace(spec, kwargs={**spec.kwargs, "kv_source": source}).at_layer(layer)
        for layer, (spec, source) in enumerate(zip(placed, read))
    ]


def _entry_position(
    choice: object, position: PositionScheme | None, where: str
) -> tuple[bool, PositionScheme | None, Mapping[str, Any] | None]:
    """An entry's ``position``: absent, the stack's scheme; ``none`` (or null), no scheme; a mapping
    of :data:`ROTATION_OPTIONS`, the stack's rotary scheme with those options. Returns whether the
    layers are positioned, their scheme, and the options."""
    if choice == "stack":
        return True, position, None
    if choice is None or (isinstance(choice, str) and choice.lower() == "none"):
        return False, None, None
    if isinstance(choice, Mapping) and isinstance(position, RotaryEmbedding) and set(choice) <= set(ROTATION_OPTIONS):
        options = {"base": position.base, "fraction": position.fraction, "partial": position.partial}
        rotary = RotaryEmbedding(position.head_dim, **(options | dict(choice)), scaling=position.scaling)
        return True, rotary, MappingProxyType(dict(choice))
    raise ValueError(
        f"{where}: an entry's position can only be none or, with a rotary stack, a mapping of "
        f"{', '.join(ROTATION_OPTIONS)} (the stack's scheme is shared by its layers); got {choice!r}. Set the "
        "scheme with the model's position, "
        "position: none on the layers without it, and e.g. position: {base: 1000000} on those rotated otherwise."
    )


def _layers_of(index: int, period: int, num_layers: int, stack: str) -> str:
    """The layers entry ``index`` of a pattern of ``period`` covers, as an error names them."""
    if period == 1:
        return f"every {stack}"
    layers = [str(layer + 1) for layer in range(index, num_layers, period)]
    return f"{stack} {layers[0]}" if len(layers) == 1 else f"{stack}s {', '.join(layers)}"
