"""A generic, strict name registry with aliases and entry-point plugins.

One :class:`Registry` instance exists per kind of thing the zoo builds (attention variants,
models, data modules). It is deliberately strict, unlike registries that overwrite duplicates
with a warning: a taken name raises unless the same object is registered again or
``override=True`` is passed, and an unknown name raises an error that suggests the closest
registered names.

Installed packages register through Python entry points (``[project.entry-points."zoo.attention"]``
and so on), discovered lazily by :mod:`zoo.entry_points` on the first lookup or listing in each
process, so worker processes of a multi-process run see the same plugins as the parent without
relying on import side effects. A name claimed by two installed distributions is loaded from
neither, and looking it up raises :class:`DuplicateNameError` naming both.

This module imports nothing else from the zoo but its errors (:mod:`zoo.errors`), the keyword
checks (:mod:`zoo.arguments`) and the entry-point loader.
"""

from __future__ import annotations

import fnmatch
import importlib
import inspect
import re
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, replace
from typing import Any, Generic, TypeVar

from zoo.arguments import accepted_keywords, check_kwargs, suggest
from zoo.entry_points import PluginLoadWarning, load_entry_points
from zoo.errors import DuplicateNameError, RegistryError, UnknownArgumentError, UnknownNameError

__all__ = [
    "DuplicateNameError",
    "Entry",
    "PluginLoadWarning",
    "Registry",
    "RegistryError",
    "UnknownArgumentError",
    "UnknownNameError",
    "accepted_keywords",
    "check_kwargs",
    "snake_case",
    "suggest",
]

T = TypeVar("T")

_NAME_PATTERN = re.compile(r"^[a-z][a-z0-9_]*$")
BUILTIN_SOURCE = "attention-zoo"


@dataclass(frozen=True)
class Entry(Generic[T]):
    """One registered object: its canonical name, aliases and where it came from."""

    name: str
    obj: T
    aliases: tuple[str, ...]
    source: str


