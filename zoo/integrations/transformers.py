"""The zoo's attention in Hugging Face transformers models: each scoring attention as an ``attn_implementation``.

Why: a transformers model picks the function its attention layers call by name
(``attn_implementation``), and transformers keeps the names in ``AttentionInterface``. Registering
every zoo scoring attention there as ``zoo_<name>`` runs the zoo's variants inside Hugging Face's
models (Llama, BERT and the others whose attention goes through that interface), with their
projections, positions, caches, ``generate`` and ``Trainer``::

    import zoo.integrations.transformers as zoo_hf  # registers zoo_<name> for every scoring attention

    model = AutoModelForCausalLM.from_config(config, attn_implementation="zoo_performer")
    zoo_hf.attach(model)  # optional for variants without parameters; see "State"

Importing this module registers the names (:func:`register`; call it again after registering a
plugin). ``import zoo`` never imports transformers; without it, importing this module raises
:class:`~zoo.integrations.MissingExtraError` naming ``pip install attention-zoo[hf]``.

What maps to what. transformers calls ``f(module, query, key, value, attention_mask, dropout=,
scaling=, **kwargs)`` with queries ``(B, H, Lq, d)`` and keys and values ``(B, H_kv, Lk, d)``,
and takes back ``(B, Lq, H, d)`` and the weights (or None):

* Masks. transformers builds no mask at all for an implementation whose mask format is not
  registered beside it (``AttentionMaskInterface``), so every ``zoo_<name>`` registers the
  boolean format of ``sdpa`` (``sdpa_mask``: ``(B, 1, Lq, Lk)``, True = attend, or None where
  SDPA's own ``is_causal`` would be exact). A mask that is exactly causality and padding (what
  a causal model builds, cached decoding and left padding included) reaches the variant as
  ``is_causal=True`` and a padding mask ``(B, 1, 1, Lk)`` (or none), the form in which windowed
  and kernelized variants keep their linear cost; a bidirectional padding mask likewise. Any
  other mask (packed sequences, sliding windows) goes as it is, with ``is_causal=False``. With
  no mask, a causal module gets ``is_causal=True`` (a single cached query then sees every key,
  with no mask built). Keys that no query may see at the end of a cache (the empty slots of a
  static cache) are cut off first, so the last query sits at the last key, as the zoo aligns
  queries bottom-right. Only boolean masks are taken: a float mask is refused.
* Grouped heads. A variant with ``supports_grouped_kv`` (``dot_product``) takes the ``H_kv``
  key and value heads as they are; any other gets them repeated to ``H``.
* Scaling. A variant with a ``scale`` argument (``dot_product``, ``local``, ``longformer``,
  ``sparse`` and the other dot-product variants) is built with the module's ``scaling``.
  ``performer`` estimates ``softmax(q k / sqrt(d))``: its queries are multiplied by
  ``scaling * sqrt(d)`` (1 for the usual scaling). The others have no such temperature and keep
  their own scores: ``linear`` (``elu + 1`` features), ``gaussian_kernel`` (distances),
  ``additive`` (an MLP), ``average`` and ``synthesizer`` (no query-key products).
* Dropout. transformers hands the rate it applies in training; a variant that takes a
  ``dropout`` argument applies that rate on its weights while the module trains (the variant is
  a submodule, so ``model.train()`` and ``model.eval()`` reach it). Variants without one
  (``linear``, ``performer``) apply none.
* State. Each attention module holds its variants in a ``ModuleDict`` ``zoo_attention``, by
  name, so parameters and buffers (``local``'s relative bias, ``performer``'s random features)
  move, train and save with the model. :func:`attach` builds them when called, once the model
  is built and before its optimizer, so the optimizer sees their parameters. Without it a
  variant is built at the module's first call; one with trainable parameters is then refused
  (an optimizer built before could never train them), with a message naming :func:`attach`.
  Constructor arguments come from ``config.zoo_attention_kwargs`` (``attach(model, window=64)``
  sets it, and ``save_pretrained`` saves it with the config).
* Capabilities. A variant is checked when it is built: a causal module (``module.is_causal``,
  true unless the model says otherwise, as transformers' ``sdpa`` assumes) needs
  ``supports_causal``, a model with rotary positions (``config.rope_parameters``) needs
  ``supports_rotary`` (Llama rotates queries and keys before they reach the attention), and
  every module needs padding masks, handed with causality as one mask per query
  (``supports_query_mask``: the recurrent variants, which take key padding only and read the
  layer's input for their gates, are refused). One that lacks any of them raises
  :class:`~zoo.IncompatibleAttentionError` naming the ``zoo_`` names that would work. A variant
  that needs one sequence (``local``, ``longformer``) refuses cross-attention itself, at the call.
  Weights are returned when the model asks (``output_attentions``) and the variant can.
"""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import Tensor, nn

