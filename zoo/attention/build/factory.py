"""The attention registry and the functions users call to find, build and register attention.

One registry holds both kinds, so a name means one thing wherever it is given
(``--model.attention`` takes either): scoring attentions (:class:`~zoo.attention.contract.base.Attention`,
run per head by the ``multi_head`` layer) and attention layers
(:class:`~zoo.attention.contract.layer.AttentionLayer`, which own their projections, gates, convolutions
and cache). Plugins register through the entry-point groups ``zoo.attention`` and
``zoo.attention_layers``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from torch import nn
from typing_extensions import TypedDict, Unpack

from zoo.arguments import check_kwargs
from zoo.attention.contract.base import Attention, IncompatibleAttentionError
from zoo.attention.contract.layer import AttentionLayer
from zoo.errors import UnknownNameError
from zoo.registry import Registry

__all__ = [
    "ATTENTION_REGISTRY",
    "AttentionNeeds",
    "create_attention",
    "create_scoring_attention",
    "get_attention",
    "layer_names",
    "list_attention",
    "register_attention",
    "register_attention_layer",
    "require_attention",
    "scoring_arguments",
    "scoring_names",
]

ModuleT = TypeVar("ModuleT", bound=type[nn.Module])

ATTENTION_REGISTRY: Registry[type[nn.Module]] = Registry(
    "attention", base=(Attention, AttentionLayer), entry_point_group=("zoo.attention", "zoo.attention_layers")
)


def register_attention(
    name: str | None = None, *, aliases: tuple[str, ...] | list[str] = (), override: bool = False
) -> Callable[[ModuleT], ModuleT]:
    """Class decorator registering a subclass of :class:`zoo.Attention` (or a layer) by name.

    Example::

        @zoo.register_attention("cosine")
        class CosineAttention(zoo.Attention):
            def score(self, queries, keys):
                return F.normalize(queries, dim=-1) @ F.normalize(keys, dim=-1).transpose(-2, -1)
    """
    return ATTENTION_REGISTRY.register(name, aliases=aliases, override=override)  # type: ignore[return-value]


def register_attention_layer(
    name: str | None = None, *, aliases: tuple[str, ...] | list[str] = (), override: bool = False
) -> Callable[[ModuleT], ModuleT]:
    """Class decorator registering a subclass of :class:`zoo.AttentionLayer` by name: a layer a
    stack builds in place of the multi-head layer (``--model.attention NAME``).

    Example::

        @zoo.register_attention_layer("my_recurrence")
        class MyRecurrence(zoo.RecurrentLayer):
            ...
    """

    def decorator(cls: ModuleT) -> ModuleT:
        if not (inspect.isclass(cls) and issubclass(cls, AttentionLayer)):
            raise TypeError(
                f"register_attention_layer takes a subclass of zoo.AttentionLayer; got {cls!r}. Register a scoring "
                "attention (a zoo.Attention) with register_attention."
            )
        return ATTENTION_REGISTRY.register(name, aliases=aliases, override=override)(cls)  # type: ignore[return-value]

    return decorator


def list_attention(pattern: str | None = None) -> list[str]:
    """Registered attention names (canonical), naturally sorted, filtered by a wildcard."""
    return ATTENTION_REGISTRY.list(pattern)


def get_attention(name: str) -> type[nn.Module]:
    """The class registered under ``name`` or an alias."""
    return ATTENTION_REGISTRY.get(name)


def create_attention(name: str, /, **kwargs: Any) -> nn.Module:
    """Build the attention registered under ``name``; unknown names and keywords get suggestions."""
    return ATTENTION_REGISTRY.create(name, **kwargs)


def scoring_names() -> list[str]:
    """Names of registered scoring attentions (those usable per head inside a layer)."""
    return [e.name for e in ATTENTION_REGISTRY.entries() if issubclass(e.obj, Attention)]


def layer_names() -> list[str]:
    """Names of registered attention layers (those a stack builds by name)."""
    return [e.name for e in ATTENTION_REGISTRY.entries() if issubclass(e.obj, AttentionLayer)]


def _stackable(candidate: type[nn.Module]) -> bool:
    """A scoring attention (a stack runs it per head in a multi-head layer), or a layer a stack
    builds by name (not the multi-head layers themselves, which wrap a scoring attention)."""
    return issubclass(candidate, Attention) or (issubclass(candidate, AttentionLayer) and candidate.stack_layer)


class AttentionNeeds(TypedDict, total=False):
    """What an architecture needs of its scoring attention; a need not given is not needed."""

    causal: bool
    padding: bool
    weights: bool
    cross: bool
    bidirectional: bool
    decoding: bool


#: each need: the capability flag a variant declares it with, and how a refusal names it
_CAPABILITIES: dict[str, tuple[str, str]] = {
    "causal": ("supports_causal", "causal masking"),
    "padding": ("supports_padding_mask", "padding masks"),
    "weights": ("supports_weights", "returning weights"),
    "cross": ("supports_cross_attention", "attending over another sequence (cross-attention)"),
    "bidirectional": ("supports_bidirectional", "attending in both directions (it is a causal recurrence)"),
    "decoding": ("supports_decoding", "decoding from a cache (it implements no attend_cached)"),
}


def require_attention(
    name: str,
    *,
    role: str = "this architecture",
    layers: bool = False,
    flags: Mapping[str, str] | None = None,
    shown_as: Callable[[str], str] = str,
    listed_as: str = "registered names",
    **needs: Unpack[AttentionNeeds],
) -> type[nn.Module]:
    """Resolve an attention name and check it can do what ``role`` needs.

    Args:
        name: A registered name or alias.
        role: What needs it, as a refusal names it.
        layers: Whether a layer a stack builds by name also serves (a stack's attention), or
            only a scoring attention (the heads of a multi-head layer).
        flags: Capability flags wanted beyond ``needs``, each with how a refusal names it
            (``{"supports_rotary": "rotary positions"}``: an integration's needs).
        shown_as, listed_as: How a refusal shows a registered name, and what it calls the
            list of those that would serve (``"zoo_" + name`` and ``"attn_implementation
            names"`` where another library knows the variants under a prefix).
        needs: The capabilities wanted (:class:`AttentionNeeds`).

    Raises:
        UnknownNameError: ``name`` is not registered; the message suggests and lists the names
            that would serve.
        IncompatibleAttentionError: it is of a kind ``role`` cannot use, or lacks a needed
            capability; the message lists the registered names that would work.
        TypeError: a need that is not one of :class:`AttentionNeeds`'.
    """
    if unknown := sorted(set(needs) - set(_CAPABILITIES)):
        raise TypeError(f"require_attention() got unknown needs {unknown}; the needs are {sorted(_CAPABILITIES)}.")
    wanted = {flag: label for need, (flag, label) in _CAPABILITIES.items() if needs.get(need)} | dict(flags or {})
    kind_fits = _stackable if layers else (lambda candidate: issubclass(candidate, Attention))

    def fits(candidate: type[nn.Module]) -> bool:
        return kind_fits(candidate) and all(getattr(candidate, flag) for flag in wanted)

    def compatible() -> list[str]:  # the registry is scanned only for an error's suggestions
        return [shown_as(e.name) for e in ATTENTION_REGISTRY.entries() if fits(e.obj)]

    try:
        cls = ATTENTION_REGISTRY.get(name)
    except UnknownNameError:
        cls = ATTENTION_REGISTRY.get(name, candidates=[e.name for e in ATTENTION_REGISTRY.entries() if fits(e.obj)])
    if not fits(cls):
        if not kind_fits(cls):
            reason = (
                "it is a multi-head layer, which a stack builds around a scoring attention: name the scoring attention"
                if layers
                else "it is an attention layer (it owns projections), not a scoring attention"
            )
        else:
            reason = "it does not support " + " or ".join(
                label for flag, label in wanted.items() if not getattr(cls, flag)
            )
        raise IncompatibleAttentionError(
            f"Attention {shown_as(name)!r} cannot be used by {role}: {reason}. "
            f"Compatible {listed_as}: {', '.join(compatible()) or 'none'}."
        )
    return cls


def create_scoring_attention(
    name: str, *, head_dim: int, num_heads: int = 1, dropout: float = 0.0, **kwargs: Any
) -> Attention:
    """Build a scoring attention for ``num_heads`` heads of size ``head_dim``
    (:func:`scoring_arguments` says what it is given)."""
    cls = require_attention(name, role="an attention layer (per-head scoring)")
    check_kwargs(cls, kwargs, what=f"attention {name!r}")
    return cls(**scoring_arguments(cls, head_dim=head_dim, num_heads=num_heads, dropout=dropout, **kwargs))


def scoring_arguments(
    cls: type[nn.Module], *, head_dim: int, num_heads: int, dropout: float, **kwargs: Any
) -> dict[str, Any]:
    """The constructor arguments of a scoring attention for ``num_heads`` heads of size
    ``head_dim``: ``kwargs``, and what its constructor takes of the heads' sizes unless ``kwargs``
    sets it (``query_size`` / ``key_size``, like ``additive``'s; ``num_heads``, for per-head
    parameters like ``local``'s relative bias; ``dropout``)."""
    params = inspect.signature(cls).parameters
    defaults = {"query_size": head_dim, "key_size": head_dim, "num_heads": num_heads, "dropout": dropout}
    return {**{key: value for key, value in defaults.items() if key in params}, **kwargs}
