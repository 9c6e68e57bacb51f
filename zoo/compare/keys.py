"""Which ``--grid`` keys ``fit`` takes: the flags of the configuration it resolves for the base
arguments (the model's and data's signatures as the CLI reads them, the trainer's, the
checkpoint's), checked before any run starts.

A key the configuration does not have would otherwise surface only when the first run fails,
as jsonargparse's ``NestedArg(key=...)``; here it is one line naming the closest flags.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from zoo.errors import ConfigurationError

__all__ = ["check_grid_keys", "flag_names"]

#: Flags of the command that are not configuration values: the config files themselves.
ACTIONS = ("config",)


def _names(prefix: str, value: Any) -> Iterator[tuple[str, bool]]:
    """``(dotted flag, shown)`` for ``value`` and everything under it. A class (``class_path`` and
    ``init_args``) takes its arguments both as ``X.init_args.name`` and as ``X.name``; the short
    form is the one suggested."""
    yield prefix, True
    if not isinstance(value, Mapping):
        return
    init_args = value.get("init_args") if "class_path" in value else None
    for key, item in value.items():
        yield from _names(f"{prefix}.{key}", item) if key != "init_args" else ()
    if isinstance(init_args, Mapping):
        yield f"{prefix}.init_args", False
        for key, item in init_args.items():
            for name, shown in _names(f"{prefix}.{key}", item):
                yield name, shown
                yield name.replace(f"{prefix}.{key}", f"{prefix}.init_args.{key}", 1), False


def flag_names(resolved: Mapping[str, Any]) -> dict[str, bool]:
    """Every dotted flag of a resolved ``fit`` configuration -> whether to suggest it."""
    names: dict[str, bool] = dict.fromkeys(ACTIONS, True)
    for key, value in resolved.items():
        for name, shown in _names(key, value):
            names[name] = names.get(name, False) or shown
    return names


def check_grid_keys(keys: Iterable[str], resolved: Mapping[str, Any], described: str) -> None:
    """Refuse a key that is not a flag of ``resolved``, naming the closest ones.

    ``described`` says what was resolved (the model and data classes), for the message.
    """
    names = flag_names(resolved)
    for key in keys:
        if key in names:
            continue
        shown = [name for name, suggest in names.items() if suggest]
        group = key.split(".", 1)[0]
        shown = [name for name in shown if name.split(".", 1)[0] == group and name != group] or shown
        close = difflib.get_close_matches(key, shown, n=3, cutoff=0.0)
        raise ConfigurationError(
            f"--grid {key}: fit has no such flag with {described}; the closest: {', '.join(close)} "
            "(python -m zoo fit ARGS --print_config lists them all)."
        )
