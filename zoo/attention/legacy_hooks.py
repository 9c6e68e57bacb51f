"""Hooks written against the contract before :class:`~zoo.attention.context.AttentionContext`.

Until the context, a variant's hook took the merged mask and the options one by one:
``attend(queries, keys, values, mask, *, is_causal=False, need_weights=False[, position_bias])``
for a scoring attention, ``attend(x, mask, *, is_causal, need_weights)`` and
``attend_cached(x, cache, *, attn_mask=None)`` for a layer. Such a plugin keeps working: when its
class is created, each hook of the old shape is wrapped into the new one (``attend(..., context)``,
``attend_cached(x, cache, context)``), which hands it the context's fields, and a
``FutureWarning`` names the rename. A call such a hook makes to ``super().attend(..., mask,
is_causal=...)`` reaches an ``attend`` of the new shape, which reads it back into a context
(:func:`accept_legacy_calls`, applied to every class's hooks).
"""

from __future__ import annotations

import functools
import inspect
import warnings
from collections.abc import Callable
from typing import Any

from torch import Tensor

from zoo.attention.context import AttentionContext

__all__ = ["accept_legacy_calls", "adapt_legacy_attend", "context_of"]

#: the options a hook of the old shape took as keywords, and the context's fields they became
_OPTIONS = ("is_causal", "need_weights", "position_bias")


def _is_legacy(hook: Callable[..., Any]) -> bool:
    """Whether ``hook`` has the old shape: a ``mask`` or ``attn_mask`` and options, no ``context``."""
    parameters = inspect.signature(hook).parameters
    return "context" not in parameters and any(name in parameters for name in ("mask", "attn_mask", "is_causal"))


def adapt_legacy_attend(cls: type, inputs: str) -> None:
    """Wrap, in place, the hooks of ``cls`` written against the old contract (see the module
    docstring); ``inputs`` names the tensors before the mask (``"queries, keys, values"`` or ``"x"``),
    as the warning shows them."""
    attend = cls.__dict__.get("attend")
    if attend is not None and _is_legacy(attend):
        takes_bias = "position_bias" in inspect.signature(attend).parameters

        @functools.wraps(attend)
        def adapted_attend(self: Any, *arguments: Any) -> Any:
            *tensors, context = arguments  # the inputs, then the context
            options = {"is_causal": context.is_causal, "need_weights": context.need_weights}
            if takes_bias and context.position_bias is not None:
                options["position_bias"] = context.position_bias
            return attend(self, *tensors, context.mask, **options)

        cls.attend = adapted_attend
        _warn(cls, f"attend({inputs}, mask, *, is_causal, need_weights)", f"attend({inputs}, context)")
    attend_cached = cls.__dict__.get("attend_cached")
    if attend_cached is not None and _is_legacy(attend_cached):

        @functools.wraps(attend_cached)
        def adapted_attend_cached(self: Any, x: Tensor, cache: Any, context: AttentionContext | None = None) -> Any:
            return attend_cached(self, x, cache, attn_mask=None if context is None else context.mask)

        cls.attend_cached = adapted_attend_cached
        _warn(cls, "attend_cached(x, cache, *, attn_mask=None)", "attend_cached(x, cache, context)")


def accept_legacy_calls(cls: type, inputs: int) -> None:
    """Let the hooks that ``cls`` defines with the new shape take a call of the old one too: a
    plugin of the old shape that subclasses a built-in calls ``super().attend(..., mask,
    is_causal=...)`` or ``super().attend_cached(x, cache, attn_mask=...)``, which reaches a hook of
    the new shape with a mask in the context's place (:func:`context_of` reads it back).
    ``inputs`` counts the tensors ``attend`` takes before the context (3 for a scoring attention,
    1 for a layer)."""
    attend = cls.__dict__.get("attend")
    if attend is not None and not hasattr(attend, "__wrapped__") and not _is_legacy(attend):

        @functools.wraps(attend)
        def attend_either(self: Any, *arguments: Any, **legacy: Any) -> Any:
            tensors, context = arguments[:inputs], arguments[inputs] if len(arguments) > inputs else None
            if legacy or not isinstance(context, AttentionContext):
                context = context_of(context, legacy)
            return attend(self, *tensors, context)

        cls.attend = attend_either
    attend_cached = cls.__dict__.get("attend_cached")
    if attend_cached is not None and not hasattr(attend_cached, "__wrapped__") and not _is_legacy(attend_cached):

        @functools.wraps(attend_cached)
        def attend_cached_either(
            self: Any, x: Tensor, cache: Any, context: Any = None, *, attn_mask: Any = None
        ) -> Any:
            if attn_mask is not None:
                context = AttentionContext(attn_mask, is_causal=True)
            return attend_cached(self, x, cache, context)

        cls.attend_cached = attend_cached_either


def _warn(cls: type, old: str, new: str) -> None:
    warnings.warn(
        f"{cls.__name__}.{old} is the attention contract before the context; rename it to {new} and "
        "read the mask and options from the context (context.mask, context.is_causal, context.need_weights, "
        "context.position_bias).",
        FutureWarning,
        stacklevel=4,
    )


def context_of(context: AttentionContext | Tensor | None, legacy: dict[str, Any]) -> AttentionContext:
    """``context``, or the context a hook of the old shape meant by passing a mask (or None) in its
    place and the options as keywords (``legacy``)."""
    if isinstance(context, AttentionContext):
        if legacy:
            raise TypeError(f"attend() takes a context and no options besides; got {sorted(legacy)}.")
        return context
    if unknown := sorted(set(legacy) - set(_OPTIONS)):
        raise TypeError(f"attend() got unexpected keyword arguments {unknown}; the options were {list(_OPTIONS)}.")
    return AttentionContext(context, **legacy)