from zoo.attention import (
    Attention,
    IncompatibleAttentionError,
    causal_mask,
    create_scoring_attention,
    get_attention,
    list_attention,
    require_attention,
)
from zoo.attention.kernels.sdpa import repeat_kv_heads
from zoo.errors import ConfigurationError
from zoo.integrations import MissingExtraError

try:
    from transformers import AttentionInterface, AttentionMaskInterface
    from transformers.masking_utils import sdpa_mask
except ImportError as error:
    raise MissingExtraError(
        f"zoo.integrations.transformers needs Hugging Face transformers >= 5.24: pip install 'attention-zoo[hf]' "
        f"({error})."
    ) from error

__all__ = ["ATTRIBUTE", "KWARGS_KEY", "PREFIX", "attach", "attention_function", "register"]

#: prefix of the zoo's names in transformers' ``AttentionInterface``: ``zoo_local``
PREFIX = "zoo_"
#: the ``ModuleDict`` of zoo variants, by name, on each Hugging Face attention module
ATTRIBUTE = "zoo_attention"
#: the config attribute holding the variants' constructor arguments
KWARGS_KEY = "zoo_attention_kwargs"

#: what a module needs of a variant, as capability flags, and how a refusal names each
NEEDS = {
    "supports_causal": "causal masking",
    "supports_padding_mask": "padding masks",
    "supports_query_mask": "masks that differ per query (causality and padding come as one mask)",
    "supports_rotary": "queries and keys rotated by rotary positions",
}
#: keyword arguments some models hand their attention that no zoo variant applies
UNSUPPORTED = {
    "softcap": "soft-capped scores (softcap)",
    "s_aux": "attention sinks (s_aux)",
    "position_bias": "a bias tensor added to the scores (position_bias)",
}

AttentionFunction = Callable[..., tuple[Tensor, Tensor | None]]


def scoring_attention_names() -> list[str]:
    """Registered scoring attentions (plugins included), by canonical name."""
    return [name for name in list_attention() if issubclass(get_attention(name), Attention)]


def register(names: Iterable[str] | str | None = None) -> list[str]:
    """Register zoo scoring attentions with transformers as ``zoo_<name>``; return those names.

    Each gets its attention function (:func:`attention_function`) in ``AttentionInterface`` and
    the boolean mask format of ``sdpa`` in ``AttentionMaskInterface``. Registering again changes
    nothing, so call it after registering a plugin to add it.

    Args:
        names: Zoo names (aliases too); None takes every registered scoring attention.

    Raises:
        UnknownNameError: a name is not registered (the message suggests close ones).
        IncompatibleAttentionError: a name is an attention layer, not a scoring attention.
    """
    names = scoring_attention_names() if names is None else [names] if isinstance(names, str) else list(names)
    for name in names:  # every name checked before any is registered
        require_attention(name, role="a Hugging Face attn_implementation (per-head scoring)")
    for name in names:
        AttentionInterface.register(PREFIX + name, attention_function(name))
        AttentionMaskInterface.register(PREFIX + name, sdpa_mask)
    return [PREFIX + name for name in names]


@functools.cache
def attention_function(name: str) -> AttentionFunction:
    """The function transformers calls for ``zoo_<name>`` (one object per name, so registering is idempotent)."""
    return functools.partial(attend, name)


def attend(
    name: str,
    module: nn.Module,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attention_mask: Tensor | None,
    **options: Any,
) -> tuple[Tensor, Tensor | None]:
    """Zoo attention ``name`` for the Hugging Face attention ``module``: ``(B, Lq, H, d)`` and the
    weights. transformers calls it as ``(module, query, key, value, attention_mask, **options)``,
    the options holding ``dropout``, ``scaling``, ``is_causal`` and what the model adds."""
    refuse_unsupported(name, options)
    scaling, is_causal = options.get("scaling"), options.get("is_causal")
    variant = variant_of(module, name, query, scaling)
    causal = getattr(module, "is_causal", True) if is_causal is None else bool(is_causal)
    mask, causal, num_keys = zoo_mask(name, attention_mask, causal, query.shape[-2], key.shape[-2])
    key, value = repeat_heads(variant, query, key[..., :num_keys, :], value[..., :num_keys, :])
    if module.training and takes_argument(type(variant), "dropout"):
        variant.dropout.p = options.get("dropout", 0.0)
    output, weights = variant(
        scaled_queries(variant, query, scaling),
        key,
        value,
        attn_mask=mask,
        is_causal=causal,
        need_weights=bool(options.get("output_attentions")),
    )
    return output.transpose(1, 2).contiguous(), weights