def _natural_key(text: str) -> list[Any]:
    """Sort key that orders ``head2`` before ``head10``."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text)]


def _same_definition(a: object, b: object) -> bool:
    """True for the same object, or the same class defined again (a module reloaded)."""
    if a is b:
        return True
    return (
        inspect.isclass(a) and inspect.isclass(b) and a.__module__ == b.__module__ and a.__qualname__ == b.__qualname__
    )


class Registry(Generic[T]):
    """Maps lowercase snake-case names (and aliases) to classes or factories.

    Args:
        kind: What is registered, used in messages (``"attention"``).
        base: If given, registered classes must subclass it (a tuple allows several bases).
        entry_point_group: The entry-point group installed plugins use (``"zoo.models"``), or
            several (attention: ``("zoo.attention", "zoo.attention_layers")``, one per kind).
        builtin_modules: Modules of the zoo's own entries, imported on the first lookup (before
            the plugins), so that importing the registry's package stays light.
    """

    def __init__(
        self,
        kind: str,
        base: type | tuple[type, ...] | None = None,
        entry_point_group: str | tuple[str, ...] | None = None,
        builtin_modules: tuple[str, ...] = (),
    ) -> None:
        self.kind = kind
        self.base = base
        self.entry_point_group = entry_point_group
        self.builtin_modules = builtin_modules
        self._entries: dict[str, Entry[T]] = {}
        self._aliases: dict[str, str] = {}
        self._plugins_loaded = entry_point_group is None and not builtin_modules
        #: entry-point names that could not be registered, with the reason (shown by ``zoo list``)
        self.failed_plugins: dict[str, str] = {}
        #: entry-point names claimed by more than one distribution, with those distributions
        self.conflicts: dict[str, tuple[str, ...]] = {}

    # -- registration -------------------------------------------------------------------

    def register(
        self,
        name: str | None = None,
        *,
        aliases: tuple[str, ...] | list[str] = (),
        override: bool = False,
        source: str | None = None,
    ) -> Callable[[T], T]:
        """Decorator form of :meth:`add`; ``name`` defaults to the object's snake-case name."""

        def decorator(obj: T) -> T:
            self.add(name or snake_case(obj.__name__), obj, aliases=aliases, override=override, source=source)  # type: ignore[attr-defined]
            return obj

        return decorator

    def add(
        self,
        name: str,
        obj: T,
        *,
        aliases: tuple[str, ...] | list[str] = (),
        override: bool = False,
        source: str | None = None,
    ) -> None:
        """Register ``obj`` under ``name`` and ``aliases``.

        Raises:
            ValueError: the name is not lowercase snake case, or ``obj`` is not a subclass of
                the registry's base.
            DuplicateNameError: a name or alias is taken by another object and ``override`` is
                False.
        """
        names = (name, *aliases)
        for candidate in names:
            if not isinstance(candidate, str) or not _NAME_PATTERN.match(candidate):
                raise ValueError(
                    f"Invalid {self.kind} name {candidate!r}: use lowercase snake case "
                    f"(letters, digits and underscores, starting with a letter), e.g. 'my_{self.kind}'."
                )
        if self.base is not None and not (inspect.isclass(obj) and issubclass(obj, self.base)):
            bases = self.base if isinstance(self.base, tuple) else (self.base,)
            expected = " or ".join(b.__qualname__ for b in bases)
            raise ValueError(f"Cannot register {obj!r} as {self.kind} {name!r}: it must be a subclass of {expected}.")
        if source is None:
            module = getattr(obj, "__module__", "") or ""
            source = BUILTIN_SOURCE if module.split(".")[0] == "zoo" else module

        existing = self._entries.get(name)
        if existing is not None and existing.obj is obj and set(aliases) <= set(existing.aliases):
            return  # the same object again: a no-op
        for candidate in names:
            owner = self._owner(candidate)
            if owner is None or override or _same_definition(self._entries[owner].obj, obj):
                continue
            what = "name" if candidate == owner else f"alias of {owner!r}"
            raise DuplicateNameError(
                f"The {self.kind} name {candidate!r} is already registered (as the {what}, "
                f"for {_describe(self._entries[owner].obj)}). Choose another name, or pass "
                f"override=True to replace it on purpose."
            )
        for candidate in names:  # replace: the same definition again, or override=True
            owner = self._owner(candidate)
            if owner == candidate:
                self._remove(owner)
            elif owner is not None:
                old = self._entries[owner]
                self._entries[owner] = replace(old, aliases=tuple(a for a in old.aliases if a != candidate))
                del self._aliases[candidate]
        self._entries[name] = Entry(name=name, obj=obj, aliases=tuple(aliases), source=source)
        for alias in aliases:
            self._aliases[alias] = name

    def _owner(self, name: str) -> str | None:
        """The canonical name that holds ``name`` as its name or alias, if any."""
        return name if name in self._entries else self._aliases.get(name)

    def _remove(self, name: str) -> None:
        entry = self._entries.pop(name, None)
        if entry is not None:
            for alias in entry.aliases:
                self._aliases.pop(alias, None)

    def unregister(self, name: str) -> None:
        """Remove a name and its aliases (mainly for tests and interactive sessions)."""
        self._remove(self.resolve(name))

    # -- lookup ---------------------------------------------------------------------------

    def resolve(self, name: str, *, candidates: Collection[str] | None = None) -> str:
        """The canonical name for ``name`` or one of its aliases.

        Raises:
            UnknownNameError: with the closest registered names as suggestions, among
                ``candidates`` (canonical names: those that would serve where ``name`` is asked
                for) when given, and their aliases.
        """
        self._load_plugins()
        if not isinstance(name, str):
            raise TypeError(f"A {self.kind} name must be a string, got {type(name).__name__}.")
        key = name.strip().lower().replace("-", "_")
        if key in self._entries:
            return key
        if key in self._aliases:
            return self._aliases[key]
        if key in self.conflicts:
            raise DuplicateNameError(
                f"The {self.kind} name {key!r} is claimed by more than one installed plugin "
                f"({', '.join(self.conflicts[key])}), so neither is used. Uninstall all but one of "
                f"them (pip uninstall ...), or ask their authors to rename one."
            )
        if key in self.failed_plugins:
            raise UnknownNameError(
                f"The {self.kind} plugin {key!r} is installed but could not be loaded: {self.failed_plugins[key]}"
            )
        listed = self.list() if candidates is None else sorted(candidates, key=_natural_key)
        aliases = [alias for alias, target in self._aliases.items() if target in listed]
        close = suggest(key, sorted([*listed, *aliases], key=_natural_key))
        hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        failed = ""
        if self.failed_plugins:
            failed = f" (Plugins that failed to load: {', '.join(sorted(self.failed_plugins))}.)"
        what = "Registered" if candidates is None else "Names that would serve here"
        raise UnknownNameError(f"Unknown {self.kind} {name!r}.{hint} {what}: {', '.join(listed) or 'none'}.{failed}")

    def get(self, name: str, *, candidates: Collection[str] | None = None) -> T:
        """The object registered under ``name`` (or an alias); ``candidates`` as :meth:`resolve`'s."""
        return self._entries[self.resolve(name, candidates=candidates)].obj

    def entry(self, name: str) -> Entry[T]:
        """The full :class:`Entry` for ``name`` (or an alias)."""
        return self._entries[self.resolve(name)]

    def name_of(self, obj: object) -> str | None:
        """The canonical name under which ``obj`` is registered, if any."""
        self._load_plugins()
        for entry in self._entries.values():
            if entry.obj is obj:
                return entry.name
        return None

    def create(self, name: str, /, **kwargs: Any) -> Any:
        """Instantiate the object registered under ``name`` with ``kwargs``.

        Keyword arguments are checked against the constructor's signature first, so a misspelt
        keyword names the closest accepted ones instead of failing deep inside a constructor.
        """
        entry = self.entry(name)
        check_kwargs(entry.obj, kwargs, what=f"{self.kind} {entry.name!r}")
        return entry.obj(**kwargs)  # type: ignore[operator]

    def list(self, pattern: str | None = None, *, include_aliases: bool = False) -> list[str]:
        """Registered names, naturally sorted, optionally filtered by a wildcard pattern.

        ``pattern`` uses shell wildcards (``"*head*"``, ``"dot_*"``); it also matches aliases,
        listing the canonical name they belong to.
        """
        self._load_plugins()
        names: set[str] = set()
        for entry in self._entries.values():
            candidates = (entry.name, *entry.aliases)
            if pattern is None or any(fnmatch.fnmatchcase(c, pattern.lower()) for c in candidates):
                names.add(entry.name)
                if include_aliases:
                    names.update(entry.aliases)
        return sorted(names, key=_natural_key)

    def entries(self) -> list[Entry[T]]:
        """Every entry, naturally sorted by name."""
        return [self._entries[name] for name in self.list()]

    def __contains__(self, name: object) -> bool:
        if not isinstance(name, str):
            return False
        self._load_plugins()
        key = name.strip().lower().replace("-", "_")
        return key in self._entries or key in self._aliases

    def __iter__(self) -> Iterator[str]:
        return iter(self.list())

    def __len__(self) -> int:
        self._load_plugins()
        return len(self._entries)

    def __repr__(self) -> str:
        return f"Registry(kind={self.kind!r}, names={self.list()})"

    # -- plugins --------------------------------------------------------------------------

    def _load_plugins(self) -> None:
        """Import the built-in modules, then load entry points of this registry's group
        (:mod:`zoo.entry_points`), once per process."""
        if self._plugins_loaded:
            return
        self._plugins_loaded = True
        for module in self.builtin_modules:
            importlib.import_module(module)
        if self.entry_point_group is not None:
            load_entry_points(self)

    def add_plugin(self, name: str, obj: T, *, source: str) -> None:
        """Register an installed plugin's ``obj`` under its entry-point ``name``, credited to its
        distribution ``source``; an object that registered itself there on import keeps its aliases."""
        existing = self._entries.get(name)
        if existing is not None and existing.obj is obj:
            self._entries[name] = replace(existing, source=source)
        else:
            self.add(name, obj, source=source)

    def reload_plugins(self) -> None:
        """Discover entry points again (after installing a plugin in a running process)."""
        self._plugins_loaded = self.entry_point_group is None and not self.builtin_modules
        self.failed_plugins.clear()
        self.conflicts.clear()
        self._load_plugins()


def snake_case(name: str) -> str:
    """``MyAttention`` -> ``my_attention``: the name a registration without one gets."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def _describe(obj: object) -> str:
    module = getattr(obj, "__module__", None)
    qualname = getattr(obj, "__qualname__", None)
    return f"{module}.{qualname}" if module and qualname else repr(obj)
