"""The names the zoo's own models and data modules register, read from their source without
importing it.

Models and data modules are Lightning classes: importing them imports Lightning, about 3.5 s on
a laptop CPU, which ``python -m zoo list`` does not need to print names. Their registration is
a decorator on the class, ``@register_model("gpt", aliases=("language_model",))``, so the names
and aliases can be read from the modules' syntax trees (:mod:`ast`) in milliseconds, the way
Hugging Face transformers lists its models from a static import structure without importing
them. The decorator stays the only place a name is written; ``tests/test_declared.py`` holds the
declarations equal to what importing the modules registers.

Only literal arguments are read (a string name, a tuple of string aliases); a decorator without
a name registers the class's name in snake case, as :meth:`zoo.registry.Registry.register` does.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

from zoo.registry import Registry, snake_case

__all__ = ["Declared", "declared", "declared_registry"]

ROOT = Path(__file__).resolve().parent
"""The ``zoo`` package's folder, where the scanned packages lie."""


@dataclass(frozen=True)
class Declared:
    """A name a built-in module registers, with its aliases."""

    name: str
    aliases: tuple[str, ...] = ()


def declared(package: str, decorator: str) -> list[Declared]:
    """What the modules of ``package`` (``"zoo.tasks"``: every ``.py`` file under its folder)
    register with ``@decorator(...)``, in file order."""
    folder = ROOT.joinpath(*package.split(".")[1:])
    return [entry for path in sorted(folder.rglob("*.py")) for entry in _declared_in(path, decorator)]


def declared_registry(kind: str, package: str, decorator: str) -> Registry[Declared]:
    """A registry of ``kind`` holding :func:`declared`'s entries (the objects are their
    :class:`Declared`): what listing, wildcards and natural sorting read."""
    registry: Registry[Declared] = Registry(kind)
    for entry in declared(package, decorator):
        registry.add(entry.name, entry, aliases=entry.aliases)
    return registry


def _declared_in(path: Path, decorator: str) -> list[Declared]:
    """The registrations by ``@decorator(...)`` on the classes and functions of one file."""
    source = path.read_text(encoding="utf-8")
    if decorator not in source:  # most files register nothing: no syntax tree for them
        return []
    found = []
    for node in ast.walk(ast.parse(source, filename=str(path))):
        if not isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            continue
        for call in node.decorator_list:
            if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == decorator:
                found.append(_registration(call, node.name))
    return found


def _registration(call: ast.Call, default: str) -> Declared:
    """The name and aliases of one decorator call (the object's own name when none is given)."""
    keywords = {keyword.arg: ast.literal_eval(keyword.value) for keyword in call.keywords if keyword.arg}
    name = ast.literal_eval(call.args[0]) if call.args else keywords.get("name")
    return Declared(name or snake_case(default), tuple(keywords.get("aliases", ())))