def refuse_unsupported(name: str, kwargs: dict[str, Any]) -> None:
    """Refuse a model feature that reaches the attention as an argument no zoo variant applies."""
    for argument, feature in UNSUPPORTED.items():
        if kwargs.get(argument) is not None:
            raise IncompatibleAttentionError(
                f"Attention {PREFIX + name!r} cannot apply {feature}, which this model hands its attention; "
                "use attn_implementation='eager' for it."
            )


def zoo_mask(
    name: str, attention_mask: Tensor | None, is_causal: bool, num_queries: int, num_keys: int
) -> tuple[Tensor | None, bool, int]:
    """transformers' mask in the zoo's terms: ``(attn_mask, is_causal, keys to keep)`` (see the module docstring)."""
    if attention_mask is None:
        # transformers leaves the mask out where SDPA's is_causal, aligned top-left, is exact: that covers
        # a prefill into an empty static cache (Lq < Lk), whose key slots after the queries are empty
        into_empty_cache = is_causal and 1 < num_queries < num_keys
        return None, is_causal, num_queries if into_empty_cache else num_keys
    if attention_mask.dtype != torch.bool:
        raise IncompatibleAttentionError(
            f"Attention {PREFIX + name!r} takes boolean masks (True = attend), got a {attention_mask.dtype} one: "
            "pass a 2-D padding mask or a boolean 4-D mask."
        )
    kept = num_keys if num_keys <= num_queries else last_seen_key(attention_mask)
    mask = attention_mask[..., :kept]
    keys = mask[..., -1:, :]  # what the last query sees: all the padding mask holds, if that is all there is
    expected = keys & causal_mask(num_queries, kept, device=mask.device) if is_causal else keys
    if not torch.equal(mask, expected.expand(mask.shape)):
        return mask, False, kept
    return (None if bool(keys.all()) else keys), is_causal, kept


def last_seen_key(mask: Tensor) -> int:
    """One past the last key that some query may see (every key if none may)."""
    seen = mask.reshape(-1, mask.shape[-1]).any(0).nonzero()
    return int(seen[-1]) + 1 if len(seen) else mask.shape[-1]


def repeat_heads(variant: Attention, query: Tensor, key: Tensor, value: Tensor) -> tuple[Tensor, Tensor]:
    """Keys and values with fewer heads than the queries, repeated per head unless the variant takes them grouped."""
    return (key, value) if variant.supports_grouped_kv else repeat_kv_heads(query, key, value)


def scaled_queries(variant: Attention, query: Tensor, scaling: float | None) -> Tensor:
    """The queries, times ``scaling * sqrt(d)`` for a softmax estimator (``performer``) whose own
    temperature is ``1 / sqrt(d)``; variants with a ``scale`` argument were built with ``scaling``."""
    if scaling is None or not isinstance(variant, get_attention("performer")):
        return query
    factor = scaling * math.sqrt(query.shape[-1])
    return query if math.isclose(factor, 1.0) else query * factor


def variant_of(module: nn.Module, name: str, query: Tensor, scaling: float | None) -> Attention:
    """The variant ``module`` holds for ``name``, built now (at its first call) if it holds none."""
    held = getattr(module, ATTRIBUTE, None)
    if isinstance(held, nn.ModuleDict) and name in held:
        return held[name]
    variant = build_variant(module, name, num_heads=query.shape[-3], head_dim=query.shape[-1], scaling=scaling)
    if any(parameter.requires_grad for parameter in variant.parameters()):
        raise ConfigurationError(
            f"Attention {PREFIX + name!r} has trainable parameters, which must be in the model before its "
            "optimizer is built: call zoo.integrations.transformers.attach(model) once, right after building it."
        )
    return install(module, name, variant.to(query.device))


def install(module: nn.Module, name: str, variant: Attention) -> Attention:
    """Hold ``variant`` in ``module``'s ``zoo_attention`` under ``name``, training as the module does."""
    if not isinstance(getattr(module, ATTRIBUTE, None), nn.ModuleDict):
        module.add_module(ATTRIBUTE, nn.ModuleDict())
    getattr(module, ATTRIBUTE)[name] = variant.train(module.training)
    return variant


