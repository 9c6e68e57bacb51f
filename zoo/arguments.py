"""Which keyword arguments a constructor accepts, and the closest names to a misspelt one.

A registry checks a name's keyword arguments against its constructor before calling it, so a
misspelt keyword is refused in one line naming the closest accepted ones instead of failing deep
inside the constructor (:func:`check_kwargs`); the same closeness suggests registered names
(:func:`suggest`). Options several constructors share are read from a
``**kwargs: Unpack[SomeTypedDict]`` (PEP 692) as well as from named parameters.
"""

from __future__ import annotations

import difflib
import inspect
import typing
from collections.abc import Callable
from typing import Any

from typing_extensions import Unpack

from zoo.errors import UnknownArgumentError

__all__ = ["accepted_keywords", "check_kwargs", "suggest"]

#: ``Unpack`` as ``typing`` and ``typing_extensions`` spell it (one object from Python 3.12 on)
_UNPACK = {Unpack, getattr(typing, "Unpack", Unpack)}


def suggest(name: str, candidates: list[str], limit: int = 3) -> list[str]:
    """The candidates closest to ``name``, best first (substring matches count as close)."""
    close = difflib.get_close_matches(name, candidates, n=limit, cutoff=0.5)
    for candidate in candidates:
        if len(close) >= limit:
            break
        if candidate not in close and (name in candidate or candidate in name):
            close.append(candidate)
    return close


def accepted_keywords(factory: Callable[..., Any]) -> list[str] | None:
    """The keyword arguments ``factory`` accepts, those of a ``**kwargs: Unpack[SomeTypedDict]``
    included (PEP 692: options several constructors share, written once); None where it accepts
    any (a plain ``**kwargs``) or has no signature to read."""
    try:
        params = inspect.signature(factory).parameters
    except (TypeError, ValueError):  # builtins without a signature: let the call decide
        return None
    named = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    accepted = [name for name, p in params.items() if p.kind in named]
    var = next((p for p in params.values() if p.kind is inspect.Parameter.VAR_KEYWORD), None)
    if var is None:
        return accepted
    function = factory.__init__ if inspect.isclass(factory) else factory
    annotation = typing.get_type_hints(function, include_extras=True).get(var.name)
    if typing.get_origin(annotation) not in _UNPACK:
        return None
    (options,) = typing.get_args(annotation)
    return accepted + [key for key in typing.get_type_hints(options) if key not in accepted]


def check_kwargs(factory: Callable[..., Any], kwargs: dict[str, Any], *, what: str) -> None:
    """Raise :class:`UnknownArgumentError` if ``factory`` would reject a keyword in ``kwargs``."""
    accepted = accepted_keywords(factory)
    if accepted is None:
        return
    unknown = [key for key in kwargs if key not in accepted]
    if unknown:
        parts = []
        for key in unknown:
            close = suggest(key, accepted)
            parts.append(f"{key!r}" + (f" (did you mean {', '.join(repr(c) for c in close)}?)" if close else ""))
        raise UnknownArgumentError(
            f"{what} got unexpected keyword argument(s) {', '.join(parts)}. Accepted: {', '.join(accepted) or 'none'}."
        )
