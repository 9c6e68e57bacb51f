"""Installed plugins: the entry points a :class:`~zoo.registry.Registry` discovers.

Installed packages register through Python entry points (``[project.entry-points."zoo.attention"]``
and so on); a registry loads its group once per process, on its first lookup or listing
(:meth:`~zoo.registry.Registry.reload_plugins` looks again). A plugin that fails to import is
reported once by name and skipped. A name claimed by two installed distributions is loaded from
neither: picking one would depend on the order of ``sys.path``, so it is recorded as a conflict
(looking it up raises :class:`~zoo.registry.DuplicateNameError` naming both) and every other
name keeps working.

Plugins that are not installed (``--import`` modules) are :mod:`zoo.plugins`' job. This module
imports nothing of the zoo: the registry imports it, and it reaches a registry through
:class:`PluginHost`, the part of one that loading plugins uses.
"""

from __future__ import annotations

import warnings
from importlib import metadata
from typing import Any, Protocol

__all__ = ["PluginHost", "PluginLoadWarning", "distribution", "load_entry_points"]

#: How far up a plugin's warning points: past this module and the registry's lookup, at its caller.
_CALLER = 5


class PluginLoadWarning(UserWarning):
    """An entry-point plugin could not be loaded and was skipped."""


class PluginHost(Protocol):
    """What loading entry points needs of a registry (:class:`~zoo.registry.Registry` is one)."""

    #: What is registered, used in warnings (``"attention"``).
    kind: str
    #: The entry-point group to load (``"zoo.attention"``).
    entry_point_group: str | None
    #: Entry-point names that could not be registered, with the reason.
    failed_plugins: dict[str, str]
    #: Entry-point names claimed by more than one distribution, with those distributions.
    conflicts: dict[str, tuple[str, ...]]

    def add_plugin(self, name: str, obj: Any, *, source: str) -> None:
        """Register a plugin's ``obj`` under its entry-point ``name``, credited to distribution ``source``."""


def distribution(ep: metadata.EntryPoint) -> str:
    """The name of the distribution that declares ``ep`` (its module path if unknown)."""
    return ep.dist.name if ep.dist is not None else ep.value.split(":")[0]


def load_entry_points(registry: PluginHost) -> None:
    """Register every entry point of ``registry.entry_point_group`` (one group, or several);
    record the names that fail to load (``registry.failed_plugins``) and those several
    distributions, or two groups, claim (``registry.conflicts``)."""
    groups = registry.entry_point_group
    claims: dict[str, list[metadata.EntryPoint]] = {}
    for group in (groups,) if isinstance(groups, str) else groups or ():
        for ep in metadata.entry_points(group=group):
            claims.setdefault(ep.name, []).append(ep)
    for name, eps in claims.items():
        if len({(distribution(ep), ep.value) for ep in eps}) > 1:
            _record_conflict(registry, name, eps)
        else:
            _load(registry, eps[0])


def _load(registry: PluginHost, ep: metadata.EntryPoint) -> None:
    """Import one entry point and register it under its name; report and skip a failure."""
    dist = distribution(ep)
    try:
        registry.add_plugin(ep.name, ep.load(), source=dist)
    except Exception as exc:  # a broken plugin must not take the zoo down with it
        registry.failed_plugins[ep.name] = f"{type(exc).__name__}: {exc}"
        warnings.warn(
            f"Skipping {registry.kind} plugin {ep.name!r} from {dist!r} "
            f"(entry point {ep.value!r}): {type(exc).__name__}: {exc}",
            PluginLoadWarning,
            stacklevel=_CALLER,
        )


def _record_conflict(registry: PluginHost, name: str, eps: list[metadata.EntryPoint]) -> None:
    """Refuse a name that several distributions claim, and say which ones."""
    claimants = tuple(sorted({f"{distribution(ep)} ({ep.value})" for ep in eps}))
    registry.conflicts[name] = claimants
    registry.failed_plugins[name] = f"DuplicateNameError: claimed by {' and '.join(claimants)}"
    warnings.warn(
        f"Skipping {registry.kind} plugin {name!r}: it is claimed by {' and '.join(claimants)}; "
        f"looking it up fails until only one of them is installed.",
        PluginLoadWarning,
        stacklevel=_CALLER,
    )