def build_variant(module: nn.Module, name: str, *, num_heads: int, head_dim: int, scaling: float | None) -> Attention:
    """A new variant ``name`` for ``module``, after checking it can do what the module needs."""
    variant_class = require_for(module, name)
    kwargs = dict(getattr(getattr(module, "config", None), KWARGS_KEY, None) or {})
    if scaling is not None and takes_argument(variant_class, "scale"):
        kwargs.setdefault("scale", scaling)
    return create_scoring_attention(name, head_dim=head_dim, num_heads=num_heads, **kwargs)


def requirements(module: nn.Module) -> dict[str, bool]:
    """The capability flags ``module`` needs of a variant: causal, padding (per query), rotary."""
    rope = getattr(getattr(module, "config", None), "rope_parameters", None)
    return {
        "supports_causal": bool(getattr(module, "is_causal", True)),
        "supports_padding_mask": True,
        "supports_query_mask": True,
        "supports_rotary": rope is not None,
    }


def require_for(module: nn.Module, name: str) -> type[Attention]:
    """The class of ``name`` if it can do what ``module`` needs, else the zoo's refusal naming those that can."""
    needs = {flag: NEEDS[flag] for flag, needed in requirements(module).items() if needed}
    role = f"Hugging Face's {type(module).__name__} (which needs {', '.join(needs.values())})"
    return require_attention(
        name, role=role, flags=needs, shown_as=PREFIX.__add__, listed_as="attn_implementation names"
    )


@functools.cache
def takes_argument(cls: type, argument: str) -> bool:
    """Whether the constructor of ``cls`` takes ``argument``."""
    return argument in inspect.signature(cls).parameters


def attach(model: nn.Module, **attention_kwargs: Any) -> nn.Module:
    """Build now the zoo variant of every attention module of ``model`` that runs a ``zoo_`` implementation.

    Call it once, after building the model and before its optimizer: the variants' parameters
    are then among ``model.parameters()``. Each module gets a fresh variant (checked against what
    it needs), on the device and in the floating dtype of its own parameters.

    Args:
        model: A transformers model built with ``attn_implementation="zoo_<name>"``.
        attention_kwargs: Constructor arguments of the variants (``window=64`` for ``local``);
            stored as ``config.zoo_attention_kwargs``, which they otherwise come from.

    Returns:
        ``model``, for chaining.
    """
    modules = [(module, name) for module in model.modules() if (name := zoo_name(module)) is not None]
    if not modules:
        raise ConfigurationError(
            f"{type(model).__name__} has no attention module running a zoo attention: build it with "
            f"attn_implementation='{PREFIX}<name>', one of {', '.join(PREFIX + n for n in scoring_attention_names())}."
        )
    for module, name in modules:
        if attention_kwargs:
            setattr(module.config, KWARGS_KEY, dict(attention_kwargs))
        num_heads, head_dim = head_shape(module)
        variant = build_variant(
            module, name, num_heads=num_heads, head_dim=head_dim, scaling=getattr(module, "scaling", None)
        )
        install(module, name, like_module(variant, module))
    return model


def like_module(variant: Attention, module: nn.Module) -> Attention:
    """``variant`` on the device of ``module``'s parameters, and in their dtype if they are floating point."""
    reference = next(module.parameters(), None)
    if reference is None:
        return variant
    variant = variant.to(reference.device)
    return variant.to(reference.dtype) if reference.is_floating_point() else variant


def zoo_name(module: nn.Module) -> str | None:
    """The zoo name ``module`` runs, if it is an attention module whose config names a ``zoo_`` implementation.

    An attention module is one whose ``forward`` calls transformers' ``ALL_ATTENTION_FUNCTIONS``
    (the test transformers itself applies to a model's source before switching implementations).
    """
    implementation = getattr(getattr(module, "config", None), "_attn_implementation", None)
    if not (isinstance(implementation, str) and implementation.startswith(PREFIX)):
        return None
    return implementation.removeprefix(PREFIX) if calls_attention_interface(type(module)) else None


@functools.cache
def calls_attention_interface(cls: type[nn.Module]) -> bool:
    """Whether ``cls.forward`` dispatches through transformers' attention interface."""
    try:
        return "ALL_ATTENTION_FUNCTIONS" in inspect.getsource(cls.forward)
    except (OSError, TypeError):  # no source: built-in, or defined interactively
        return False


def head_shape(module: nn.Module) -> tuple[int, int]:
    """``(query heads, head size)`` of an attention module, from its attributes or else its config."""
    config = module.config
    num_heads = (
        getattr(module, "num_heads", None) or getattr(module, "num_attention_heads", None) or config.num_attention_heads
    )
    head_dim = (
        getattr(module, "head_dim", None)
        or getattr(module, "attention_head_size", None)
        or getattr(config, "head_dim", None)
        or config.hidden_size // num_heads
    )
    return num_heads, head_dim


register()
