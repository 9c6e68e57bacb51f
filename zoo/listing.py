"""``python -m zoo list``: every registered attention, position scheme, model and data module,
with aliases and source, plugins included.

Attention and positions are listed from their registries (importing them costs what importing
``zoo`` costs). Models and data modules are Lightning classes, and listing their built-in names
reads them from source (:mod:`zoo.declared`) instead of importing Lightning, unless a plugin may
add to them: an installed entry point of their group, or a plugin imported with ``--import`` that
already loaded their registry. Then the registry itself is listed, plugins and failures included.
"""

from __future__ import annotations

import sys
from importlib import metadata
from typing import Any

from zoo.attention import ATTENTION_REGISTRY, Attention, AttentionLayer
from zoo.declared import declared_registry
from zoo.positions import POSITION_REGISTRY
from zoo.registry import Registry

__all__ = ["print_registries"]


def print_registries(pattern: str | None = None) -> None:
    """Print every registered attention (scoring attentions and attention layers apart), position
    scheme, model and data module with aliases and source; plugins that failed to load last in
    their registry's section."""
    _print_section("attention (scoring, run per head by multi_head)", ATTENTION_REGISTRY, pattern, Attention)
    _print_section("attention layers", ATTENTION_REGISTRY, pattern, AttentionLayer, failures=True)
    _print_section("positions", POSITION_REGISTRY, pattern, object, failures=True)
    _print_section("models", _models(), pattern, object, failures=True)
    _print_section("data modules", _datamodules(), pattern, object, failures=True)


def _models() -> Registry[Any]:
    """The model registry, or the built-in models' declarations where no plugin can add one."""
    if _pluggable("zoo.tasks.registry", "zoo.models"):
        from zoo.tasks import MODEL_REGISTRY

        return MODEL_REGISTRY
    return declared_registry("model", "zoo.tasks", "register_model")


def _datamodules() -> Registry[Any]:
    """The data-module registry, or the built-in data modules' declarations where no plugin can add one."""
    if _pluggable("zoo.datamodules.registry", "zoo.datamodules"):
        from zoo.datamodules import DATAMODULE_REGISTRY

        return DATAMODULE_REGISTRY
    return declared_registry("data module", "zoo.datamodules", "register_datamodule")


def _pluggable(registry_module: str, group: str) -> bool:
    """Whether plugins may have registered here: the registry was imported (by an ``--import``
    plugin) or an installed distribution declares entry points of ``group``."""
    return registry_module in sys.modules or bool(metadata.entry_points(group=group))


def _print_section(
    title: str, registry: Registry[Any], pattern: str | None, kind: type, *, failures: bool = False
) -> None:
    """The entries of ``registry`` that are ``kind`` (and match ``pattern``), one a line."""
    print(f"{title}:")
    names = set(registry.list(pattern))
    for entry in registry.entries():
        of_kind = kind is object or (isinstance(entry.obj, type) and issubclass(entry.obj, kind))
        if entry.name not in names or not of_kind:
            continue
        aliases = f" (aliases: {', '.join(entry.aliases)})" if entry.aliases else ""
        source = "" if entry.source == "attention-zoo" else f" [from {entry.source}]"
        print(f"  {entry.name}{aliases}{source}")
    for name, error in sorted(registry.failed_plugins.items()) if failures else ():
        print(f"  {name} [failed to load: {error}]")
