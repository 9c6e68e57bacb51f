"""The built-in models' and data modules' names read from source (zoo.declared) equal what
importing them registers, and ``zoo list`` prints them without importing Lightning."""

from __future__ import annotations

import subprocess
import sys

import pytest

from zoo.datamodules import DATAMODULE_REGISTRY
from zoo.declared import declared, declared_registry
from zoo.registry import Registry
from zoo.tasks import MODEL_REGISTRY


def _builtins(registry: Registry) -> dict[str, tuple[str, ...]]:
    return {entry.name: entry.aliases for entry in registry.entries() if entry.source == "attention-zoo"}


@pytest.mark.parametrize(
    ("registry", "package", "decorator"),
    [(MODEL_REGISTRY, "zoo.tasks", "register_model"), (DATAMODULE_REGISTRY, "zoo.datamodules", "register_datamodule")],
    ids=["models", "data_modules"],
)
def test_declarations_equal_the_registry(registry: Registry, package: str, decorator: str) -> None:
    found = {entry.name: entry.aliases for entry in declared(package, decorator)}
    assert found == _builtins(registry)
    assert declared_registry("x", package, decorator).list("*") == sorted(found)


def test_a_decorator_without_a_name_declares_the_snake_case_class_name(tmp_path, monkeypatch) -> None:
    import zoo.declared

    package = tmp_path / "plugs"
    package.mkdir()
    (package / "a.py").write_text(
        "@register_thing()\nclass MyGreatThing: ...\n\n@register_thing('b', aliases=('bee',))\nclass B: ...\n"
    )
    monkeypatch.setattr(zoo.declared, "ROOT", tmp_path)
    assert [(d.name, d.aliases) for d in declared("zoo.plugs", "register_thing")] == [
        ("my_great_thing", ()),
        ("b", ("bee",)),
    ]


def test_list_does_not_import_lightning() -> None:
    code = (
        "import sys\nfrom zoo.commands import main\nmain(['list', '*'])\n"
        "print('LIGHTNING' if any(m.split('.')[0] == 'lightning' for m in sys.modules) else 'NONE')"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "gpt (aliases: language_model)" in out and "mqar" in out
    assert out.strip().endswith("NONE")
